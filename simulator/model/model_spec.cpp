// Parsing of the transformer spec, from our own JSON and from Hugging Face config.json files.
#include "simulator/model/model_spec.hpp"

#include <algorithm>
#include <string>

namespace shardplan {

const char* to_string(MlpKind k) {
  return k == MlpKind::kSwiGlu ? "swiglu" : k == MlpKind::kGeGlu ? "geglu" : "gelu";
}
const char* to_string(QkNormKind k) {
  return k == QkNormKind::kNone ? "none" : k == QkNormKind::kHead ? "head" : "full";
}
const char* to_string(NormPlacement k) {
  return k == NormPlacement::kPre ? "pre" : k == NormPlacement::kPost ? "post" : "sandwich";
}
const char* to_string(LocalAttention k) {
  return k == LocalAttention::kSliding ? "sliding" : "chunked";
}

bool MoeSpec::is_moe_block(int b) const {
  if (experts <= 0 || b < first_dense || interval <= 0 || b % interval != phase) return false;
  return std::find(dense_layers.begin(), dense_layers.end(), b) == dense_layers.end();
}
const char* to_string(NormKind k) {
  return k == NormKind::kRmsNorm ? "rmsnorm" : "layernorm";
}
const char* to_string(PositionKind k) {
  return k == PositionKind::kRotary ? "rotary" : k == PositionKind::kLearned ? "learned" : "alibi";
}

template <class E>
static E parse_enum(JsonObj& o, const std::string& key,
                    std::initializer_list<std::pair<const char*, E>> values, E def) {
  if (!o.has(key)) {
    o.raw_optional(key);
    return def;
  }
  std::string v = o.str(key);
  std::vector<std::string> names;
  for (auto& [n, e] : values) {
    if (v == n) return e;
    names.emplace_back(n);
  }
  o.fail(key, "unknown value \"" + v + "\"; expected one of: " + join_names(names));
}

constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;  // 16M: wider than any real model dimension
// Blocks and blocks x experts (one MLP per expert per block) bound the graph size so that building it takes
// well under a second even under sanitizers; both are far above real models (405B: 126 blocks; DeepSeek-V3:
// 61 x 256).
constexpr std::int64_t kMaxLayers = 10000, kMaxHeads = 100000, kMaxExpertMlps = std::int64_t{1} << 15;

ModelSpec parse_model_spec(JsonObj o) {
  ModelSpec s;
  if (o.has("schema")) {
    std::string schema = o.str("schema");
    if (schema != "shardplan.model/1")
      o.fail("schema", "expected \"shardplan.model/1\", got \"" + schema + "\"");
  }
  o.allow({"source", "notes", "sources"});
  s.name = o.str("name", "custom");
  s.description = o.str("description", "");
  s.layers = static_cast<int>(o.integer("layers", 1, kMaxLayers));
  s.hidden = o.integer("hidden", 1, kMaxDim);
  s.heads = static_cast<int>(o.integer("heads", 1, 100000));
  s.kv_heads = static_cast<int>(o.integer("kv_heads", s.heads, 1, 100000));
  s.head_dim = o.integer("head_dim", s.hidden / s.heads, 1, kMaxDim);
  s.ffn_hidden = o.integer("ffn_hidden", 1, kMaxDim);
  s.vocab = o.integer("vocab", 1, kMaxDim);
  s.mlp = parse_enum(o, "mlp",
                     {{"swiglu", MlpKind::kSwiGlu}, {"gelu", MlpKind::kGelu}, {"geglu", MlpKind::kGeGlu}},
                     MlpKind::kSwiGlu);
  s.norm = parse_enum(o, "norm", {{"rmsnorm", NormKind::kRmsNorm}, {"layernorm", NormKind::kLayerNorm}},
                      NormKind::kRmsNorm);
  s.attn_bias = o.boolean("attn_bias", false);
  s.mlp_bias = o.boolean("mlp_bias", false);
  s.norm_bias = o.boolean("norm_bias", s.norm == NormKind::kLayerNorm);
  s.qkv_bias_only = o.boolean("qkv_bias_only", false);
  s.embedding_norm = o.boolean("embedding_norm", false);
  s.tied_embeddings = o.boolean("tied_embeddings", false);
  s.positions = parse_enum(o, "positions",
                           {{"rotary", PositionKind::kRotary},
                            {"learned", PositionKind::kLearned},
                            {"alibi", PositionKind::kAlibi}},
                           PositionKind::kRotary);
  s.max_positions = o.integer("max_positions", 0, 0, kMaxDim);
  if (auto moe = o.optional_object("moe")) {
    s.moe.experts = static_cast<int>(moe->integer("experts", 1, 100000));
    s.moe.top_k = static_cast<int>(moe->integer("top_k", 1, s.moe.experts));
    s.moe.ffn_hidden = moe->integer("ffn_hidden", 0, 0, kMaxDim);
    s.moe.shared_experts = static_cast<int>(moe->integer("shared_experts", 0, 0, 1024));
    s.moe.shared_ffn_hidden = moe->integer("shared_ffn_hidden", 0, 0, kMaxDim);
    s.moe.first_dense = static_cast<int>(moe->integer("first_dense", 0, 0, kMaxLayers));
    s.moe.interval = static_cast<int>(moe->integer("interval", 1, 1, kMaxLayers));
    s.moe.phase = static_cast<int>(moe->integer("phase", 0, 0, s.moe.interval - 1));
    if (const Json* dl = moe->raw_optional("dense_layers")) {
      if (!dl->is_array()) moe->fail("dense_layers", "expected an array of block indices");
      for (std::size_t i = 0; i < dl->size(); ++i)
        s.moe.dense_layers.push_back(static_cast<int>(json_integer(
            (*dl)[i], o.file(), moe->pointer("dense_layers") + "/" + std::to_string(i), 0, kMaxLayers)));
    }
    s.moe.router_bias = moe->boolean("router_bias", false);
    s.moe.mxfp4_experts = parse_enum(*moe, "checkpoint_format", {{"bf16", false}, {"mxfp4", true}}, false);
    moe->finish();
  }
  if (auto mla = o.optional_object("mla")) {
    s.mla.q_lora_rank = mla->integer("q_lora_rank", 0, 0, kMaxDim);
    s.mla.kv_lora_rank = mla->integer("kv_lora_rank", 1, kMaxDim);
    s.mla.qk_nope_head_dim = mla->integer("qk_nope_head_dim", 1, kMaxDim);
    s.mla.qk_rope_head_dim = mla->integer("qk_rope_head_dim", 1, kMaxDim);
    s.mla.v_head_dim = mla->integer("v_head_dim", 1, kMaxDim);
    mla->finish();
  }
  s.seq = o.integer("seq", 4096, 1, kMaxDim);
  s.qk_norm = parse_enum(
      o, "qk_norm", {{"none", QkNormKind::kNone}, {"head", QkNormKind::kHead}, {"full", QkNormKind::kFull}},
      QkNormKind::kNone);
  s.norm_placement = parse_enum(
      o, "norm_placement",
      {{"pre", NormPlacement::kPre}, {"post", NormPlacement::kPost}, {"sandwich", NormPlacement::kSandwich}},
      NormPlacement::kPre);
  s.fused_qkv = o.boolean("fused_qkv", false);
  s.fused_gate_up = o.boolean("fused_gate_up", false);
  s.window = o.integer("window", 0, 0, kMaxDim);
  s.local_attention = parse_enum(
      o, "local_attention", {{"sliding", LocalAttention::kSliding}, {"chunked", LocalAttention::kChunked}},
      LocalAttention::kSliding);
  s.global_every = static_cast<int>(o.integer("global_every", 0, 0, kMaxLayers));
  s.attn_softcap = o.number("attn_softcap", 0.0, 0.0, 1e6);
  s.final_softcap = o.number("final_softcap", 0.0, 0.0, 1e6);
  s.mtp_layers = static_cast<int>(o.integer("mtp_layers", 0, 0, 16));
  s.attn_sinks = o.boolean("attn_sinks", false);
  o.finish();
  validate_model_spec(s, o.file());
  return s;
}

void validate_model_spec(const ModelSpec& s, const std::string& file) {
  // parse_model_spec reads these with the same ranges; Hugging Face configs and code-built specs meet them
  // here.
  auto range = [&](const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi)
      throw InputError(file, std::string("/") + key,
                       "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  };
  range("layers", s.layers, 1, kMaxLayers);
  range("hidden", s.hidden, 1, kMaxDim);
  range("heads", s.heads, 1, kMaxHeads);
  range("kv_heads", s.kv_heads, 1, kMaxHeads);
  range("head_dim", s.head_dim, 1, kMaxDim);
  range("ffn_hidden", s.ffn_hidden, 1, kMaxDim);
  range("vocab", s.vocab, 1, kMaxDim);
  range("max_positions", s.max_positions, 0, kMaxDim);
  range("seq", s.seq, 1, kMaxDim);
  if (s.moe.experts != 0 || s.moe.top_k != 0) {
    range("moe/experts", s.moe.experts, 1, kMaxHeads);
    range("moe/top_k", s.moe.top_k, 1, s.moe.experts);
    range("moe/ffn_hidden", s.moe.ffn_hidden, 0, kMaxDim);
    range("moe/shared_experts", s.moe.shared_experts, 0, 1024);
    range("moe/shared_ffn_hidden", s.moe.shared_ffn_hidden, 0, kMaxDim);
    range("moe/first_dense", s.moe.first_dense, 0, kMaxLayers);
    range("moe/interval", s.moe.interval, 1, kMaxLayers);
    range("moe/phase", s.moe.phase, 0, s.moe.interval - 1);
    for (int b : s.moe.dense_layers) range("moe/dense_layers", b, 0, s.layers - 1);
    bool any = false;
    for (int b = 0; b < s.layers && !any; ++b) any = s.moe.is_moe_block(b);
    if (!any)
      throw InputError(file, "/moe", "no block is a mixture of experts (check first_dense, interval, phase)");
  }
  if (s.mla.enabled()) {
    range("mla/q_lora_rank", s.mla.q_lora_rank, 0, kMaxDim);
    range("mla/kv_lora_rank", s.mla.kv_lora_rank, 1, kMaxDim);
    range("mla/qk_nope_head_dim", s.mla.qk_nope_head_dim, 1, kMaxDim);
    range("mla/qk_rope_head_dim", s.mla.qk_rope_head_dim, 1, kMaxDim);
    range("mla/v_head_dim", s.mla.v_head_dim, 1, kMaxDim);
    if (s.fused_qkv)
      throw InputError(file, "/fused_qkv", "multi-head latent attention has no fused qkv projection");
    if (s.qk_norm != QkNormKind::kNone)
      throw InputError(file, "/qk_norm", "multi-head latent attention norms its latents, not q and k");
  }
  range("window", s.window, 0, kMaxDim);
  range("global_every", s.global_every, 0, kMaxLayers);
  range("mtp_layers", s.mtp_layers, 0, 16);
  if (static_cast<std::int64_t>(s.layers + s.mtp_layers) * std::max(1, s.moe.experts) > kMaxExpertMlps)
    throw InputError(file, "/moe/experts",
                     std::to_string(s.layers) + " blocks x " + std::to_string(s.moe.experts) +
                         " experts is more than the " + std::to_string(kMaxExpertMlps) +
                         " expert MLPs modelled");
  if (s.heads % s.kv_heads != 0)
    throw InputError(file, "/kv_heads",
                     "heads (" + std::to_string(s.heads) + ") must be a multiple of kv_heads (" +
                         std::to_string(s.kv_heads) + ")");
  if (s.positions == PositionKind::kLearned && s.max_positions <= 0)
    throw InputError(file, "/max_positions", "learned positions need max_positions > 0");
}

Json model_spec_to_json(const ModelSpec& s) {
  Json j = {{"schema", "shardplan.model/1"},
            {"name", s.name},
            {"layers", s.layers},
            {"hidden", s.hidden},
            {"heads", s.heads},
            {"kv_heads", s.kv_heads},
            {"head_dim", s.head_dim},
            {"ffn_hidden", s.ffn_hidden},
            {"vocab", s.vocab},
            {"mlp", to_string(s.mlp)},
            {"norm", to_string(s.norm)},
            {"attn_bias", s.attn_bias},
            {"mlp_bias", s.mlp_bias},
            {"norm_bias", s.norm_bias},
            {"tied_embeddings", s.tied_embeddings},
            {"positions", to_string(s.positions)},
            {"seq", s.seq}};
  if (!s.description.empty()) j["description"] = s.description;
  if (s.qkv_bias_only) j["qkv_bias_only"] = true;
  if (s.embedding_norm) j["embedding_norm"] = true;
  if (s.positions == PositionKind::kLearned) j["max_positions"] = s.max_positions;
  if (s.moe.experts > 0) {
    Json m = {{"experts", s.moe.experts}, {"top_k", s.moe.top_k}};
    if (s.moe.ffn_hidden > 0) m["ffn_hidden"] = s.moe.ffn_hidden;
    if (s.moe.shared_experts > 0) m["shared_experts"] = s.moe.shared_experts;
    if (s.moe.shared_ffn_hidden > 0) m["shared_ffn_hidden"] = s.moe.shared_ffn_hidden;
    if (s.moe.first_dense > 0) m["first_dense"] = s.moe.first_dense;
    if (s.moe.interval != 1) m["interval"] = s.moe.interval, m["phase"] = s.moe.phase;
    if (!s.moe.dense_layers.empty()) m["dense_layers"] = s.moe.dense_layers;
    if (s.moe.router_bias) m["router_bias"] = true;
    if (s.moe.mxfp4_experts) m["checkpoint_format"] = "mxfp4";
    j["moe"] = m;
  }
  if (s.mla.enabled())
    j["mla"] = {{"q_lora_rank", s.mla.q_lora_rank},
                {"kv_lora_rank", s.mla.kv_lora_rank},
                {"qk_nope_head_dim", s.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", s.mla.qk_rope_head_dim},
                {"v_head_dim", s.mla.v_head_dim}};
  if (s.qk_norm != QkNormKind::kNone) j["qk_norm"] = to_string(s.qk_norm);
  if (s.norm_placement != NormPlacement::kPre) j["norm_placement"] = to_string(s.norm_placement);
  if (s.fused_qkv) j["fused_qkv"] = true;
  if (s.fused_gate_up) j["fused_gate_up"] = true;
  if (s.window > 0) {
    j["window"] = s.window;
    j["local_attention"] = to_string(s.local_attention);
    j["global_every"] = s.global_every;
  }
  if (s.attn_softcap > 0) j["attn_softcap"] = s.attn_softcap;
  if (s.final_softcap > 0) j["final_softcap"] = s.final_softcap;
  if (s.mtp_layers > 0) j["mtp_layers"] = s.mtp_layers;
  if (s.attn_sinks) j["attn_sinks"] = true;
  return j;
}

// --- Hugging Face config.json
// -------------------------------------------------------------------------------

namespace {
struct HfReader {
  const Json& j;
  const std::string& file;
  std::string prefix;  ///< JSON pointer of the object read ("" or "/text_config")
  std::string at(const char* key) const { return prefix + "/" + key; }
  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }
  std::int64_t integer(const char* key) const {
    if (!has(key)) throw InputError(file, at(key), "required field is missing");
    return json_integer(j.at(key), file, at(key), 1, kMaxDim * 64);
  }
  std::int64_t integer(const char* key, std::int64_t def) const { return has(key) ? integer(key) : def; }
  /// A count that may be 0 (num_nextn_predict_layers, first_k_dense_replace).
  std::int64_t count(const char* key, std::int64_t def) const {
    return has(key) ? json_integer(j.at(key), file, at(key), 0, kMaxDim) : def;
  }
  double number(const char* key, double def) const {
    return has(key) ? json_number(j.at(key), file, at(key), 0.0, 1e6) : def;
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j.at(key).is_boolean()) throw InputError(file, at(key), "expected true or false");
    return j.at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    return json_string(j.at(key), file, at(key));
  }
  std::vector<int> int_list(const char* key) const {
    std::vector<int> v;
    if (!has(key)) return v;
    if (!j.at(key).is_array()) throw InputError(file, at(key), "expected an array of integers");
    for (std::size_t i = 0; i < j.at(key).size(); ++i)
      v.push_back(
          static_cast<int>(json_integer(j.at(key)[i], file, at(key) + "/" + std::to_string(i), 0, kMaxDim)));
    return v;
  }
  /// The period N of a "layer_types" list whose every N-th layer (1-based) is "full_attention" and the others
  /// local; 0 when all are local. Throws for any other arrangement.
  int global_every_from_layer_types(int layers) const {
    const Json& lt = j.at("layer_types");
    if (!lt.is_array() || static_cast<int>(lt.size()) != layers)
      throw InputError(file, at("layer_types"),
                       "expected one entry per layer (" + std::to_string(layers) + ")");
    int first_full = -1;
    for (int b = 0; b < layers && first_full < 0; ++b)
      if (json_string(lt[static_cast<std::size_t>(b)], file, at("layer_types")) == "full_attention")
        first_full = b;
    const int every = first_full + 1;
    for (int b = 0; b < layers; ++b) {
      const bool full =
          json_string(lt[static_cast<std::size_t>(b)], file, at("layer_types")) == "full_attention";
      if (full != (every > 0 && (b + 1) % every == 0))
        throw InputError(file, at("layer_types") + "/" + std::to_string(b),
                         "only a periodic pattern (every N-th layer global, the others local) is modelled");
    }
    return every;
  }
};

// Rotary decoder families that share Llama's field names (num_hidden_layers, hidden_size, ...).
bool llama_like(const std::string& t) {
  for (const char* n :
       {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3", "olmo2", "gemma2", "gemma3",
        "gemma3_text", "llama4", "llama4_text", "deepseek_v2", "deepseek_v3", "gpt_oss"})
    if (t == n) return true;
  return false;
}
}  // namespace

namespace {
// The Llama-like families. Defaults for fields a config may omit are those of the family's transformers
// config class (transformers 4.51: Gemma2Config, Gemma3TextConfig, Llama4TextConfig); the structure of each
// family is that of its transformers modeling file (modeling_<type>.py).
ModelSpec parse_hf_config_text(const Json& j, const std::string& file, const std::string& prefix,
                               const std::string& outer_type) {
  HfReader r{j, file, prefix};
  std::string type = r.string("model_type", outer_type);
  if (type == "gemma3_text") type = "gemma3";
  if (type == "llama4_text") type = "llama4";
  const bool gemma = type == "gemma2" || type == "gemma3", llama4 = type == "llama4";
  const bool deepseek = type == "deepseek_v2" || type == "deepseek_v3";
  ModelSpec s;
  s.name = type;
  // Gemma and Llama 4 config classes give every field a default (the 2B/9B-style Gemma 2 and Scout values).
  auto dflt = [&](std::int64_t gemma2, std::int64_t gemma3, std::int64_t l4) -> std::int64_t {
    return type == "gemma2" ? gemma2 : type == "gemma3" ? gemma3 : l4;
  };
  auto get = [&](const char* key, std::int64_t g2, std::int64_t g3, std::int64_t l4) {
    return gemma || llama4 ? r.integer(key, dflt(g2, g3, l4)) : r.integer(key);
  };
  s.layers = static_cast<int>(get("num_hidden_layers", 26, 26, 48));
  s.hidden = get("hidden_size", 2304, 2304, 5120);
  s.heads = static_cast<int>(get("num_attention_heads", 8, 8, 40));
  s.kv_heads = static_cast<int>(r.integer("num_key_value_heads", gemma ? 4 : llama4 ? 8 : s.heads));
  s.head_dim = r.integer("head_dim", gemma ? 256 : s.hidden / s.heads);
  s.ffn_hidden = get("intermediate_size", 9216, 9216, 8192);
  s.vocab = get("vocab_size", 256000, 262208, 202048);
  s.mlp = gemma ? MlpKind::kGeGlu : MlpKind::kSwiGlu;
  s.norm = NormKind::kRmsNorm;
  s.attn_bias = r.boolean("attention_bias", type == "qwen2");
  s.mlp_bias = r.boolean("mlp_bias", false);
  s.tied_embeddings = r.boolean("tie_word_embeddings", gemma);
  s.positions = PositionKind::kRotary;
  s.seq = std::min<std::int64_t>(r.integer("max_position_embeddings", 4096), 8192);
  if (type == "qwen2") s.qkv_bias_only = true;
  if (type == "mixtral") {
    s.moe.experts = static_cast<int>(r.integer("num_local_experts"));
    s.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
  }
  if (type == "qwen3" || type == "qwen3_moe") {
    // Qwen3Attention: q_norm and k_norm are RMSNorm(head_dim); no qkv bias (attention_bias false), unlike
    // Qwen2.
    s.qk_norm = QkNormKind::kHead;
    if (r.boolean("use_sliding_window", false))
      throw InputError(file, r.at("use_sliding_window"),
                       "sliding windows on the layers from max_window_layers on are not modelled");
  }
  if (type == "qwen3_moe" && r.count("num_experts", 0) > 0) {
    // Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers and (layer_idx + 1) % decoder_sparse_step == 0.
    s.moe.experts = static_cast<int>(r.integer("num_experts"));
    s.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
    s.moe.ffn_hidden = r.integer("moe_intermediate_size");
    s.moe.interval = static_cast<int>(r.integer("decoder_sparse_step", 1));
    s.moe.phase = s.moe.interval - 1;
    s.moe.dense_layers = r.int_list("mlp_only_layers");
  }
  if (type == "phi3") {
    // Phi3Attention: one qkv_proj; Phi3MLP: one gate_up_proj. The window applies to every layer.
    s.fused_qkv = s.fused_gate_up = true;
    s.window = r.integer("sliding_window", 0);
  }
  if (type == "olmo2") {
    // Olmo2Attention: q_norm = RMSNorm(heads·head_dim), k_norm = RMSNorm(kv_heads·head_dim);
    // Olmo2DecoderLayer norms the attention and MLP outputs (post_attention_layernorm,
    // post_feedforward_layernorm), not the inputs.
    s.qk_norm = QkNormKind::kFull;
    s.norm_placement = NormPlacement::kPost;
  }
  if (gemma) {
    // Gemma2/3DecoderLayer: input, post-attention, pre-feedforward and post-feedforward norms. Gemma 2
    // alternates sliding (even layers) and global attention; Gemma 3 makes every sliding_window_pattern-th
    // layer global.
    s.norm_placement = NormPlacement::kSandwich;
    s.window = r.integer("sliding_window", 4096);
    if (r.has("layer_types"))
      s.global_every = r.global_every_from_layer_types(s.layers);
    else
      s.global_every = static_cast<int>(type == "gemma2" ? 2 : r.integer("sliding_window_pattern", 6));
    s.attn_softcap = r.number("attn_logit_softcapping", type == "gemma2" ? 50.0 : 0.0);
    s.final_softcap = r.number("final_logit_softcapping", type == "gemma2" ? 30.0 : 0.0);
    if (type == "gemma3")
      s.qk_norm = QkNormKind::kHead;  // Gemma3Attention q_norm, k_norm = RMSNorm(head_dim)
  }
  if (llama4) {
    // Llama4TextMoe: num_local_experts routed experts of intermediate_size, a shared expert of the same
    // width, a router; dense layers (not in moe_layers) use intermediate_size_mlp. moe_layers defaults to
    // every interleave_moe_layer_step-th layer. The L2 q/k norm (use_qk_norm) has no weights.
    s.ffn_hidden = r.integer("intermediate_size_mlp", 16384);
    s.moe.experts = static_cast<int>(r.integer("num_local_experts", 16));
    s.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok", 1));
    s.moe.ffn_hidden = r.integer("intermediate_size", 8192);
    s.moe.shared_experts = 1;
    if (r.has("moe_layers")) {
      const std::vector<int> moe_layers = r.int_list("moe_layers");
      for (int b = 0; b < s.layers; ++b)
        if (std::find(moe_layers.begin(), moe_layers.end(), b) == moe_layers.end())
          s.moe.dense_layers.push_back(b);
    } else {
      s.moe.interval = static_cast<int>(r.integer("interleave_moe_layer_step", 1));
      s.moe.phase = s.moe.interval - 1;
    }
    // Layers with RoPE use chunked attention (attention_chunk_size); every no_rope_layer_interval-th layer
    // has no RoPE and attends globally (Llama4TextConfig layer_types).
    s.window = r.integer("attention_chunk_size", 0);
    s.local_attention = LocalAttention::kChunked;
    const std::vector<int> no_rope = r.int_list("no_rope_layers");  // 1 = RoPE (chunked), 0 = NoPE (global)
    if (r.has("layer_types")) {
      s.global_every = r.global_every_from_layer_types(s.layers);
    } else if (!no_rope.empty()) {
      if (static_cast<int>(no_rope.size()) != s.layers)
        throw InputError(file, r.at("no_rope_layers"),
                         "expected one entry per layer (" + std::to_string(s.layers) + ")");
      int first_global = -1;
      for (int b = 0; b < s.layers && first_global < 0; ++b)
        if (no_rope[static_cast<std::size_t>(b)] == 0) first_global = b;
      s.global_every = first_global + 1;
      for (int b = 0; b < s.layers; ++b)
        if ((no_rope[static_cast<std::size_t>(b)] == 0) !=
            (s.global_every > 0 && (b + 1) % s.global_every == 0))
          throw InputError(file, r.at("no_rope_layers") + "/" + std::to_string(b),
                           "only a periodic pattern (every N-th layer without RoPE) is modelled");
    } else {
      s.global_every = static_cast<int>(r.integer("no_rope_layer_interval", 4));
    }
  }
  if (type == "gpt_oss") {
    // transformers models/gpt_oss (GptOssConfig, modeling_gpt_oss.py; openai/gpt-oss-{20b,120b} config.json):
    // every layer a MoE (GptOssMLP: GptOssTopKRouter weight [experts, h] + bias [experts]; GptOssExperts
    // gate_up_proj [experts, h, 2f] + gate_up_proj_bias [experts, 2f], down_proj [experts, f, h] +
    // down_proj_bias [experts, h]: one fused gate/up weight, biases on both), q/k/v/o projections with biases
    // (attention_bias), a learned sink logit per head (GptOssAttention.sinks [heads]), layer_types
    // alternating sliding_attention (sliding_window) and full_attention, RMSNorm, untied embeddings.
    // quantization_config mxfp4: the checkpoint's expert weight matrices are MXFP4 (not their biases, the
    // router, attention, embeddings or head: modules_to_not_convert).
    s.moe.experts = static_cast<int>(r.integer("num_local_experts"));
    s.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
    s.moe.ffn_hidden = s.ffn_hidden;
    s.moe.router_bias = true;
    s.mlp_bias = true;
    s.fused_gate_up = true;
    s.attn_sinks = true;
    s.attn_bias = r.boolean("attention_bias", true);
    s.window = r.integer("sliding_window", 128);
    s.local_attention = LocalAttention::kSliding;
    if (r.has("layer_types")) s.global_every = r.global_every_from_layer_types(s.layers);
    if (j.contains("quantization_config") && j.at("quantization_config").is_object()) {
      const Json& q = j.at("quantization_config");
      s.moe.mxfp4_experts = q.contains("quant_method") && q.at("quant_method") == "mxfp4";
    }
  }
  if (deepseek) {
    // DeepseekV3Attention (MLA): q_a_proj, q_a_layernorm, q_b_proj (or q_proj without q_lora_rank),
    // kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj. DeepseekV3DecoderLayer: MoE iff layer_idx >=
    // first_k_dense_replace and layer_idx % moe_layer_freq == 0; DeepseekV3MoE: n_routed_experts experts and
    // n_shared_experts fused into one MLP of n_shared_experts·moe_intermediate_size; the router
    // (DeepseekV3TopkRouter) holds weight [experts, h] and, for topk_method noaux_tc,
    // e_score_correction_bias. num_nextn_predict_layers (MTP) is not read: the published 671B count excludes
    // it (mtp_layers in a spec).
    s.mla.q_lora_rank = r.count("q_lora_rank", 0);
    s.mla.kv_lora_rank = r.integer("kv_lora_rank");
    s.mla.qk_nope_head_dim = r.integer("qk_nope_head_dim");
    s.mla.qk_rope_head_dim = r.integer("qk_rope_head_dim");
    s.mla.v_head_dim = r.integer("v_head_dim");
    s.kv_heads = s.heads;  // MLA's keys and values are per head (num_key_value_heads is not used)
    s.head_dim = s.mla.qk_nope_head_dim + s.mla.qk_rope_head_dim;
    if (r.count("n_routed_experts", 0) > 0) {
      s.moe.experts = static_cast<int>(r.integer("n_routed_experts"));
      s.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
      s.moe.ffn_hidden = r.integer("moe_intermediate_size");
      s.moe.shared_experts = static_cast<int>(r.count("n_shared_experts", 0));
      s.moe.first_dense = static_cast<int>(r.count("first_k_dense_replace", 0));
      s.moe.interval = static_cast<int>(r.integer("moe_layer_freq", 1));
      s.moe.router_bias =
          r.string("topk_method", type == "deepseek_v3" ? "noaux_tc" : "greedy") == "noaux_tc";
    }
  }
  return s;
}
}  // namespace

ModelSpec parse_hf_config(const Json& j, const std::string& file) {
  if (!j.is_object()) throw InputError(file, "/", "expected a JSON object");
  HfReader r{j, file, ""};
  std::string type = r.string("model_type", "");
  ModelSpec s;
  s.name = r.string("_name_or_path", type.empty() ? "hf-model" : type);
  // Multimodal configs (Gemma 3 4B+, Llama 4) keep the language model under "text_config"; the vision tower
  // and projector are not modelled.
  if ((type == "gemma3" || type == "llama4") && j.contains("text_config") &&
      j.at("text_config").is_object()) {
    ModelSpec t = parse_hf_config_text(j.at("text_config"), file, "/text_config", type);
    t.name = s.name;
    validate_model_spec(t, file);
    return t;
  }
  if (llama_like(type)) {
    s = parse_hf_config_text(j, file, "", type);
    s.name = r.string("_name_or_path", type);
  } else if (type == "gpt_neox") {
    s.layers = static_cast<int>(r.integer("num_hidden_layers"));
    s.hidden = r.integer("hidden_size");
    s.heads = static_cast<int>(r.integer("num_attention_heads"));
    s.kv_heads = s.heads;
    s.head_dim = s.hidden / s.heads;
    s.ffn_hidden = r.integer("intermediate_size");
    s.vocab = r.integer("vocab_size");
    s.mlp = MlpKind::kGelu;
    s.norm = NormKind::kLayerNorm;
    s.attn_bias = r.boolean("attention_bias", true);
    s.mlp_bias = true;
    s.norm_bias = true;
    s.tied_embeddings = r.boolean("tie_word_embeddings", false);
    s.positions = PositionKind::kRotary;
    s.seq = std::min<std::int64_t>(r.integer("max_position_embeddings", 2048), 8192);
  } else if (type == "mpt") {
    s.layers = static_cast<int>(r.integer("n_layers"));
    s.hidden = r.integer("d_model");
    s.heads = static_cast<int>(r.integer("n_heads"));
    s.kv_heads = s.heads;
    s.head_dim = s.hidden / s.heads;
    s.ffn_hidden = r.integer("expansion_ratio", 4) * s.hidden;
    s.vocab = r.integer("vocab_size");
    s.mlp = MlpKind::kGelu;
    s.norm = NormKind::kLayerNorm;
    bool no_bias = r.boolean("no_bias", true);
    s.attn_bias = s.mlp_bias = s.norm_bias = !no_bias;
    s.tied_embeddings = true;
    bool alibi = false;
    if (j.contains("attn_config") && j["attn_config"].is_object() && j["attn_config"].contains("alibi")) {
      if (!j["attn_config"]["alibi"].is_boolean())
        throw InputError(file, "/attn_config/alibi", "expected true or false");
      alibi = j["attn_config"]["alibi"].get<bool>();
    }
    s.positions = alibi ? PositionKind::kAlibi : PositionKind::kLearned;
    s.max_positions = r.integer("max_seq_len", 2048);
    s.seq = s.max_positions;
  } else if (type == "bloom") {
    // BLOOM configs spell these two ways; one of each pair is required.
    s.layers = static_cast<int>(r.has("n_layer") ? r.integer("n_layer") : r.integer("num_hidden_layers"));
    s.hidden = r.has("hidden_size") ? r.integer("hidden_size") : r.integer("n_embed");
    s.heads = static_cast<int>(r.has("n_head") ? r.integer("n_head") : r.integer("num_attention_heads"));
    s.kv_heads = s.heads;
    s.head_dim = s.hidden / s.heads;
    s.ffn_hidden = 4 * s.hidden;
    s.vocab = r.integer("vocab_size");
    s.mlp = MlpKind::kGelu;
    s.norm = NormKind::kLayerNorm;
    s.attn_bias = s.mlp_bias = s.norm_bias = true;
    s.tied_embeddings = true;
    s.positions = PositionKind::kAlibi;
    s.embedding_norm = true;
    s.seq = 2048;
  } else if (type == "gpt2") {
    s.layers = static_cast<int>(r.integer("n_layer"));
    s.hidden = r.integer("n_embd");
    s.heads = static_cast<int>(r.integer("n_head"));
    s.kv_heads = s.heads;
    s.head_dim = s.hidden / s.heads;
    s.ffn_hidden = r.integer("n_inner", 4 * s.hidden);
    s.vocab = r.integer("vocab_size");
    s.mlp = MlpKind::kGelu;
    s.norm = NormKind::kLayerNorm;
    s.attn_bias = s.mlp_bias = s.norm_bias = true;
    s.tied_embeddings = true;
    s.positions = PositionKind::kLearned;
    s.max_positions = r.integer("n_positions", 1024);
    s.seq = s.max_positions;
  } else {
    throw InputError(
        file, "/model_type",
        "unsupported model_type \"" + type +
            "\"; expected one of: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v2, "
            "deepseek_v3, llama4, gemma2, gemma3, phi3, olmo2, gpt_oss, gpt_neox, mpt, bloom, gpt2");
  }
  validate_model_spec(s, file);
  return s;
}

}  // namespace shardplan

// Parsing of the transformer spec from our own JSON (shardplan.model/1), its checks and its JSON form;
// Hugging Face config.json files are read in hf_config.cpp.
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
const char* to_string(RopeCache k) {
  return k == RopeCache::kNone ? "none" : k == RopeCache::kComplex ? "complex" : "cos_sin";
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
    s.moe.peft_expert_targets = moe->boolean("peft_expert_targets", true);
    s.moe.router_linear = moe->boolean("router_linear", true);
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
  if (o.raw_optional("rope_cache"))
    s.rope_cache = parse_enum(
        o, "rope_cache",
        {{"none", RopeCache::kNone}, {"complex", RopeCache::kComplex}, {"cos_sin", RopeCache::kCosSin}},
        RopeCache::kNone);
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
  if (s.rope_cache.value_or(RopeCache::kNone) != RopeCache::kNone && s.positions != PositionKind::kRotary)
    throw InputError(file, "/rope_cache", "a RoPE cache needs rotary positions");
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
    if (!s.moe.peft_expert_targets) m["peft_expert_targets"] = false;
    if (!s.moe.router_linear) m["router_linear"] = false;
    j["moe"] = m;
  }
  if (s.mla.enabled())
    j["mla"] = {{"q_lora_rank", s.mla.q_lora_rank},
                {"kv_lora_rank", s.mla.kv_lora_rank},
                {"qk_nope_head_dim", s.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", s.mla.qk_rope_head_dim},
                {"v_head_dim", s.mla.v_head_dim}};
  if (s.qk_norm != QkNormKind::kNone) j["qk_norm"] = to_string(s.qk_norm);
  if (s.rope_cache) j["rope_cache"] = to_string(*s.rope_cache);
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

}  // namespace shardplan

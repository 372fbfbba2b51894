// Parsing of the transformer spec, from our own JSON and from Hugging Face config.json files.
#include "simulator/model_spec.hpp"

#include <algorithm>
#include <string>

namespace shardplan {

const char* to_string(MlpKind k) { return k == MlpKind::kSwiGlu ? "swiglu" : "gelu"; }
const char* to_string(NormKind k) { return k == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }
const char* to_string(PositionKind k) {
  return k == PositionKind::kRotary ? "rotary" : k == PositionKind::kLearned ? "learned" : "alibi";
}

template <class E>
static E parse_enum(JsonObj& o, const std::string& key, std::initializer_list<std::pair<const char*, E>> values,
                    E def) {
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
// Blocks and blocks x experts (one MLP per expert per block) bound the graph size so that building it takes well
// under a second even under sanitizers; both are far above real models (405B: 126 blocks; DeepSeek-V3: 61 x 256).
constexpr std::int64_t kMaxLayers = 10000, kMaxHeads = 100000, kMaxExpertMlps = std::int64_t{1} << 15;

ModelSpec parse_model_spec(JsonObj o) {
  ModelSpec s;
  if (o.has("schema")) {
    std::string schema = o.str("schema");
    if (schema != "shardplan.model/1") o.fail("schema", "expected \"shardplan.model/1\", got \"" + schema + "\"");
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
  s.mlp = parse_enum(o, "mlp", {{"swiglu", MlpKind::kSwiGlu}, {"gelu", MlpKind::kGelu}}, MlpKind::kSwiGlu);
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
    moe->finish();
  }
  s.seq = o.integer("seq", 4096, 1, kMaxDim);
  o.finish();
  validate_model_spec(s, o.file());
  return s;
}


void validate_model_spec(const ModelSpec& s, const std::string& file) {
  // parse_model_spec reads these with the same ranges; Hugging Face configs and code-built specs meet them here.
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
  }
  if (static_cast<std::int64_t>(s.layers) * std::max(1, s.moe.experts) > kMaxExpertMlps)
    throw InputError(file, "/moe/experts",
                     std::to_string(s.layers) + " blocks x " + std::to_string(s.moe.experts) +
                         " experts is more than the " + std::to_string(kMaxExpertMlps) + " expert MLPs modelled");
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
  if (s.moe.experts > 0) j["moe"] = {{"experts", s.moe.experts}, {"top_k", s.moe.top_k}};
  return j;
}

// --- Hugging Face config.json -------------------------------------------------------------------------------

namespace {
struct HfReader {
  const Json& j;
  const std::string& file;
  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }
  std::int64_t integer(const char* key) const {
    if (!j.contains(key) || j.at(key).is_null()) throw InputError(file, std::string("/") + key, "required field is missing");
    return json_integer(j.at(key), file, std::string("/") + key, 1, kMaxDim * 64);
  }
  std::int64_t integer(const char* key, std::int64_t def) const {
    return j.contains(key) && !j.at(key).is_null() ? integer(key) : def;
  }
  bool boolean(const char* key, bool def) const {
    if (!j.contains(key) || j.at(key).is_null()) return def;
    if (!j.at(key).is_boolean()) throw InputError(file, std::string("/") + key, "expected true or false");
    return j.at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!j.contains(key) || j.at(key).is_null()) return def;
    return json_string(j.at(key), file, std::string("/") + key);
  }
};
}  // namespace

ModelSpec parse_hf_config(const Json& j, const std::string& file) {
  if (!j.is_object()) throw InputError(file, "/", "expected a JSON object");
  HfReader r{j, file};
  std::string type = r.string("model_type", "");
  ModelSpec s;
  s.name = r.string("_name_or_path", type.empty() ? "hf-model" : type);
  if (type == "llama" || type == "mistral" || type == "mixtral" || type == "qwen2") {
    s.layers = static_cast<int>(r.integer("num_hidden_layers"));
    s.hidden = r.integer("hidden_size");
    s.heads = static_cast<int>(r.integer("num_attention_heads"));
    s.kv_heads = static_cast<int>(r.integer("num_key_value_heads", s.heads));
    s.head_dim = r.integer("head_dim", s.hidden / s.heads);
    s.ffn_hidden = r.integer("intermediate_size");
    s.vocab = r.integer("vocab_size");
    s.mlp = MlpKind::kSwiGlu;
    s.norm = NormKind::kRmsNorm;
    s.attn_bias = r.boolean("attention_bias", type == "qwen2");
    s.mlp_bias = r.boolean("mlp_bias", false);
    s.tied_embeddings = r.boolean("tie_word_embeddings", false);
    s.positions = PositionKind::kRotary;
    s.seq = std::min<std::int64_t>(r.integer("max_position_embeddings", 4096), 8192);
    if (type == "mixtral") {
      s.moe.experts = static_cast<int>(r.integer("num_local_experts"));
      s.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
    }
    if (type == "qwen2") s.qkv_bias_only = true;
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
    bool alibi = j.contains("attn_config") && j["attn_config"].is_object() && j["attn_config"].value("alibi", false);
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
    throw InputError(file, "/model_type",
                     "unsupported model_type \"" + type +
                         "\"; expected one of: llama, mistral, mixtral, qwen2, gpt_neox, mpt, bloom, gpt2");
  }
  validate_model_spec(s, file);
  return s;
}

}  // namespace shardplan

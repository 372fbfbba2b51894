// Hugging Face config.json files read into a ModelSpec: the Llama-like rotary families (their shared fields
// and each family's own, as transformers' config classes and modeling files define them) and the older
// GPT-NeoX, MPT, BLOOM and GPT-2 layouts.
#include <algorithm>
#include <string>
#include <vector>

#include "simulator/model/model_spec.hpp"

namespace shardplan {

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

void read_gemma(const HfReader& r, const std::string& type, ModelSpec& s) {
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
  if (type == "gemma3") s.qk_norm = QkNormKind::kHead;  // Gemma3Attention q_norm, k_norm = RMSNorm(head_dim)
}

void read_llama4(const HfReader& r, ModelSpec& s) {
  // Llama4TextMoe: num_local_experts routed experts of intermediate_size, a shared expert of the same
  // width, a router; dense layers (not in moe_layers) use intermediate_size_mlp. moe_layers defaults to
  // every interleave_moe_layer_step-th layer. The L2 q/k norm (use_qk_norm) has no weights.
  s.ffn_hidden = r.integer("intermediate_size_mlp", 16384);
  s.moe.peft_expert_targets = false;  // Llama4TextExperts: fused parameters (ModelSpec::MoeSpec)
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
      throw InputError(r.file, r.at("no_rope_layers"),
                       "expected one entry per layer (" + std::to_string(s.layers) + ")");
    int first_global = -1;
    for (int b = 0; b < s.layers && first_global < 0; ++b)
      if (no_rope[static_cast<std::size_t>(b)] == 0) first_global = b;
    s.global_every = first_global + 1;
    for (int b = 0; b < s.layers; ++b)
      if ((no_rope[static_cast<std::size_t>(b)] == 0) !=
          (s.global_every > 0 && (b + 1) % s.global_every == 0))
        throw InputError(r.file, r.at("no_rope_layers") + "/" + std::to_string(b),
                         "only a periodic pattern (every N-th layer without RoPE) is modelled");
  } else {
    s.global_every = static_cast<int>(r.integer("no_rope_layer_interval", 4));
  }
}

void read_gpt_oss(const HfReader& r, ModelSpec& s) {
  // transformers models/gpt_oss (GptOssConfig, modeling_gpt_oss.py; openai/gpt-oss-{20b,120b} config.json):
  // every layer a MoE (GptOssMLP: GptOssTopKRouter weight [experts, h] + bias [experts]; GptOssExperts
  // gate_up_proj [experts, h, 2f] + gate_up_proj_bias [experts, 2f], down_proj [experts, f, h] +
  // down_proj_bias [experts, h]: one fused gate/up weight, biases on both), q/k/v/o projections with biases
  // (attention_bias), a learned sink logit per head (GptOssAttention.sinks [heads]), layer_types
  // alternating sliding_attention (sliding_window) and full_attention, RMSNorm, untied embeddings.
  // quantization_config mxfp4: the checkpoint's expert weight matrices are MXFP4 (not their biases, the
  // router, attention, embeddings or head: modules_to_not_convert).
  s.moe.peft_expert_targets = false;  // GptOssExperts: fused parameters (ModelSpec::MoeSpec)
  s.moe.router_linear = false;        // GptOssTopKRouter: an nn.Parameter, not an nn.Linear
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
  if (r.j.contains("quantization_config") && r.j.at("quantization_config").is_object()) {
    const Json& q = r.j.at("quantization_config");
    s.moe.mxfp4_experts = q.contains("quant_method") && q.at("quant_method") == "mxfp4";
  }
}

void read_deepseek(const HfReader& r, const std::string& type, ModelSpec& s) {
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
    s.moe.router_bias = r.string("topk_method", type == "deepseek_v3" ? "noaux_tc" : "greedy") == "noaux_tc";
  }
}

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
  // transformers 5 writes Qwen3-MoE's expert count as num_local_experts (Qwen3MoeConfig.attribute_map
  // {"num_experts": "num_local_experts"}; the released Qwen3 checkpoints say num_experts), and reads either
  // key for Mixtral too.
  const char* experts_key = r.has("num_local_experts") ? "num_local_experts" : "num_experts";
  if (type == "mixtral") {
    s.moe.experts = static_cast<int>(r.integer(experts_key));
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
  if (type == "qwen3_moe" && r.count(experts_key, 0) > 0) {
    // Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers and (layer_idx + 1) % decoder_sparse_step == 0.
    s.moe.experts = static_cast<int>(r.integer(experts_key));
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
  if (gemma) read_gemma(r, type, s);
  if (llama4) read_llama4(r, s);
  if (type == "gpt_oss") read_gpt_oss(r, s);
  if (deepseek) read_deepseek(r, type, s);
  return s;
}

// The older families, each with its own field names.
ModelSpec read_gpt_neox(const HfReader& r) {
  ModelSpec s;
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
  return s;
}

ModelSpec read_mpt(const HfReader& r) {
  ModelSpec s;
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
  if (r.j.contains("attn_config") && r.j["attn_config"].is_object() && r.j["attn_config"].contains("alibi")) {
    if (!r.j["attn_config"]["alibi"].is_boolean())
      throw InputError(r.file, "/attn_config/alibi", "expected true or false");
    alibi = r.j["attn_config"]["alibi"].get<bool>();
  }
  s.positions = alibi ? PositionKind::kAlibi : PositionKind::kLearned;
  s.max_positions = r.integer("max_seq_len", 2048);
  s.seq = s.max_positions;
  return s;
}

ModelSpec read_bloom(const HfReader& r) {
  ModelSpec s;
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
  return s;
}

ModelSpec read_gpt2(const HfReader& r) {
  ModelSpec s;
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
  return s;
}
}  // namespace

ModelSpec parse_hf_config(const Json& j, const std::string& file) {
  if (!j.is_object()) throw InputError(file, "/", "expected a JSON object");
  HfReader r{j, file, ""};
  std::string type = r.string("model_type", "");
  const std::string name = r.string("_name_or_path", type.empty() ? "hf-model" : type);
  ModelSpec s;
  // Multimodal configs (Gemma 3 4B+, Llama 4) keep the language model under "text_config"; the vision tower
  // and projector are not modelled.
  if ((type == "gemma3" || type == "llama4") && j.contains("text_config") &&
      j.at("text_config").is_object()) {
    ModelSpec t = parse_hf_config_text(j.at("text_config"), file, "/text_config", type);
    t.name = name;
    validate_model_spec(t, file);
    return t;
  }
  if (llama_like(type)) {
    s = parse_hf_config_text(j, file, "", type);
  } else if (type == "gpt_neox") {
    s = read_gpt_neox(r);
  } else if (type == "mpt") {
    s = read_mpt(r);
  } else if (type == "bloom") {
    s = read_bloom(r);
  } else if (type == "gpt2") {
    s = read_gpt2(r);
  } else {
    throw InputError(
        file, "/model_type",
        "unsupported model_type \"" + type +
            "\"; expected one of: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v2, "
            "deepseek_v3, llama4, gemma2, gemma3, phi3, olmo2, gpt_oss, gpt_neox, mpt, bloom, gpt2");
  }
  s.name = name;
  validate_model_spec(s, file);
  return s;
}
}  // namespace shardplan

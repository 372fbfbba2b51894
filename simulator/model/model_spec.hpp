// The transformer specification a ModelGraph is built from (docs/formats.md, "shardplan.model/1").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.hpp"

namespace shardplan {

/// kSwiGlu and kGeGlu are gated (gate, up, down); they differ only in the activation (SiLU vs tanh-GELU,
/// Gemma).
enum class MlpKind { kSwiGlu, kGelu, kGeGlu };
enum class NormKind { kRmsNorm, kLayerNorm };
enum class PositionKind { kRotary, kLearned, kAlibi };

/// Norms on the query and key projections: none, one RMSNorm weight of head_dim shared by the heads (Qwen3,
/// Gemma 3), or one over the whole projection, heads·head_dim and kv_heads·head_dim (OLMo 2).
enum class QkNormKind { kNone, kHead, kFull };
/// A RoPE cache of torchtitan's form, one buffer per attention layer (torchtitan 0.3.0 models/common/rope.py,
/// `register_buffer("cache", ..., persistent=False)` in each attention module's RoPE, of training.seq_len
/// rows: models/common/decoder.py update_from_config): none (no cache), complex (ComplexRoPE: [seq, dim / 2]
/// complex64; llama3, deepseek_v3) or cos_sin (CosSinRoPE: [seq, 2 dim] fp32; qwen3, gpt_oss); dim: the
/// rotary width of a head. ModelSpec::rope_cache unset: the buffers of the model code the plan runs
/// (simulator/memory/model_buffers.cpp rope_buffer_bytes).
enum class RopeCache { kNone, kComplex, kCosSin };
/// Where a block's norms sit: before attention and MLP (Llama), after them (OLMo 2), or both (Gemma 2/3).
enum class NormPlacement { kPre, kPost, kSandwich };
/// Local attention of the layers that are not global: a sliding window over the last `window` positions
/// (Gemma, Mistral, Phi-3) or chunks of `window` positions attending causally within the chunk (Llama 4).
enum class LocalAttention { kSliding, kChunked };

struct MoeSpec {
  int experts = 0;  ///< routed experts per MoE block; 0 = dense
  int top_k = 0;
  std::int64_t ffn_hidden = 0;         ///< routed expert width; 0 = the spec's ffn_hidden (Mixtral)
  int shared_experts = 0;              ///< shared experts every token passes through (DeepSeek, Llama 4)
  std::int64_t shared_ffn_hidden = 0;  ///< width of each shared expert; 0 = the routed expert width
  /// Which blocks are MoE: block b is iff b >= first_dense, b % interval == phase and b is not in
  /// dense_layers; the others are dense MLPs of the spec's ffn_hidden (DeepSeek-V3 first_k_dense_replace = 3;
  /// Llama 4 interleave step s: interval s, phase s - 1; Qwen3-MoE decoder_sparse_step and mlp_only_layers).
  int first_dense = 0, interval = 1, phase = 0;
  std::vector<int> dense_layers;
  bool router_bias =
      false;  ///< a per-expert routing bias (DeepSeek-V3 e_score_correction_bias, gpt-oss router)
  /// How the released checkpoint stores the routed experts' weight matrices (not their biases): false = in
  /// the model's 16-bit dtype, true = MXFP4 (gpt-oss: 4-bit values in blocks of 32 sharing one 8-bit scale,
  /// 4.25 bits per value; transformers Mxfp4HfQuantizer). Only ModelGraph::checkpoint_bytes reads it:
  /// training dequantises to bf16 (the quantizer's is_trainable is False; Mxfp4Config(dequantize=True)).
  bool mxfp4_experts = false;
  /// Hugging Face layout of the routed experts as PEFT sees it. true: transformers 5 fuses experts that were
  /// one nn.Linear each in v4 (mixtral, qwen2_moe, qwen3_moe, deepseek_v2/v3, olmoe, ...), and PEFT 0.21.2
  /// still reaches them by their v4 names (all-linear included) through ParamWrapper over the fused
  /// parameters (peft/utils/transformers_weight_conversion.py _MODEL_TO_CONVERSION_PATTERN,
  /// _convert_peft_config_moe). false: the experts have always been fused parameters (gpt_oss, llama4), which
  /// all-linear skips.
  bool peft_expert_targets = true;
  /// The router is an nn.Linear, which PEFT's all-linear adapts (Mixtral's / Qwen-MoE's / DeepSeek's gate,
  /// Llama4Router). false: gpt-oss's GptOssTopKRouter holds its weight as a plain nn.Parameter (transformers
  /// models/gpt_oss/modeling_gpt_oss.py), which all-linear skips.
  bool router_linear = true;
  bool is_moe_block(int b) const;
  std::int64_t expert_ffn(std::int64_t dense_ffn) const { return ffn_hidden > 0 ? ffn_hidden : dense_ffn; }
};

/// Multi-head latent attention (DeepSeek-V2/V3): queries through a rank-q_lora_rank bottleneck (0 = a plain
/// projection), keys and values from a shared rank-kv_lora_rank latent plus one rotary key of
/// qk_rope_head_dim.
struct MlaSpec {
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0;  ///< kv_lora_rank > 0 means MLA
  std::int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
};

struct ModelSpec {
  std::string name;
  std::string description;
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t ffn_hidden = 0;
  std::int64_t vocab = 0;
  MlpKind mlp = MlpKind::kSwiGlu;
  NormKind norm = NormKind::kRmsNorm;
  bool attn_bias = false, mlp_bias = false, norm_bias = false;
  bool qkv_bias_only = false;  ///< with attn_bias: biases on q, k, v but not on the output projection (Qwen2)
  bool embedding_norm = false;  ///< a norm right after the token embedding (BLOOM)
  bool tied_embeddings = false;
  PositionKind positions = PositionKind::kRotary;
  std::int64_t max_positions = 0;
  MoeSpec moe;
  std::int64_t seq = 4096;  ///< default sequence length
  QkNormKind qk_norm = QkNormKind::kNone;
  /// Set: this cache whatever code runs (the reference lane's specs); unset: the model code's own.
  std::optional<RopeCache> rope_cache;
  NormPlacement norm_placement = NormPlacement::kPre;
  bool fused_qkv = false, fused_gate_up = false;  ///< one qkv_proj / gate_up_proj tensor (Phi-3): same counts
  MlaSpec mla;
  /// Local attention: 0 = every layer attends to all earlier positions. With a window, block b is global iff
  /// global_every > 0 and (b + 1) % global_every == 0 (Gemma 2: 2, Gemma 3: 6, Llama 4: 4; 0 = all local).
  std::int64_t window = 0;
  LocalAttention local_attention = LocalAttention::kSliding;
  int global_every = 0;
  /// tanh soft-capping of attention scores and of the final logits (Gemma 2): no parameters; the final one
  /// adds elementwise work on the logits.
  double attn_softcap = 0, final_softcap = 0;
  /// Multi-token-prediction modules (DeepSeek-V3 num_nextn_predict_layers); 0 = excluded, as the 671B count
  /// is.
  int mtp_layers = 0;
  /// Attention sinks (gpt-oss): one learned logit per head that joins each softmax's denominator, a
  /// parameter of `heads` elements per attention layer (transformers GptOssAttention.sinks).
  bool attn_sinks = false;
  /// The local window of block b, 0 when the block attends globally.
  std::int64_t block_window(int b) const {
    return window > 0 && !(global_every > 0 && (b + 1) % global_every == 0) ? window : 0;
  }
};

/// Bound of any model dimension a spec or config may give: 16M, wider than any real model dimension.
inline constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;

/// Reads a "shardplan.model/1" object strictly. `file` and the object's pointer go into errors.
ModelSpec parse_model_spec(JsonObj obj);
Json model_spec_to_json(const ModelSpec& s);
/// Reads a Hugging Face config.json (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v2,
/// deepseek_v3, llama4, gemma2, gemma3, phi3, olmo2, gpt_oss, gpt_neox, mpt, bloom, gpt2; hf_config.cpp).
/// Vision towers of multimodal configs are left out.
ModelSpec parse_hf_config(const Json& j, const std::string& file);
/// Checks the spec is a buildable transformer; throws InputError naming the field.
void validate_model_spec(const ModelSpec& s, const std::string& file);

const char* to_string(MlpKind k);
const char* to_string(NormKind k);
const char* to_string(PositionKind k);
const char* to_string(QkNormKind k);
const char* to_string(RopeCache k);
const char* to_string(NormPlacement k);
const char* to_string(LocalAttention k);

}  // namespace shardplan

// The model code's buffers: tensors every rank holds whole for the whole run, outside the parameters and
// the optimizer (FSDP shards parameters, not buffers), allocated before the step (accounting.cpp
// initial_allocation, category other, as PyTorch's FSDPMemTracker counts buffers).
#include <algorithm>
#include <utility>

#include "core/checked.hpp"
#include "simulator/engine/engine.hpp"
#include "simulator/memory/accounting.hpp"

namespace shardplan {

namespace {

/// One attention layer's RoPE cache of torchtitan's form (torchtitan 0.3.0 models/common/rope.py): rows = the
/// training sequence length (models/common/decoder.py update_from_config sets each attention's
/// `rope.max_seq_len = training.seq_len`); ComplexRoPE._precompute_cache: [seq, dim / 2] complex64 (8 B);
/// CosSinRoPE._precompute_cache: cat([cos, sin]) of cat([freqs, freqs]), [seq, 2 dim] fp32.
Bytes rope_cache_bytes(RopeCache c, std::int64_t dim, std::int64_t seq) {
  switch (c) {
    case RopeCache::kNone:
      return 0;
    case RopeCache::kComplex:
      return mul_checked(mul_checked(seq, dim / 2, "RoPE cache elements"), Bytes{8}, "RoPE cache bytes");
    case RopeCache::kCosSin:
      return mul_checked(mul_checked(seq, 2 * dim, "RoPE cache elements"), Bytes{4}, "RoPE cache bytes");
  }
  return 0;
}

/// The RoPE buffers of the model code, (bytes per attention layer, bytes per model), each allocation rounded.
/// dim: the rotary width of a head (MLA: qk_rope_head_dim). The spec's rope_cache, when set, wins.
/// - torchtitan 0.3.0: one cache per attention layer (above), ComplexRoPE in llama3 / deepseek_v3 /
/// kimi_k2_7,
///   CosSinRoPE in qwen3 / gpt_oss (models/*/__init__.py `rope=...RoPE.Config`): cos_sin for a spec with
///   Qwen3's per-head q/k norm or gpt-oss's attention sinks, complex otherwise. Measured on the meta device:
///   llama3 8B 32 x [131072, 64] complex64, qwen3 0.6B 28 x [40960, 256] fp32, deepseek_v3 671B 61 x
///   [16384, 32] complex64 (flavors' max_seq_len).
/// - Hugging Face transformers 5.23 (models/llama/modeling_llama.py LlamaRotaryEmbedding, one per model:
///   model.rotary_emb): `inv_freq` and `original_inv_freq`, fp32 [dim / 2] each; cos and sin are computed
///   every forward (measured: llama, qwen3_moe, deepseek_v3 on the meta device).
/// - Megatron-core (megatron/core/models/common/embeddings/rotary_pos_embedding.py at 00caa53, one
///   RotaryEmbedding per GPTModel): `inv_freq` fp32 [dim / 2] on the GPU and forward's lru_cache(maxsize=32)
///   holding its output, emb [seq / cp, 1, 1, dim] fp32 (the CP rank's slice; rotary_seq_len is the full
///   sequence under sequence parallelism), alive for the run.
std::pair<Bytes, Bytes> rope_buffer_bytes(const ModelSpec& s, const Plan& p) {
  if (s.positions != PositionKind::kRotary) return {0, 0};
  const std::int64_t dim = s.mla.enabled() ? s.mla.qk_rope_head_dim : s.head_dim;
  if (s.rope_cache) return {allocation_bytes(rope_cache_bytes(*s.rope_cache, dim, p.seq)), 0};
  const Bytes inv_freq = allocation_bytes(Bytes{4} * (dim / 2));
  switch (model_code(p)) {
    case ModelCode::kTorchtitan: {
      const bool cos_sin = s.qk_norm == QkNormKind::kHead || s.attn_sinks;
      return {
          allocation_bytes(rope_cache_bytes(cos_sin ? RopeCache::kCosSin : RopeCache::kComplex, dim, p.seq)),
          0};
    }
    case ModelCode::kHuggingFace:
      return {0, 2 * inv_freq};
    case ModelCode::kMegatron: {
      const std::int64_t rows = std::max<std::int64_t>(1, p.seq / p.cp);
      return {0, inv_freq + allocation_bytes(mul_checked(rows * dim, Bytes{4}, "RoPE emb bytes"))};
    }
  }
  return {0, 0};
}

}  // namespace

Bytes model_buffer_bytes(const ModelGraph& model, const Plan& p) {
  const ModelSpec& s = model.spec();
  const auto [rope_per_layer, rope_per_model] = rope_buffer_bytes(s, p);
  Bytes total = 0;
  bool attends = false;
  for (const Layer* l : model.order()) {
    if (l->attn_heads > 0) total = add_checked(total, rope_per_layer, "buffer bytes");
    attends = attends || l->attn_heads > 0;
    // torchtitan 0.3.0's MoE (models/common/moe.py MoE.__init__, the --moe-impl grouped layer):
    // tokens_per_expert_E and, with load_balance_coeff (MoE.Config default 1e-3), expert_bias_E, fp32 [E]
    // each, one allocation each.
    if (l->kind == LayerKind::kMoe && l->moe_experts > 0 && p.moe_impl == MoeImpl::kGrouped)
      total = add_checked(total,
                          mul_checked(allocation_bytes(Bytes{4} * l->moe_experts), Bytes{2}, "buffer bytes"),
                          "buffer bytes");
  }
  return attends ? add_checked(total, rope_per_model, "buffer bytes") : total;
}

}  // namespace shardplan

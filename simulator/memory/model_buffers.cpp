// The model code's buffers: tensors every rank holds whole for the whole run, outside the parameters and
// the optimizer (FSDP shards parameters, not buffers), allocated before the step (accounting.cpp
// initial_allocation, category other, as PyTorch's FSDPMemTracker counts buffers).
#include "core/checked.hpp"
#include "simulator/engine/engine.hpp"
#include "simulator/memory/accounting.hpp"

namespace shardplan {

namespace {

/// One attention layer's RoPE cache (ModelSpec::rope_cache; torchtitan 0.3.0 models/common/rope.py): rows =
/// the training sequence length (models/common/decoder.py update_from_config sets each attention's
/// `rope.max_seq_len = training.seq_len`); ComplexRoPE._precompute_cache: [seq, dim / 2] complex64 (8 B);
/// CosSinRoPE._precompute_cache: cat([cos, sin]) of cat([freqs, freqs]), [seq, 2 dim] fp32. dim: the rotary
/// width of a head (MLA: qk_rope_head_dim).
Bytes rope_cache_bytes(const ModelSpec& s, std::int64_t seq) {
  const std::int64_t dim = s.mla.enabled() ? s.mla.qk_rope_head_dim : s.head_dim;
  switch (s.rope_cache) {
    case RopeCache::kNone:
      return 0;
    case RopeCache::kComplex:
      return mul_checked(mul_checked(seq, dim / 2, "RoPE cache elements"), Bytes{8}, "RoPE cache bytes");
    case RopeCache::kCosSin:
      return mul_checked(mul_checked(seq, 2 * dim, "RoPE cache elements"), Bytes{4}, "RoPE cache bytes");
  }
  return 0;
}

}  // namespace

Bytes model_buffer_bytes(const ModelGraph& model, const Plan& p) {
  const ModelSpec& s = model.spec();
  const Bytes rope = allocation_bytes(rope_cache_bytes(s, p.seq));
  Bytes total = 0;
  for (const Layer* l : model.order()) {
    if (l->attn_heads > 0) total = add_checked(total, rope, "buffer bytes");
    // torchtitan 0.3.0's MoE (models/common/moe.py MoE.__init__, the --moe-impl grouped layer):
    // tokens_per_expert_E and, with load_balance_coeff (MoE.Config default 1e-3), expert_bias_E, fp32 [E]
    // each, one allocation each.
    if (l->kind == LayerKind::kMoe && l->moe_experts > 0 && p.moe_impl == MoeImpl::kGrouped)
      total = add_checked(total,
                          mul_checked(allocation_bytes(Bytes{4} * l->moe_experts), Bytes{2}, "buffer bytes"),
                          "buffer bytes");
  }
  return total;
}

}  // namespace shardplan

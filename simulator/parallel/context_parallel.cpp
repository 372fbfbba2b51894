// Context parallelism: the ring attention of PyTorch's context_parallel as torchtitan runs it, per attention
// layer — the K/V exchange over the CP group, the part of it the attention compute hides, and the buffers
// each rank holds while it runs (docs/model.md "Context parallelism").
//
// Source: torch/distributed/tensor/experimental/_attention.py (PyTorch 2.7-2.9, `_templated_ring_attention`
// and `_templated_ring_attention_backward`; the same code moved to _context_parallel/_attention.py later):
// - Load-balanced sharding: each rank holds 2 of 2 x cp chunks of every sequence (head-tail), so step 0 (the
//   local chunks) does 1 / cp of the rank's causal attention work and every later step the same.
// - Forward: `_create_rotater` with the default `_cp_options.rotate_method = ALL_GATHER` gathers the other
//   ranks' K and V in one all-gather, issued before step 0's attention and waited for at step 1.
// - Backward: K and V are all-gathered again (kv_rotater) and the fp32 dK/dV accumulators travel the ring
//   (dkv_rotater, `_RotateMethod.ALL_TO_ALL`: one shift to the next rank per step, cp steps, the last one
//   waited for after the loop). grad_query, grad_key and grad_value accumulate in fp32
//   (`_cp_options.convert_to_f32 = True`).
// - K and V carry the KV heads (torchtitan calls SDPA with enable_gqa, torchtitan/models/common/attention.py
//   at b5bcd76), split by TP like the projections.
#include <algorithm>

#include "simulator/parallel/parallel.hpp"

namespace shardplan {

namespace {

/// Bytes of this rank's K and V of one attention layer in the compute dtype (local tokens, TP-local heads).
double local_kv_bytes(const Layer& l, const Plan& p, double tokens) {
  const double bc = p.compute_bytes();
  const double kv_heads = std::max(1.0, static_cast<double>(l.attn_kv_heads) / p.tp);
  return tokens * kv_heads * static_cast<double>(l.attn_head_dim + l.v_head_dim()) * bc;
}

}  // namespace

double context_parallel_workspace_bytes(const Layer& l, const Plan& p, double tokens) {
  if (p.cp <= 1 || l.attn_heads == 0) return 0;
  const double bc = p.compute_bytes();
  const double kv = local_kv_bytes(l, p, tokens);
  const double q_elems =
      tokens * static_cast<double>(l.attn_heads) / p.tp * static_cast<double>(l.v_head_dim());
  // The all-gathered K/V of every rank (cp x local), grad_query in fp32, the fp32 dK/dV accumulator and the
  // one received from the previous rank (two dK/dV buffers in flight).
  return p.cp * kv + q_elems * 4.0 + 2.0 * kv * 4.0 / bc;
}

CpLayerCost context_parallel_layer_cost(const Layer& l, const Cluster& cluster, const CostModel& costs,
                                        const Plan& p, double tokens) {
  CpLayerCost c;
  if (p.cp <= 1 || l.attn_heads == 0) return c;
  const bool fp32 = p.precision == Precision::kFp32;
  const double bc = p.compute_bytes();
  const double cp = p.cp;
  // CP group: cp ranks, tp apart (mesh [.., dp_shard, cp, tp], tp innermost): inside the NVLink domain while
  // tp x cp fits in it.
  const GroupView g = cluster.group(p.cp, p.tp);
  const double bwd_ratio = costs.constants().attention_bwd_ratio;
  const double kv = local_kv_bytes(l, p, tokens);
  // The rank's attention compute (the same FLOPs as units.cpp: 1 / cp of the causal work per rank).
  const double heads = static_cast<double>(l.attn_heads) / p.tp;
  const double flops = 2.0 * tokens * heads * static_cast<double>(l.attn_head_dim + l.v_head_dim()) *
                       l.attended_positions(p.seq);
  const double attn_fwd = costs.attention_fwd_s(flops, fp32), attn_bwd = bwd_ratio * attn_fwd;
  // One all-gather of K and V (whole buffer cp x local; each rank sends (cp - 1) x local).
  const double ag_s = costs.collective_s(CollectiveKind::kAllGather, cp * kv, g);
  // One ring step of the fp32 dK/dV accumulator to the next rank.
  const double dkv = kv * 4.0 / bc;
  const double step_s = costs.collective_s(CollectiveKind::kSendRecv, dkv, g);
  // Forward: the gather runs beside step 0 (1 / cp of the attention), the rest of it stalls step 1.
  c.fwd_s = ag_s;
  c.fwd_exposed_s = std::max(0.0, ag_s - attn_fwd / cp);
  c.fwd_bytes = (cp - 1) * kv;
  c.fwd_count = 1;
  // Backward: the gather beside step 0's backward; each of the first cp - 1 dK/dV shifts beside the next
  // step's backward (1 / cp of it); the last shift is waited for after the loop.
  c.bwd_s = ag_s + cp * step_s;
  c.bwd_exposed_s =
      std::max(0.0, ag_s - attn_bwd / cp) + (cp - 1) * std::max(0.0, step_s - attn_bwd / cp) + step_s;
  c.bwd_bytes = (cp - 1) * kv + cp * dkv;
  c.bwd_count = 1 + p.cp;
  return c;
}

}  // namespace shardplan

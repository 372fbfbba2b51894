// Expert parallelism: the token dispatch and combine of each MoE layer over the EP group by the plan's
// backend
// (--ep-backend; the all-gather and DeepEP backends in ep_dispatch.cpp), and the all-to-alls torchtitan's
// ExpertParallel runs (docs/model.md "Expert parallelism", "Token dispatch backends").
//
// Source: torchtitan/distributed/expert_parallel.py (ExpertParallel._token_dispatch / _token_combine at
// 08da451f2): per MoE layer forward one all-to-all of the routed tokens to the ranks holding their experts
// (dispatch) and one back (combine), all_to_all_single_autograd, so backward runs the two mirrored ones.
// The routed tokens are num_tokens x top_k rows of hidden elements in the compute dtype; the experts wait for
// the dispatch and the next layer for the combine (no overlap in torchtitan's EP).
#include "core/collectives.hpp"
#include "simulator/parallel/parallel.hpp"

namespace shardplan {

double moe_all_to_all_buffer_bytes(const ModelSpec& s, const Plan& p, double rows) {
  // The busiest rank's routed rows (its experts' rows, the one count the grouped GEMMs and the dispatch's
  // tensors use: moe_expert_rows, ceil(F x T x top_k) under --moe-imbalance F, at most
  // experts x capacity under --moe-capacity-factor, exactly that padded), hidden elements each in the
  // compute dtype: torchtitan 0.3.0 AllToAllTokenDispatcher allocates the received rows as one tensor of the
  // received count (all_to_all_single_autograd's output, models/common/token_dispatcher.py).
  return rows * static_cast<double>(s.hidden) * p.compute_bytes();
}

EpLayerCost expert_parallel_layer_cost(const Layer& l, const ModelSpec& s, const Cluster& cluster,
                                       const CostModel& costs, const Plan& p, double tokens, double rows) {
  EpLayerCost c;
  if (p.ep <= 1 || l.moe_experts == 0) return c;
  switch (p.ep_dispatch()) {
    case EpBackend::kAllGather:
      return allgather_dispatch_cost(s, cluster, costs, p, tokens);
    case EpBackend::kDeepEp:
      return deepep_dispatch_cost(s, l, cluster, p, rows);
    case EpBackend::kAllToAll:
      break;
  }
  // EP group: ep ranks, tp apart (torchtitan's sparse mesh [dp_replicate, efsdp, ep, etp] with etp = tp).
  const GroupView g = cluster.group(p.ep, p.tp);
  const double sent_share = busbw_factor(CollectiveKind::kAllToAll, p.ep);  // (ep - 1) / ep leaves the rank
  const double buf = moe_all_to_all_buffer_bytes(s, p, rows);
  c.a2a_s = 2 * costs.collective_s(CollectiveKind::kAllToAll, buf, g);  // dispatch + combine
  c.a2a_bytes = 2 * sent_share * buf;
  c.a2a_count = 2;
  return c;
}

}  // namespace shardplan

// Token dispatch backends other than the all-to-all (docs/model.md "Token dispatch backends"):
// Megatron-core's all-gather dispatcher and DeepEP's NVLink/RDMA kernels, as the time and bytes of one MoE
// layer's dispatch + combine on one rank.
//
// allgather: megatron-core 0.8.0 megatron/core/transformer/moe/token_dispatcher.py
// MoEAllGatherTokenDispatcher: token_permutation all-gathers the hidden states over the
// tensor-and-expert-parallel group (gather_from_sequence_parallel_region_to_moe: each of the tp x ep ranks
// holds T / tp tokens under sequence parallelism, so the gathered tensor is [T x ep, h]), masks the rows of
// its local experts, and token_unpermutation scatter-adds the experts' output into a zeroed [T x ep, h] and
// reduce-scatters it (reduce_scatter_to_sequence_parallel_region_from_moe). Backward mirrors them (the
// all-gather's gradient is a reduce-scatter and the reverse). Every token goes to every rank whatever the
// router chose: the bytes do not depend on --moe-imbalance.
//
// deepep: torchtitan 0.3.0 models/common/token_dispatcher.py DeepEPTokenDispatcher over DeepEP v2
// (deepseek-ai/DeepEP dd758ca): dispatch sends each token once per destination rank inside the NVLink domain
// and once per remote domain over RDMA (hybrid mode forwards it over NVLink there), combine the reverse, in
// bf16. torchtitan waits for both (dispatch syncs with the host for the received counts, combine calls
// sync_combine before returning): blocking, like the all-to-all; DeepEP's own stream and SMs do not overlap
// with this layer's experts.
#include <algorithm>
#include <cmath>

#include "core/collectives.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/parallel/parallel.hpp"

namespace shardplan {

double allgather_dispatch_buffer_bytes(const ModelSpec& s, const Plan& p, double tokens) {
  return tokens * static_cast<double>(p.ep) * static_cast<double>(s.hidden) * p.compute_bytes();
}

EpLayerCost allgather_dispatch_cost(const ModelSpec& s, const Cluster& cluster, const CostModel& costs,
                                    const Plan& p, double tokens) {
  EpLayerCost c;
  // The tensor-and-expert-parallel group: tp x ep consecutive ranks (Megatron's expert ranks are innermost
  // after TP in core_r0.8.0 parallel_state.py).
  const int n = p.ep * p.tp;
  const GroupView g = cluster.group(n, 1);
  const double buf = allgather_dispatch_buffer_bytes(s, p, tokens);
  c.a2a_s = costs.collective_s(CollectiveKind::kAllGather, buf, g) +
            costs.collective_s(CollectiveKind::kReduceScatter, buf, g);
  c.a2a_bytes = bytes_sent_per_rank(CollectiveKind::kAllGather, buf, n) +
                bytes_sent_per_rank(CollectiveKind::kReduceScatter, buf, n);
  c.a2a_count = 2;
  return c;
}

DeepEpTraffic deepep_traffic(const ModelSpec& s, const Layer& l, const Cluster& cluster, const Plan& p,
                             double rows) {
  DeepEpTraffic t;
  const GroupView g = cluster.group(p.ep, p.tp);
  const double U = g.intra_nvlink ? g.ranks_per_node : 1, S = static_cast<double>(g.ranks) / U;
  const double k = std::max(1, l.moe_top_k), row = static_cast<double>(s.hidden) * 2.0;  // bf16
  // Experts spread evenly: a routed row lands on another rank of the destination domain with probability
  // (U - 1) / U, so a rank's NVLink traffic is R (U - 1) / U rows (in hybrid mode the domain's receiving rank
  // forwards it), R the busiest rank's routed rows (moe_expert_rows: T k, ceil(F T k) under --moe-imbalance
  // F). Over RDMA a token is sent once per remote domain holding any of its k experts: (S - 1)(1 - (1 -
  // 1/S)^k) domains per token, R / k tokens.
  t.nvlink_bytes = rows * (U - 1) / U * row;
  t.rdma_bytes = S > 1 ? rows / k * (S - 1) * (1 - std::pow(1 - 1 / S, k)) * row : 0.0;
  t.nvlink_Bps = g.intra_Bps * fw::kDeepEpNvlinkFraction;
  // One NIC per rank of the domain (rails): the domain's network bandwidth shared by its U ranks.
  t.rdma_Bps = S > 1 ? g.inter_Bps / U * fw::kDeepEpRdmaFraction : 0.0;
  return t;
}

EpLayerCost deepep_dispatch_cost(const ModelSpec& s, const Layer& l, const Cluster& cluster, const Plan& p,
                                 double rows) {
  EpLayerCost c;
  const DeepEpTraffic t = deepep_traffic(s, l, cluster, p, rows);
  // The NVLink and RDMA legs run at once (DeepEP's channels pipeline them): the slower bounds each kernel.
  const double nvl_s = t.nvlink_bytes > 0 ? t.nvlink_bytes / t.nvlink_Bps : 0.0;
  const double rdma_s = t.rdma_bytes > 0 ? t.rdma_bytes / t.rdma_Bps : 0.0;
  c.a2a_s = 2 * std::max(nvl_s, rdma_s);  // dispatch + combine (same rows, bf16 both ways)
  c.a2a_bytes = 2 * (t.nvlink_bytes + t.rdma_bytes);
  c.a2a_count = 2;
  return c;
}

}  // namespace shardplan

// Parallel dimensions beyond data parallelism, as values the lowering adds up: context parallelism's ring
// attention and expert parallelism's token all-to-alls, per layer and pass; and the pipeline schedules (each
// schedule's action order, and the discrete-event run of that order).
#pragma once
#include "simulator/cost/cost.hpp"
#include "simulator/model/model.hpp"
#include "simulator/parallel/pipeline_schedule.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

/// The context-parallel ring attention of one attention layer on one rank (context_parallel.cpp): time of
/// one forward / backward's collectives (seconds), the part the attention compute does not hide, the bytes
/// the rank sends, and how many collectives they are.
struct CpLayerCost {
  double fwd_s = 0, bwd_s = 0, fwd_exposed_s = 0, bwd_exposed_s = 0;
  double fwd_bytes = 0, bwd_bytes = 0;
  int fwd_count = 0, bwd_count = 0;
};
/// Zero for layers without attention or cp = 1; `tokens` is the rank's local tokens per micro-batch.
CpLayerCost context_parallel_layer_cost(const Layer& l, const Cluster& cluster, const CostModel& costs,
                                        const Plan& p, double tokens);
/// The CP group's ring-attention transient of one attention layer's backward on one rank (bytes): the
/// all-gathered K/V and the fp32 gradient accumulators (context_parallel.cpp).
double context_parallel_workspace_bytes(const Layer& l, const Plan& p, double tokens);

/// The token dispatch + combine of one MoE layer's pass on one rank by the plan's backend
/// (expert_parallel.cpp, ep_dispatch.cpp): time (blocking: the experts need the dispatched tokens), bytes the
/// rank sends, and count.
struct EpLayerCost {
  double a2a_s = 0, a2a_bytes = 0;
  int a2a_count = 0;
};
/// Zero for dense layers or ep = 1. `tokens`: the rank's tokens of a micro-batch (the all-gather dispatcher
/// moves them whatever the router chose); `rows`: the routed rows the busiest rank's experts receive
/// (moe_expert_rows, simulator/lowering/units_moe.cpp), which the all-to-all and DeepEP move.
EpLayerCost expert_parallel_layer_cost(const Layer& l, const ModelSpec& s, const Cluster& cluster,
                                       const CostModel& costs, const Plan& p, double tokens, double rows);
/// Bytes of the whole buffer of one token dispatch (or combine) all-to-all of a MoE layer on one rank: the
/// busiest rank's routed `rows` (moe_expert_rows) x hidden x dtype bytes (nccl-tests' all-to-all size; each
/// rank sends (ep - 1) / ep of it).
double moe_all_to_all_buffer_bytes(const ModelSpec& s, const Plan& p, double rows);

// ---- token dispatch backends (ep_dispatch.cpp; docs/model.md "Token dispatch backends") ----
/// --ep-backend allgather: bytes of the gathered hidden states [tokens x ep, hidden] in the compute dtype
/// (Megatron-core's MoEAllGatherTokenDispatcher; also the size of the combine's reduce-scatter input). A
/// transient of every MoE layer's forward and backward.
double allgather_dispatch_buffer_bytes(const ModelSpec& s, const Plan& p, double tokens);
/// --ep-backend allgather: one all-gather and one reduce-scatter of that buffer over the tp x ep ranks per
/// pass.
EpLayerCost allgather_dispatch_cost(const ModelSpec& s, const Cluster& cluster, const CostModel& costs,
                                    const Plan& p, double tokens);
/// --ep-backend deepep: the bytes one rank sends per dispatch (and again per combine) over NVLink and over
/// RDMA, and the bandwidths DeepEP's kernels reach on each (DeepEP's measured share of the link).
struct DeepEpTraffic {
  double nvlink_bytes = 0, rdma_bytes = 0;
  double nvlink_Bps = 0, rdma_Bps = 0;
};
/// `rows`: the busiest rank's routed rows (moe_expert_rows).
DeepEpTraffic deepep_traffic(const ModelSpec& s, const Layer& l, const Cluster& cluster, const Plan& p,
                             double rows);
/// --ep-backend deepep: dispatch + combine of one pass, each bounded by its slower leg.
EpLayerCost deepep_dispatch_cost(const ModelSpec& s, const Layer& l, const Cluster& cluster, const Plan& p,
                                 double rows);

}  // namespace shardplan

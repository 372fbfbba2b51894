// One pipeline stage's slice of the model simulated for one micro-batch with the runtime's own lowering, and
// what the pipeline takes from it: the stage's action costs and memory (parallel/'s StageCost) and its
// per-step communication (docs/model.md "Pipeline parallelism"). Internal to simulate/.
#pragma once
#include <memory>

#include "simulator/cost/cost.hpp"
#include "simulator/model/model.hpp"
#include "simulator/parallel/parallel.hpp"
#include "simulator/plan/plan.hpp"
#include "simulator/result/result.hpp"

namespace shardplan {

/// Per stage: its slice of the model, simulated for one micro-batch.
struct StageSim {
  std::shared_ptr<const ModelGraph> graph;  ///< the stage's layers (shared by the copies of a twin stage)
  Result res;
  StageCost cost;
  Bytes gathered_bytes = 0;      ///< unsharded parameters held through the step (FSDP under PP)
  Bytes accum_grad_bytes = 0;    ///< unsharded gradients accumulated over the micro-batches (FSDP under PP)
  Bytes recv_bytes = 0;          ///< point-to-point receive buffers held through the step
  Bytes sharded_grad_bytes = 0;  ///< sharded gradients made by the reduction after the last micro-batch
  double tp_ag_block_s = 0, tp_rs_block_s = 0;    ///< TP collectives on the compute stream, one micro-batch
  double tp_fwd_block_s = 0, tp_bwd_block_s = 0;  ///< the same, in the forward / the backward
  /// EP all-to-alls and CP ring waits on the compute stream, one micro-batch (forward and backward), and
  /// their forward's / backward's share.
  double ep_block_s = 0, cp_block_s = 0;
  double ep_cp_fwd_block_s = 0, ep_cp_bwd_block_s = 0;
  WorkingSet tail_work;    ///< the optimizer's transients
  double reduce_s = 0;     ///< gradient reduction after the stage's last backward
  double post_step_s = 0;  ///< after the optimizer (DeepSpeed ZeRO-1: updated parameters all-gathered)
  double fwd_compute_s = 0, bwd_compute_s = 0;  ///< compute-stream time of one micro-batch
  int blocks = 0;
  bool embedding = false, head = false;
};

/// What every stage of one pipelined plan shares.
struct StageContext {
  Plan stage_plan;            ///< the plan of one stage: one micro-batch, no pipeline
  RuntimeTraits traits;       ///< the stage plan's runtime traits
  double send_bytes = 0;      ///< one micro-batch's activation (or its gradient) between stages
  bool torch_stages = false;  ///< torch.distributed.pipelining stages (not Megatron's or DeepSpeed's)
  bool allocator_replay = true, detail = false;
};
/// The context of plan `p` (pp > 1, resolved).
StageContext stage_context(const ModelGraph& model, const Plan& p, bool detail, bool allocator_replay);

/// Simulates stage `s` (its layers [first, last) of the model's execution order, `blocks` transformer
/// blocks) for one micro-batch and derives the pipeline's view of it.
StageSim simulate_stage(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                        const Plan& p, const StageContext& ctx, int s, std::size_t first, std::size_t last,
                        int blocks);

}  // namespace shardplan

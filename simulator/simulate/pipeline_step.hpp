// One pipeline-parallel step as torch.distributed.pipelining runs it under torchtitan: each stage's slice of
// the model simulated with the runtime's lowering, composed by the schedule's run (parallel/) into the step.
#pragma once
#include "simulator/cost/cost.hpp"
#include "simulator/model/model.hpp"
#include "simulator/parallel/parallel.hpp"
#include "simulator/plan/plan.hpp"
#include "simulator/result/result.hpp"

namespace shardplan {

/// Simulates one training step of a resolved plan with pp > 1 into `r` (memory of the busiest rank, step
/// time, pipeline summary): each stage's slice of the model is simulated for one micro-batch with the
/// runtime's lowering, and the pipeline's timeline is run over those stage costs. `detail` keeps the task
/// program of the busiest rank's first stage (one micro-batch) for traces. `allocator_replay`: the stages'
/// reserved memory from the caching-allocator replay (Simulator::set_allocator_replay), off in the planner's
/// cheap pass.
void simulate_pipeline_step(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                            const Plan& p, Result& r, bool detail = false, bool allocator_replay = true);

}  // namespace shardplan

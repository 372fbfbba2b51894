// Pipeline parallelism as torch.distributed.pipelining runs it under torchtitan: the plan's pipeline knobs
// checked, the model's blocks split into stages (torchtitan's split, or --pp-layers), each schedule's order
// of forward / backward micro-batch actions per pipeline rank, a discrete-event run of that order with the
// point-to-point sends between stages, and the composition of one step from per-stage simulations.
#pragma once
#include <cstdint>
#include <vector>

#include "simulator/cost_model.hpp"
#include "simulator/model_graph.hpp"
#include "simulator/plan.hpp"
#include "simulator/result.hpp"

namespace shardplan {

// ---- plan checks (called by resolve_plan) ----

/// pp >= 1, tp x pp divides the GPUs, a runtime that pipelines (InputError naming the flag otherwise).
void check_pipeline_mesh(const Plan& p, int gpus);
/// Resolves virtual_stages and checks the stage split and the micro-batch count against the schedule
/// (grad_accum already resolved: under PP it is the number of pipeline micro-batches per step).
void resolve_pipeline(Plan& p, const ModelGraph& model);

// ---- stages ----

/// Transformer blocks per stage, stage order (p.stages() entries): --pp-layers, or torchtitan 0.3.0's split
/// (distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part with first/last_stage_less_layers = 1:
/// the embedding and the norm + LM head each count as one layer). InputError when the split is impossible.
std::vector<int> stage_blocks(const Plan& p, int blocks);
/// The stages pipeline rank `rank` holds, in local order: loop style r, r + pp, ... (gpipe, 1f1b,
/// interleaved); V style {r, 2 pp - 1 - r} (zbv, dualpipev) — torchtitan
/// _get_pp_rank_to_stage_indices_mapping.
std::vector<int> rank_stages(const Plan& p, int rank);

// ---- schedules ----

enum class PipeOp : std::uint8_t {
  kForward,
  kBackward,        ///< full backward (input and weight gradients)
  kBackwardInput,   ///< input gradient only (zero-bubble schedules' I)
  kBackwardWeight,  ///< weight gradient (W), after the stage's I of the same micro-batch
};
struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int stage = 0;
  int micro_batch = 0;
};
/// Each rank's actions in the order the schedule runs them (torch 2.15 torch/distributed/pipelining/
/// schedules.py; idle slots dropped: a rank runs its list in order and waits on its receives).
std::vector<std::vector<PipeAction>> pipeline_order(PpSchedule s, int pp, int virtual_stages,
                                                    int micro_batches);

// ---- the pipeline's timeline ----

/// Transient bytes of one action at its peak, by kind.
struct WorkingSet {
  Bytes act_bytes = 0, comm_bytes = 0, other_bytes = 0;
  Bytes total() const { return act_bytes + comm_bytes + other_bytes; }
};
/// Durations of one micro-batch's actions on one stage (seconds), and its memory as the pipeline holds it.
struct StageCost {
  double fwd_s = 0, bwd_s = 0;               ///< forward; full backward (recomputation included)
  double bwd_input_s = 0, bwd_weight_s = 0;  ///< the backward split into I and W (zero-bubble schedules)
  /// The stage's parameter all-gathers (FSDP, once per step): `gather_s` on the rank's data-parallel stream,
  /// issued in the order of the rank's first forwards from the step's start (the CPU runs ahead of the GPU:
  /// a receive's wait is a stream wait, torch stage.py _wait_batch_p2p); `first_fwd_extra_s` is how much
  /// later than fwd_s the stage's first forward ends when its gathers start with it (its one-micro-batch
  /// simulation), so the first forward ends no earlier than gather start + fwd_s + first_fwd_extra_s.
  double gather_s = 0;
  double first_fwd_extra_s = 0;
  // ---- memory (bytes on the stage's rank) ----
  Bytes held_bytes = 0;        ///< through the whole step: persistent state, unsharded parameters, buffers
  Bytes accum_grad_bytes = 0;  ///< unsharded gradients, from the stage's first backward to its last
  Bytes act_bytes = 0;         ///< saved by one micro-batch's forward, until its backward (or W) frees it
  /// Working sets while an action runs, above held_bytes, the accumulated gradients and the other
  /// micro-batches' saved activations: a forward's (its own activations as they grow included), a full or
  /// input-gradient backward's (its own saved activations included); a weight-gradient action adds nothing
  /// (its gradients accumulate into accum_grad_bytes).
  WorkingSet fwd_work, bwd_work;
  /// The stage's first full backward when its accumulated gradients grow during it (FSDP2 under PP: each
  /// unit's gradient is cast into its accumulation buffer at the unit's post-backward): that growth included,
  /// accum_grad_bytes then charged from the action's end. Empty (total 0): accum_grad_bytes from its start.
  WorkingSet bwd_first_work;
};
struct PipelineInputs {
  PpSchedule schedule = PpSchedule::k1F1B;
  int pp = 1, virtual_stages = 1, micro_batches = 1;
  std::vector<StageCost> stages;  ///< pp x virtual_stages, stage order
  /// Time of one activation (or activation-gradient) send between stages on different ranks; the V-shape's
  /// turn (stage pp - 1 to pp) stays on its rank and costs nothing.
  double p2p_s = 0;
};
/// A rank's memory at its peak action, by kind (sum = peak_bytes).
struct RankPeak {
  Bytes peak_bytes = 0;
  Bytes held_bytes = 0;        ///< its stages' held_bytes
  Bytes accum_grad_bytes = 0;  ///< unsharded gradients of its stages between first and last backward
  Bytes saved_act_bytes = 0;   ///< other micro-batches' saved activations
  WorkingSet work;             ///< the running action's working set
  int stage = -1, micro_batch = -1;
  PipeOp op = PipeOp::kForward;
};
struct PipelineRun {
  double makespan_s = 0;       ///< last action's end over all ranks
  double bubble_fraction = 0;  ///< 1 - (busy compute over all ranks) / (pp x makespan)
  std::vector<double> rank_busy_s, rank_end_s;
  std::vector<double> rank_gather_wait_s;         ///< first forwards' wait on the parameter all-gathers
  std::vector<double> stage_last_backward_end_s;  ///< when each stage's last backward action ends
  std::vector<int> stage_max_in_flight;           ///< micro-batches whose activations a stage holds at most
  std::vector<Bytes> rank_peak_activation_bytes;  ///< max over time of the saved activations on a rank
  std::vector<RankPeak> rank_peak;                ///< each rank's memory peak over its action sequence
  std::vector<int> rank_sends;                    ///< sends (activations + gradients) each rank makes
};
/// Runs the schedule's order: each rank executes its actions in order; an action starts when its rank is
/// free and its input has arrived (the previous stage's forward, or the next stage's backward, plus p2p_s
/// when the two stages sit on different ranks). Throws std::logic_error if the order deadlocks.
PipelineRun run_pipeline(const PipelineInputs& in);

// ---- one simulated step ----

/// Simulates one training step of a resolved plan with pp > 1 into `r` (memory of the busiest rank, step
/// time, pipeline summary): each stage's slice of the model is simulated for one micro-batch with the
/// runtime's lowering, and the pipeline's timeline is run over those stage costs. `detail` keeps the task
/// program of the busiest rank's first stage (one micro-batch) for traces. `allocator_replay`: the stages'
/// reserved memory from the caching-allocator replay (Simulator::set_allocator_replay), off in the planner's
/// cheap pass.
void simulate_pipeline_step(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                            const Plan& p, Result& r, bool detail = false, bool allocator_replay = true);

}  // namespace shardplan

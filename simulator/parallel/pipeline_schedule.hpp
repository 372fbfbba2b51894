// Pipeline schedules as torch.distributed.pipelining builds them (torch 2.15 schedules.py): each schedule's
// order of forward / backward micro-batch actions per pipeline rank, and a discrete-event run of that order
// over per-stage costs with the point-to-point sends between stages. Pure: no model, no simulator.
#pragma once
#include <cstdint>
#include <vector>

#include "core/units.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

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

/// FSDP residency of one rank's stages before each of its actions, as torch's multi-stage runtime lowers a
/// schedule (torch 2.15 schedules.py _add_unshard_reshard, unshard_lookahead "full"): the next
/// `max_active_stages` distinct stages of the remaining actions stay unsharded; stages outside that window
/// are resharded (RESHARD frees their unsharded parameters), stages entering it are unsharded (UNSHARD: an
/// all-gather). `unshard[i]` / `reshard[i]` are the stages unsharded / resharded just before action i, in
/// torch's order; the stages still active after the last action are resharded then (not listed).
struct Residency {
  std::vector<std::vector<int>> unshard, reshard;
};
Residency fsdp_residency(const std::vector<PipeAction>& order, int max_active_stages);

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
  /// Compute only the stage's first forward of the step does, beyond fwd_s (Transformer Engine's fp8 weight
  /// casts, cached for the later micro-batches).
  double first_fwd_s = 0;
  /// The stage's gradient reduction after its last weight-gradient action (the data-parallel stream).
  double reduce_s = 0;
  // ---- memory (bytes on the stage's rank) ----
  Bytes held_bytes = 0;        ///< through the whole step: persistent state, buffers
  Bytes gathered_bytes = 0;    ///< unsharded parameters (FSDP), held while the stage is unsharded
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
/// When a stage posts the receive of its input (an activation, or an activation gradient) relative to the
/// compute that consumes it. A posted receive runs once the receiver's compute issued before it is done
/// (NCCL's stream waits on the current stream at issue, ProcessGroupNCCL syncStream) and the sender's data
/// is there; the consumer waits on it (a stream wait).
enum class RecvPosting : std::uint8_t {
  /// Just before the consumer: the transfer starts after the rank's previous action (torch's single-stage
  /// schedules: Schedule1F1B / ScheduleGPipe _step_microbatches wait on the receive right after issuing it;
  /// Megatron's 1F1B without interleaving; DeepSpeed's PipelineEngine).
  kAtConsumer,
  /// One action ahead: the transfer overlaps the rank's previous action (Megatron's interleaved schedule with
  /// overlap_p2p_comm posts the next receive after the current forward, before the current backward, and
  /// waits before the next forward).
  kAhead,
  /// As soon as the sender has produced it: the receive is issued at that point of the receiver's program, so
  /// it starts when the data is there or, if the receiver is computing then, when that action ends (torch's
  /// multi-stage runtime: _add_send_recv appends each RECV to the receiver's list when its sender's action is
  /// scheduled, in the lowering's lock-step over the ranks).
  kAsap,
};
struct PipelineInputs {
  PpSchedule schedule = PpSchedule::k1F1B;
  int pp = 1, virtual_stages = 1, micro_batches = 1;
  std::vector<StageCost> stages;  ///< pp x virtual_stages, stage order
  /// Time of one activation (or activation-gradient) send between stages on different ranks; the V-shape's
  /// turn (stage pp - 1 to pp) stays on its rank and costs nothing. `edge_p2p_s[s]`, when given (stages - 1
  /// entries), is the send's time across the boundary between stages s and s + 1 (its link: NVLink inside
  /// an NVLink domain, the NIC across); otherwise every boundary takes p2p_s.
  double p2p_s = 0;
  std::vector<double> edge_p2p_s;
  RecvPosting recv_posting = RecvPosting::kAhead;
  /// The rank's compute waits for each stage's gradient reduction (torch FSDP stages: WAIT_REDUCE_GRAD right
  /// after REDUCE_GRAD, FSDPState._end_backward_iteration makes the current stream wait on the
  /// reduce-scatters); otherwise it runs on the data-parallel stream beside the compute (Megatron's
  /// overlap_grad_reduce).
  bool reduce_waits = false;
  /// FSDP stages unsharded at once on a rank (torch's multi-stage runtime: max_active_stages = 3); 0: every
  /// stage stays unsharded through the step.
  int max_active_stages = 0;
};
/// A rank's memory at its peak action, by kind (sum = peak_bytes).
struct RankPeak {
  Bytes peak_bytes = 0;
  Bytes held_bytes = 0;        ///< its stages' held_bytes
  Bytes gathered_bytes = 0;    ///< unsharded parameters of its stages unsharded then
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
  std::vector<double> rank_gather_wait_s;         ///< compute's wait on the parameter all-gathers
  std::vector<double> rank_reduce_wait_s;         ///< compute's wait on the gradient reductions
  std::vector<double> rank_dp_end_s;              ///< when the rank's data-parallel stream is done
  std::vector<double> rank_regather_s;            ///< all-gathers of stages unsharded again (residency)
  std::vector<double> stage_last_backward_end_s;  ///< when each stage's last backward action ends
  std::vector<int> stage_max_in_flight;           ///< micro-batches whose activations a stage holds at most
  std::vector<Bytes> rank_peak_activation_bytes;  ///< max over time of the saved activations on a rank
  std::vector<RankPeak> rank_peak;                ///< each rank's memory peak over its action sequence
  std::vector<int> rank_sends;                    ///< sends (activations + gradients) each rank makes
  /// Every action as it ran, per rank in its order: its span and the rank's memory while it ran (the
  /// composition rank_peak is the largest of), for charts of the whole step.
  struct TimedAction {
    PipeAction action;
    /// free_s: when the rank was free and the action's input had arrived; it waited from then to start_s on
    /// its stage's parameters (the all-gathers, rank_gather_wait_s).
    double free_s = 0, start_s = 0, end_s = 0;
    /// After a stage's last backward under torch's FSDP stages: the compute stream waits from end_s to here
    /// on the stage's gradient reduction (rank_reduce_wait_s); else end_s.
    double reduce_wait_end_s = 0;
    RankPeak memory;
  };
  std::vector<std::vector<TimedAction>> rank_actions;
};
/// Bytes of one micro-batch's activation (or activation gradient) sent between two stages: mbs x seq x
/// hidden in the compute dtype, the sequence-parallel shard with TP (torchtitan's block outputs are
/// sequence-sharded; Megatron's with sequence parallelism) and the rank's seq / cp share with context
/// parallelism.
double pipeline_send_bytes(const Plan& p, std::int64_t hidden);

/// Runs the schedule's order: each rank executes its actions in order; an action starts when its rank is
/// free, its stage is unsharded and its input has arrived (the previous stage's forward, or the next stage's
/// backward, sent across the boundary from when the receive is posted). Each rank's data-parallel stream runs
/// the parameter all-gathers and the gradient reductions. Throws std::logic_error if the order deadlocks.
PipelineRun run_pipeline(const PipelineInputs& in);

}  // namespace shardplan

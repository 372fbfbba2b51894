// Result: everything one simulated step yields — memory (busiest rank), time, communication per kind — the
// one value that reports format (they compute nothing).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "simulator/engine/engine.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// Communication kinds reported separately (FSDP, HSDP/DDP, tensor parallel, CPU offload).
enum class CommKind : std::uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kTpAllGather,
  kTpReduceScatter,
  kOffloadCopy,         ///< host<->device copies of CPU offload (PCIe)
  kCpRing,              ///< context parallelism: ring attention's K/V all-gathers and dK/dV shifts
  kAllToAll,            ///< expert parallelism: MoE token dispatch and combine
  kOptimizerAllGather,  ///< the optimizer's own gathers (Muon: each sharded matrix, to orthogonalise it)
};
inline constexpr int kCommKinds = 9;
const char* to_string(CommKind k);

struct CommStats {
  double bytes_per_rank = 0;  ///< bytes each rank sends over the step (ring; PCIe bytes for offload copies)
  double time_s = 0;          ///< total time of these transfers
  double exposed_s = 0;  ///< time in which the compute stream idles and this kind is the transfer it waits on
  int count = 0;
};

/// The simulated step's task program and timeline, kept by a detail run for traces and charts.
struct StepDetail {
  Program program;
  Timeline timeline;
};

/// One pipeline stage in a pp > 1 step (simulator/simulate/pipeline_step.hpp).
struct PipelineStage {
  int stage = 0, rank = 0, blocks = 0;
  bool embedding = false, head = false;  ///< holds the embedding (first stage) / norm + LM head + loss (last)
  Bytes peak_bytes = 0;           ///< peak allocated on the stage's pipeline rank (all its stages together)
  Bytes persistent_bytes = 0;     ///< this stage's parameters + gradients + optimizer state on one rank
  Bytes activation_bytes = 0;     ///< activations one micro-batch's forward saves on this stage
  int activations_in_flight = 0;  ///< most micro-batches whose activations the stage holds at once
  double fwd_s = 0, bwd_s = 0;    ///< one micro-batch's forward / backward on this stage
};
/// One action of a pipeline rank on the step's timeline (detail runs), with the rank's memory while it runs.
struct PipelineSpan {
  int rank = 0, stage = 0, micro_batch = 0;
  char op = 'F';  ///< F forward, B full backward, I input-gradient backward, W weight-gradient backward
  double start_s = 0, end_s = 0;
  /// The rank's allocated memory while the action runs (their sum is what the rank's peak is the largest of):
  /// held through the step (persistent state, unsharded parameters, receive buffers), accumulated unsharded
  /// gradients, other micro-batches' saved activations, the action's working set.
  Bytes held_bytes = 0, accum_grad_bytes = 0, saved_act_bytes = 0, work_bytes = 0;
  Bytes total() const { return held_bytes + accum_grad_bytes + saved_act_bytes + work_bytes; }
};
/// What pipeline parallelism adds to a Result (absent when pp == 1).
struct PipelineSummary {
  PpSchedule schedule = PpSchedule::k1F1B;
  int pp = 1, stages = 1, virtual_stages = 1, micro_batches = 1;
  double bubble_fraction = 0;     ///< 1 - busy compute / (pp x the schedule's span), over all ranks
  double p2p_bytes_per_step = 0;  ///< bytes the busiest pipeline rank sends to its neighbours per step
  double p2p_s = 0;               ///< time of one send between stages on different ranks
  int busiest_rank = 0;           ///< the pipeline rank whose memory the Result reports
  int slowest_rank = 0;           ///< the pipeline rank whose step the Result reports (its exposed time)
  std::vector<PipelineStage> stage_detail;
  /// Detail runs: every action of every rank over the whole step, and the busiest rank's optimizer tail
  /// (from `tail_start_s`, its memory `tail_bytes`: held state plus the optimizer's transients).
  std::vector<PipelineSpan> spans;
  double tail_start_s = 0;
  Bytes tail_bytes = 0;
};
/// What the caching-allocator replay of the step says (simulator/memory/replay.hpp), as
/// torch.cuda.memory_stats() would after the run's first two steps.
struct AllocatorSummary {
  /// False in the planner's cheap pass: peak_reserved_bytes is then reserved_lower_bound (no replay).
  bool replayed = false;
  AllocatorMode mode = AllocatorMode::kDefault;
  Bytes peak_allocated_bytes = 0;  ///< allocated_bytes.all.peak (512-byte rounded blocks)
  Bytes peak_reserved_bytes = 0;   ///< reserved_bytes.all.peak
  /// Reserved but not allocated at the peaks: peak_reserved - peak_allocated (cached free blocks, the unused
  /// tails of split and of rounded segments).
  Bytes fragmentation_bytes = 0;
  std::string reserved_peak_phase;  ///< which allocation set the reserved peak
  std::int64_t segments = 0;        ///< segment.all.peak: cudaMalloc'd segments (expandable: not counted)
  std::int64_t device_allocs = 0;   ///< cudaMalloc calls (and expandable page maps)
  std::int64_t alloc_retries = 0;   ///< mallocs retried after freeing the cache at the capacity
  bool oom = false;  ///< an allocation failed at the device's capacity; the peaks are the uncapped demand
};

struct Result {
  Plan plan;
  // Memory (bytes, busiest rank).
  Bytes persistent_bytes = 0;
  std::array<Bytes, 3> persistent_split{};  ///< params, grads, optimizer (on the GPU)
  Bytes peak_bytes = 0;                     ///< predicted max_memory_allocated
  Bytes peak_reserved_bytes = 0;            ///< predicted max_memory_reserved (allocator.peak_reserved_bytes)
  AllocatorSummary allocator;
  /// Peak allocated in the run's first step, where the optimizer state is created by the first optimizer
  /// step: before it the state does not exist, from it on it does. Never above `peak_bytes` (the steady
  /// state).
  Bytes first_step_peak_bytes = 0;
  RuntimeOverhead overhead;
  Bytes capacity_bytes = 0;
  /// CPU offload: host memory one node needs for the offloaded state of its GPUs, and what it has (0 =
  /// unknown).
  Bytes host_bytes_per_node = 0, host_capacity_bytes = 0;
  /// --activation-offload: pinned host bytes of one micro-batch's offloaded activations on one rank (part of
  /// host_bytes_per_node).
  Bytes activation_host_bytes = 0;
  bool fits = false;
  std::array<Bytes, kMemCategories> breakdown{};
  std::string peak_phase;  ///< e.g. "backward unit 3, micro-batch 0"
  double peak_time_s = 0;
  // Time.
  double step_s = 0, compute_s = 0, exposed_comm_s = 0, optimizer_s = 0;
  double tokens_per_s_per_gpu = 0, mfu = 0, model_flops_per_token = 0;
  std::array<CommStats, kCommKinds> comm{};
  /// With `detail`: the intervals (seconds) in which the compute stream waits on communication, for charts.
  std::shared_ptr<std::vector<std::pair<double, double>>> exposed_intervals;
  /// With `detail`: the program and timeline the numbers come from (what reports draw; they re-run nothing).
  std::shared_ptr<const StepDetail> detail;
  /// Pipeline parallelism (pp > 1): the schedule's summary and each stage; null otherwise.
  std::shared_ptr<const PipelineSummary> pipeline;
  Bytes headroom_bytes() const { return capacity_bytes - peak_reserved_bytes - overhead.total(); }
};

}  // namespace shardplan

// The caching-allocator replay of a simulated step: the Program's allocations and frees (tensor by tensor,
// in CPU issue order, each on the stream whose pool serves it) go through CachingAllocator
// (simulator/memory/allocator.hpp), over the run's first steps, and the allocator's peaks come out: reserved
// memory is what the allocator would hold, not a fitted factor (docs/model.md "Reserved memory").
#pragma once
#include <cstdint>
#include <vector>

#include "simulator/engine/engine.hpp"
#include "simulator/memory/allocator.hpp"

namespace shardplan {

/// A program lowered with its steady micro-batches left out (simulate/steady_state.hpp): tasks [block_lo,
/// block_hi) are a steady micro-batch, [block_prev, block_lo) the one before it, and the whole step runs
/// `copies` more copies of [block_lo, block_hi) before [block_hi, end).
struct ReplayRepeat {
  std::int32_t block_prev = 0, block_lo = 0, block_hi = 0;
  int copies = 0;
};

struct ReplayOutcome {
  AllocatorStats stats;  ///< peaks over every replayed step
  /// The task whose allocation last raised the reserved peak (-1: the tensors allocated before the step), and
  /// in which replayed step (1-based; 0 = before the first).
  std::int32_t reserved_peak_task = -1;
  int reserved_peak_step = 0;
  /// With a ReplayRepeat: the copy of the steady micro-batch the peak task ran in (0: as lowered, or outside
  /// it), so the micro-batch is the task's plus this; how many copies the allocator ran before its state
  /// repeated (the rest are the same allocations from the same state: counted, not run), over all steps.
  int reserved_peak_copy = 0;
  std::int64_t copies_run = 0;
  /// The ReplayRepeat was refused (the steady micro-batch's tensors do not pass one to the next as a copy's
  /// would): nothing was replayed; replay the whole step's program instead.
  bool repeat_refused = false;
};

/// Reusable (keeps its containers: no heap allocation per replay once warm).
class AllocatorReplay {
 public:
  /// Replays `prog` for `steps` consecutive steps: Program::initial first (optimizer state, when
  /// Program::optimizer_state_lazy, at the first optimizer task of step 1, as torch.optim creates it), then
  /// the step's effects `steps` times; Program::carried groups pass from one step to the next. The first
  /// allocation that fails (OOM under `config.capacity_bytes`) ends the replay, as PyTorch's malloc raises
  /// OutOfMemoryError there (CUDACachingAllocator.cpp malloc: TORCH_CHECK_WITH(OutOfMemoryError, ...) after
  /// the one release_cached_blocks retry): the stats are those up to it (num_ooms 1), and the peaks of a
  /// replay that ran out are not the step's (replay again without a capacity for the demand).
  ///
  /// `repeat`: `prog` is a truncated step; the steady micro-batch is replayed 1 + copies times, its tensors
  /// renamed per copy (a tensor it receives from the micro-batch before is the previous copy's), which is the
  /// whole step's allocation sequence. Once a copy leaves the allocator and the tensors passed on exactly as
  /// the copy before did (same blocks at the same addresses, no cudaMalloc, cudaFree or retry in it), every
  /// later copy would repeat it: they are counted and skipped. The stats equal the whole step's replay.
  const ReplayOutcome& run(const Program& prog, const AllocatorConfig& config, int steps = 2,
                           const ReplayRepeat* repeat = nullptr);
  /// Whether run() accepts `repeat` for `prog` (else it sets ReplayOutcome::repeat_refused).
  bool can_repeat(const Program& prog, const ReplayRepeat& repeat) { return prepare_repeat(prog, repeat); }

 private:
  bool malloc_group(const MemEffect& e, std::int32_t group, std::int32_t task, int step);
  void free_group(std::int32_t group);
  /// Roles of the steady micro-batch's tensors (prepare_repeat); false: refused.
  bool prepare_repeat(const Program& prog, const ReplayRepeat& r);
  void describe_passed(std::int32_t space, std::vector<std::int64_t>& out) const;
  struct Node {
    BlockId block;
    std::int32_t next;
  };
  CachingAllocator alloc_;
  std::vector<std::int32_t> head_;  ///< per tensor group: its first node in nodes_, -1 if none live
  std::vector<Node> nodes_;
  std::int32_t free_nodes_ = -1;
  ReplayOutcome out_;
  int copy_ = 0;  ///< the steady copy being replayed (for the peak's attribution)
  // ReplayRepeat: per group, its role in the steady micro-batch; for a group the micro-batch receives, the
  // group of the steady micro-batch that plays its part one copy later.
  enum class Role : std::uint8_t { kOther, kPassedOn, kReceived };
  std::vector<Role> role_;
  std::vector<std::int32_t> successor_;
  std::vector<std::int32_t> passed_;  ///< the groups the steady micro-batch passes on, in id order
  std::vector<std::int32_t> first_alloc_, last_alloc_, first_free_, last_free_;
  std::vector<std::int64_t> state_a_, state_b_;
};

}  // namespace shardplan

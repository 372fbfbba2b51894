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

struct ReplayOutcome {
  AllocatorStats stats;  ///< peaks over every replayed step
  /// The task whose allocation last raised the reserved peak (-1: the tensors allocated before the step), and
  /// in which replayed step (1-based; 0 = before the first).
  std::int32_t reserved_peak_task = -1;
  int reserved_peak_step = 0;
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
  const ReplayOutcome& run(const Program& prog, const AllocatorConfig& config, int steps = 2);

 private:
  bool malloc_group(const MemEffect& e, std::int32_t task, int step);
  void free_group(std::int32_t group);
  struct Node {
    BlockId block;
    std::int32_t next;
  };
  CachingAllocator alloc_;
  std::vector<std::int32_t> head_;  ///< per tensor group: its first node in nodes_, -1 if none live
  std::vector<Node> nodes_;
  std::int32_t free_nodes_ = -1;
  ReplayOutcome out_;
};

}  // namespace shardplan

// A domain-agnostic discrete-event engine: typed tasks on FIFO lanes (CUDA streams, NCCL communicators),
// issued by one CPU thread in program order, with dependencies, CPU-blocking waits and memory effects. It
// knows nothing about LLMs. Completions are processed from a priority queue ordered by (time, sequence) so
// ties are deterministic; verify() fails on unfinished tasks or unreleased memory.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/units.hpp"

namespace shardplan {

enum class TaskType : std::uint8_t { kCompute, kCopy, kCollective, kOptimizer, kMarker };

/// What a memory effect is accounted as (the report's breakdown categories).
enum class MemCategory : std::uint8_t {
  kParams,
  kGrads,
  kOptimizer,
  kActivations,
  kGathered,
  kCommBuffers,
  kOther
};
inline constexpr int kMemCategories = 7;
const char* to_string(MemCategory c);

/// One allocation or free, with tensor identity. An allocation (delta > 0) creates `count` tensors of
/// delta / count bytes each (e.g. one per parameter of equal size), in tensor group `tensor`; several
/// allocations may add to one group (tensors of different sizes freed together). A free (delta < 0) names the
/// group and frees every tensor in it; its delta is minus the group's total. The aggregate walk reads only
/// the deltas; the caching-allocator replay (simulator/memory/replay.cpp) reads the tensors.
struct MemEffect {
  MemCategory category;
  std::uint8_t pool;         ///< the CUDA stream whose caching-allocator pool serves the allocation (Pool)
  std::uint16_t count = 1;   ///< allocation: tensors of delta_bytes / count bytes each
  std::int32_t tensor = -1;  ///< tensor group id (Program::new_tensor); every effect of a lowering has one
  Bytes delta_bytes = 0;     ///< > 0 allocate, < 0 free
};

struct Task {
  TaskType type = TaskType::kCompute;
  std::uint8_t lane = 0;
  double duration_s = 0;
  double cpu_s = 0;                ///< CPU time to issue it (kernel launches, hooks)
  std::int32_t cpu_wait_for = -1;  ///< the CPU blocks until this earlier task has finished before issuing
  std::array<std::int32_t, 3> deps{-1, -1, -1};   ///< earlier tasks that must finish first (stream waits)
  std::uint32_t first_effect = 0, n_effects = 0;  ///< memory effects applied when the CPU issues the task
  std::uint32_t label = 0;                        ///< index into Program::labels (what the trace shows)
  std::int32_t unit = -1, micro_batch = -1;
  bool backward = false;          ///< part of a backward pass (for reports)
  std::uint8_t comm_kind = 0xff;  ///< the report's communication kind of a collective; 0xff for none
  std::uint16_t collectives = 1;  ///< collectives this task stands for (a unit's TP collectives are one task)
};

/// A task DAG in CPU issue order. Reused across simulations (clear() keeps capacity: no allocation in hot
/// loops).
struct Program {
  std::vector<Task> tasks;
  std::vector<MemEffect> effects;
  std::vector<std::string> lane_names;
  std::vector<std::string> labels;
  std::int32_t tensors = 0;  ///< tensor group ids handed out (0 .. tensors-1)
  /// Tensors allocated before the step (persistent state per parameter, buffers that live across steps), in
  /// the order the framework creates them; their per-category sums are the engine's `initial`. Optimizer
  /// state entries are created lazily by the first optimizer step (the allocator replay models that).
  std::vector<MemEffect> initial;
  /// The optimizer state of `initial` is created by the first optimizer step (torch.optim), not before the
  /// step (DeepSpeed allocates its partitions at initialisation).
  bool optimizer_state_lazy = true;
  /// {group allocated before the step, group that takes its place at the end of the step}: tensors that pass
  /// from one step to the next (the training loop's held logits).
  std::vector<std::pair<std::int32_t, std::int32_t>> carried;
  void clear() {
    tasks.clear();
    effects.clear();
    initial.clear();
    carried.clear();
    tensors = 0;
  }
  std::int32_t new_tensor() { return tensors++; }
  std::int32_t add(Task t, std::initializer_list<MemEffect> fx = {}) {
    t.first_effect = static_cast<std::uint32_t>(effects.size());
    t.n_effects = static_cast<std::uint32_t>(fx.size());
    effects.insert(effects.end(), fx.begin(), fx.end());
    tasks.push_back(t);
    return static_cast<std::int32_t>(tasks.size() - 1);
  }
  /// Adds an effect to the most recently added task.
  void add_effect(MemEffect e) {
    effects.push_back(e);
    tasks.back().n_effects++;
  }
};

struct TaskTiming {
  double issue_s = 0, start_s = 0, end_s = 0;
  /// The earlier task whose completion set this task's start (a dependency, or the previous task on its
  /// lane); -1 when its issue by the CPU did.
  std::int32_t blocked_by = -1;
  /// The task the CPU blocked on (cpu_wait_for) right before issuing this one; -1 if it did not block.
  std::int32_t cpu_waited_for = -1;
};

/// One sample of the memory timeline: after the effects of task `task` (CPU issue order).
struct MemSample {
  double time_s;
  std::int32_t task;
  Bytes allocated_bytes;
};

struct Timeline {
  std::vector<TaskTiming> timing;
  double end_s = 0;
  std::int32_t completed = 0;  ///< tasks that ran to completion
  std::vector<double> lane_busy_s;
  // Memory, walked in CPU issue order (what torch.cuda.memory_allocated reports).
  Bytes base_bytes = 0;  ///< allocated before the step (persistent state)
  Bytes peak_bytes = 0;
  std::int32_t peak_task = -1;
  double peak_time_s = 0;
  std::array<Bytes, kMemCategories> at_peak{};  ///< per category at the peak
  std::array<Bytes, kMemCategories> current{};  ///< per category at the end
  std::vector<Bytes> pool_peak_bytes;           ///< per pool, peak of allocator-rounded bytes
  /// Peaks of allocated bytes before the first optimizer task and from it on (the first optimizer step of a
  /// run creates its state there; before it the state does not exist yet).
  Bytes peak_before_optimizer_bytes = 0, peak_from_optimizer_bytes = 0;
  bool record_samples = false;
  std::vector<MemSample> samples;
  /// The same effects on the GPU's time axis: each task's effects applied when its kernel starts on its lane
  /// (when the tensors it allocates start to be written and the ones it frees are last used), in order of
  /// start time; what the timeline chart draws under the lanes. Only with record_samples.
  std::vector<MemSample> gpu_samples;
  void clear() {
    timing.clear();
    lane_busy_s.clear();
    pool_peak_bytes.clear();
    samples.clear();
    gpu_samples.clear();
    at_peak = {};
    current = {};
    end_s = 0;
    completed = 0;
    peak_bytes = 0;
    peak_task = -1;
    peak_before_optimizer_bytes = peak_from_optimizer_bytes = 0;
  }
};

/// The CUDA caching allocator's request rounding, the one definition every room uses (kMinBlockSize,
/// c10/cuda/CUDACachingAllocator.cpp, torch 2.15).
inline constexpr Bytes kAllocationQuantumBytes = 512;
/// Bytes one request takes from the caching allocator (round_size without roundup_power2_divisions, the
/// default: requests below 512 B take 512, others round up to a multiple of 512); 0 for 0 (no allocation).
inline constexpr Bytes allocation_bytes(Bytes request_bytes) {
  return request_bytes <= 0 ? 0
                            : (request_bytes + kAllocationQuantumBytes - 1) / kAllocationQuantumBytes *
                                  kAllocationQuantumBytes;
}
/// The walk's estimate of what one allocation takes from the allocator's segments: allocation_bytes, and from
/// 10 MiB up a whole 2 MiB multiple (large segments); negative for a free.
Bytes allocator_round(Bytes request_bytes);

/// Runs the program. `initial` holds bytes already allocated per category (persistent state) in pool 0.
void run_engine(const Program& program, int n_lanes, int n_pools,
                const std::array<Bytes, kMemCategories>& initial, Timeline& out);

/// Throws std::logic_error if a task never ran or memory allocated during the step was not released
/// (categories listed in `may_persist` are allowed to end non-zero, e.g. gradients).
void verify_timeline(const Program& program, const Timeline& t,
                     const std::array<Bytes, kMemCategories>& initial,
                     const std::array<bool, kMemCategories>& may_persist);

}  // namespace shardplan

// simulate(model, cluster, plan, costs) -> Result. The stages, one file each: units.cpp (per-unit sizes and
// costs), lowering.cpp (the task program of the plan's runtime, from runtime.hpp's traits), engine.cpp (the
// discrete-event run), memory.cpp (persistent state, initial allocations, reserved, overhead) and summary.cpp
// (time, exposed communication, MFU). `memory` and `simulate` use the same run, so their peaks agree by
// construction. A Simulator keeps its buffers between runs: the planner reuses one per thread and allocates
// nothing per plan once warm.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/engine/engine.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/memory/memory.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"
#include "simulator/result/result.hpp"

namespace shardplan {

/// How a Simulator runs a step.
struct SimulatorOptions {
  /// Simulate the first micro-batches and the last and extend the steady middle ones exactly
  /// (steady_state.hpp) instead of simulating each; off simulates every micro-batch. Detail runs always
  /// simulate every micro-batch (their program and timeline are drawn task by task).
  bool steady_state = true;
};

/// What a Simulator did, counted over its runs.
struct SimulatorStats {
  std::int64_t runs = 0, extended = 0;  ///< runs, and those whose middle micro-batches were extended
  std::int64_t fallbacks = 0;           ///< truncated runs whose check failed (then simulated in full)
  const char* last_fallback = nullptr;  ///< the check that failed last (steady_state.cpp)
};

class Simulator {
 public:
  Simulator(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
            SimulatorOptions options = {});
  /// Runs one plan (already resolved with resolve_plan). `detail` keeps task labels and memory samples for
  /// traces and plots.
  const Result& run(const Plan& plan, bool detail = false);
  /// Whether run() replays the step through the caching allocator (default: yes). Off, peak_reserved_bytes is
  /// the per-stream lower bound (reserved_lower_bound) and Result::allocator.replayed is false: the planner's
  /// cheap pass, followed by a replay of the plans it may recommend.
  void set_allocator_replay(bool on) { replay_on_ = on; }
  /// The program and timeline last simulated: with a steady-state extension, the truncated step (first
  /// micro-batches and the last); a detail run's are the whole step's.
  const Program& program() const { return prog_; }
  const Timeline& timeline() const { return tl_; }
  /// Lanes of the last run's program: kLanesWithoutCpEp, or kLanes with context or expert parallelism.
  int lanes() const { return static_cast<int>(prog_.lane_names.size()); }
  const std::vector<SimUnit>& units() const { return units_; }
  const ModelGraph& model() const { return *model_; }
  const Cluster& cluster() const { return *cluster_; }
  const SimulatorStats& stats() const { return stats_; }

  /// Persistent state alone (params + grads + optimizer on one rank): see memory.hpp.
  static std::array<Bytes, 3> persistent_state(const ModelGraph& model, const Plan& plan) {
    return shardplan::persistent_state(model, plan);
  }
  /// Activations saved by one micro-batch's forward on one rank (a lower bound of the peak's activations).
  static Bytes activation_bytes(const ModelGraph& model, const Plan& plan) {
    return shardplan::activation_bytes(model, plan);
  }

 private:
  const ModelGraph* model_;
  const Cluster* cluster_;
  const CostModel* costs_;
  SimulatorOptions options_;
  SimulatorStats stats_;
  MicroBatchBlocks blocks_;
  Program prog_;
  Timeline tl_;
  Result res_;
  std::vector<SimUnit> units_;
  AllocatorReplay replay_;
  bool replay_on_ = true;
};

/// Convenience: resolve nothing, run once, return a copy.
Result simulate(const ModelGraph& model, const Cluster& cluster, const CostModel& costs, const Plan& plan);

}  // namespace shardplan

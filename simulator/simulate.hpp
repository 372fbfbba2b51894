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

#include "simulator/cost_model.hpp"
#include "simulator/engine.hpp"
#include "simulator/memory.hpp"
#include "simulator/model_graph.hpp"
#include "simulator/plan.hpp"
#include "simulator/replay.hpp"
#include "simulator/result.hpp"
#include "simulator/runtime.hpp"
#include "simulator/units.hpp"

namespace shardplan {

class Simulator {
 public:
  Simulator(const ModelGraph& model, const Cluster& cluster, const CostModel& costs);
  /// Runs one plan (already resolved with resolve_plan). `detail` keeps task labels and memory samples for
  /// traces and plots.
  const Result& run(const Plan& plan, bool detail = false);
  /// Whether run() replays the step through the caching allocator (default: yes). Off, peak_reserved_bytes is
  /// the per-stream lower bound (reserved_lower_bound) and Result::allocator.replayed is false: the planner's
  /// cheap pass, followed by a replay of the plans it may recommend.
  void set_allocator_replay(bool on) { replay_on_ = on; }
  const Program& program() const { return prog_; }
  const Timeline& timeline() const { return tl_; }
  int lanes() const { return kLanes; }
  const std::vector<SimUnit>& units() const { return units_; }
  const ModelGraph& model() const { return *model_; }
  const Cluster& cluster() const { return *cluster_; }

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

// Lowering: turns a plan's units into the step's task Program — compute, copies and collectives on their
// lanes, in the CPU issue order of the runtime, with dependencies, CPU-blocking waits and memory effects —
// following the plan's RuntimeTraits (docs/mechanics.md §3.2 FSDP2, §3.3 FSDP1, §3.4-§3.5 DeepSpeed).
#pragma once
#include <array>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/lowering/units.hpp"
#include "simulator/result/result.hpp"

namespace shardplan {

struct LoweringInputs {
  const ModelGraph& model;
  const Cluster& cluster;
  const CostModel& costs;
  const Plan& plan;
  const RuntimeTraits& traits;
  const std::vector<SimUnit>& units;
  bool labels = false;  ///< build task labels (traces, reports); skipped in the planner's hot loop
  /// > 0: lower only micro-batches 0 .. steady_prefix-1 and the last one (steady_state.hpp extends the rest);
  /// 0, or when that would not skip any: every micro-batch.
  int steady_prefix = 0;
  /// Bytes allocated before the step per category (initial_allocation): Program::initial is made of tensors
  /// that add up to these. Null: no initial tensors.
  const std::array<Bytes, kMemCategories>* initial = nullptr;
  /// Split every effect into its tensors (for the allocator replay); false: one effect per buffer, the
  /// planner's cheap pass (same totals, fewer effects).
  bool tensors = true;
};

/// Where each lowered micro-batch starts in the Program, and what it sent (steady_state.hpp).
struct MicroBatchBlocks {
  std::vector<std::int32_t> first_task;  ///< first task of each lowered micro-batch (the last one: the tail)
  std::vector<std::array<double, kCommKinds>> sent_bytes;  ///< bytes per rank each lowered micro-batch sent
  void clear() {
    first_task.clear();
    sent_bytes.clear();
  }
};

struct LoweringOutput {
  Program& program;
  std::array<CommStats, kCommKinds>& comm;  ///< bytes per rank (and TP times) accumulated while lowering
  double optimizer_s = 0;
  /// --activation-offload: pinned host bytes one micro-batch's offloaded activations take on this rank.
  Bytes activation_host_bytes = 0;
  MicroBatchBlocks* blocks = nullptr;  ///< filled when given
};

void lower(const LoweringInputs& in, LoweringOutput& out);

}  // namespace shardplan

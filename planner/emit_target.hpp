// The emit targets of `plan --emit` as an enum, and what each can express: the search is constrained to it
// (constrain_to_target) and a plan is re-simulated as the target's output will run it (as_emitted) where a
// pinned knob cannot be expressed. The writers themselves are planner/emit.{hpp,cpp}.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/search.hpp"

namespace shardplan {

/// fsdp2: the PyTorch FSDP2 script; deepspeed: a ds_config; torchtitan: torchtitan 0.3.0's Python config;
/// torchtitan-toml: the 2024-2025 torchtitan TOML.
enum class EmitTarget : std::uint8_t { kFsdp2, kDeepSpeed, kTorchtitan, kTorchtitanToml };
inline constexpr EmitTarget kEmitTargets[] = {EmitTarget::kFsdp2, EmitTarget::kDeepSpeed,
                                              EmitTarget::kTorchtitan, EmitTarget::kTorchtitanToml};

const char* to_string(EmitTarget t);
std::optional<EmitTarget> parse_emit_target(std::string_view kind);
/// "fsdp2, deepspeed, torchtitan, torchtitan-toml"
std::string emit_target_names();
/// The runtime whose semantics the target's output has (torchtitan runs FSDP2).
Runtime target_runtime(EmitTarget t);

/// Restricts the searched knobs to what the target expresses (its runtime; no PP, CP or EP in the FSDP2
/// script and the ds_config; one block per unit and one unit prefetched in torchtitan; fp32 reduction in
/// torchtitan). A dimension whose every value is outside (a pinned knob the target cannot express) is kept:
/// the plan is then re-simulated as it will run (as_emitted).
void constrain_to_target(EmitTarget t, SearchSpace& space);
/// Every target's constraint; the runtime only when all targets run the same one (otherwise each target's
/// file is the recommended plan re-simulated under its runtime).
void constrain_to_targets(const std::vector<EmitTarget>& targets, SearchSpace& space);
/// All targets run the same runtime.
bool same_runtime(const std::vector<EmitTarget>& targets);
/// The plan as the target's output runs it: the knobs it cannot express set to what it writes (the runtime,
/// torchtitan's wrap / prefetch / fp32 reduction and precisions, DeepSpeed's fused Adam, ...). Equal to `p`
/// when everything is expressed.
Plan as_emitted(EmitTarget t, const Plan& p);

}  // namespace shardplan

namespace shardplan {

/// The recommended plan as target `t` runs it, re-simulated when it differs.
struct EmittedRun {
  /// What the writer is given: the recommended plan under the target's runtime, resolved (the writer notes
  /// what it cannot express).
  Plan written;
  Plan plan;                     ///< as_emitted(t, recommended), resolved: what the output runs
  std::optional<Result> result;  ///< its simulation with detail, when the plan differs from the recommended
  std::string changes;           ///< "--runtime fsdp1 -> fsdp2, --prefetch 2 -> 1" ("" when none)
};
/// InputError naming --emit when the target cannot run the plan at all (resolve_plan's reason).
EmittedRun emitted_run(EmitTarget t, const Result& recommended, const ModelGraph& model,
                       const Cluster& cluster, const CostModel& costs);

}  // namespace shardplan

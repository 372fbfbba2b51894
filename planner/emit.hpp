// Framework configs for a plan: a PyTorch FSDP2 script, a DeepSpeed ds_config.json, a torchtitan config (the
// Python config registry of torchtitan 0.3.0, or the 2024-2025 TOML).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "simulator/cost/cost.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// The runtime whose semantics an output of `kind` has (fsdp2, torchtitan, torchtitan-toml: FSDP2; deepspeed:
/// DeepSpeed).
Runtime emit_target_runtime(const std::string& kind);
/// What the `kind` output cannot express or changes about plan `p` (printed on stderr and written into the
/// output as comments where the format has them).
std::vector<std::string> emit_notes(const std::string& kind, const Plan& p);
/// One FSDP unit of the simulated plan as the FSDP2 script carries it (SIM_UNITS) for comparison with the
/// units the script builds: the simulator's name, its blocks, its TP-local parameter elements
/// (SimUnit::elems) and how many of those are in tensors TP splits on dim 0, on dim 1, or replicates.
struct EmitUnit {
  std::string name;
  int blocks = 0;
  std::int64_t elems = 0, tp_dim0 = 0, tp_dim1 = 0, tp_replicated = 0;
};
/// The plan's units as simulator/units.cpp build_units partitions them (`p` resolved; `cluster` and `costs`
/// only feed the per-unit costs build_units also computes, which are not kept).
std::vector<EmitUnit> simulated_units(const Plan& p, const ModelGraph& model, const Cluster& cluster,
                                      const CostModel& costs);
/// `units`: simulated_units of the plan, written into the script as SIM_UNITS (None when empty).
std::string emit_fsdp2(const Plan& p, const ModelGraph& model, int gpus_per_node,
                       const std::vector<std::string>& extra_notes = {},
                       const std::vector<EmitUnit>& units = {});
std::string emit_deepspeed(const Plan& p, const ModelGraph& model);
/// torchtitan 0.3.0's format: a Python module whose shardplan_config() returns Trainer.Config. InputError
/// when torchtitan has no flavor of the model's dimensions.
std::string emit_torchtitan(const Plan& p, const ModelGraph& model, int gpus);
/// The 2024-2025 torchtitan TOML (JobConfig), `--emit torchtitan-toml:FILE`.
std::string emit_torchtitan_toml(const Plan& p, const ModelGraph& model, int gpus);

/// A model registry entry of torchtitan 0.3.0: torchtitan.models.<module>.model_registry(<flavor>).
struct TorchtitanFlavor {
  std::string module, flavor;
};
/// The torchtitan flavor whose dimensions are the model's (all of hidden, layers, heads, kv heads, vocab and
/// routed experts), or none.
std::optional<TorchtitanFlavor> torchtitan_flavor(const ModelSpec& m);
/// "fsdp2:FILE" etc.; returns {kind, file}; InputError for an unknown kind.
std::pair<std::string, std::string> parse_emit_spec(const std::string& spec);
/// `extra_notes` (e.g. the re-simulation line of another runtime's plan) go into the output as comments where
/// the format has them.
std::string emit(const std::string& kind, const Plan& p, const ModelGraph& model, int gpus, int gpus_per_node,
                 const std::vector<std::string>& extra_notes = {}, const std::vector<EmitUnit>& units = {});

}  // namespace shardplan

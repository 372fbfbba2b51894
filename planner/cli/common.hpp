// Shared CLI pieces: the MODEL / CLUSTER / PLAN-FLAGS options every simulation command takes, loading them,
// and turning a calibration profile into CostModel hooks.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "simulator/presets.hpp"
#include "simulator/simulate.hpp"

namespace shardplan::cli {

struct PlanFlags {
  std::string runtime = "fsdp2", ac = "none", precision = "bf16-mixed", reduce_dtype, offload = "none";
  int zero = 3, shard_group = 0, tp = 1, mbs = 1, grad_accum = 0, wrap = 1, prefetch = 1;
  std::int64_t seq = 0, global_batch = 0;
  std::string reshard_after_forward;  // "", "true", "false"
  bool async_tp = false, foreach_optimizer = false, compile = false, hold_logits = false;
  std::string loss_dtype = "fp32", fp8 = "none";
  bool fp8_all_gather = false;
};

struct Inputs {
  std::string model = "llama3-70b", cluster = "dgx-h100", calibration;
  std::optional<int> gpus;  ///< unset: one node
};

void add_input_options(CLI::App* app, Inputs& in, bool with_calibration);
void add_plan_options(CLI::App* app, PlanFlags& f);
/// Builds the Plan from flags (unresolved); InputError for bad enum values.
Plan plan_from_flags(const PlanFlags& f);

struct Loaded {
  std::unique_ptr<ModelGraph> model;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CostModel> costs;
  std::string calibration;
};
/// Loads model, cluster (gpus default: one node) and the cost model (with calibration hooks when given).
Loaded load_inputs(const Inputs& in);
CalibrationHooks load_calibration_hooks(const std::string& path);

/// Writes text to FILE atomically, or to stdout for "-". Empty path: nothing.
void write_output(const std::string& path, const std::string& text);

}  // namespace shardplan::cli

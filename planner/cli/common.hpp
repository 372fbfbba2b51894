// Shared CLI pieces: the MODEL / CLUSTER / PLAN-FLAGS options every simulation command takes, loading them,
// and turning a calibration profile into CostModel hooks.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/frameworks.hpp"
#include "planner/importers.hpp"
#include "simulator/model/model.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan::cli {

/// The plan flags given on a command line: knob key -> the text after its flag ("true" / "false" for
/// switches). Generated from the knob table (simulator/plan/knobs.hpp); knobs not given keep the Plan
/// defaults.
struct PlanFlags {
  std::map<std::string, std::string> given;
  std::int64_t global_batch = 0;    ///< --global-batch (derives grad_accum; not a plan knob)
  bool global_batch_given = false;  ///< --global-batch was on the command line (0 is then a bad value)
  std::string from;                 ///< --from FILE: the user's framework config (planner/importers.hpp)
  std::string framework;  ///< --framework torchtitan@DATE|torch@VERSION|... (planner/frameworks.hpp)
  /// The imported --from file, read once (its unmodelled keys are printed on stderr when it is read).
  mutable std::shared_ptr<const ImportedConfig> imported;
};

struct Inputs {
  std::string model, cluster = "dgx-h100", calibration;  ///< --model is required
  std::optional<int> gpus;                               ///< unset: one node
};

/// `model_required` false: --model may be left out (a command that simulates only with some other option).
void add_input_options(CLI::App* app, Inputs& in, bool with_calibration, bool model_required = true);
void add_plan_options(CLI::App* app, PlanFlags& f);
/// Builds the Plan from flags (unresolved): the --from file's knobs first, explicit flags over them, then the
/// version-dependent defaults of --framework (or of the version the --from file's layout dates it to) for
/// every knob neither set (one line on stderr names them); InputError naming the flag (or the file and key)
/// for a bad value. `arch` and `tied_embeddings` decide the defaults that depend on the GPU and the model.
Plan plan_from_flags(const PlanFlags& f, GpuArch arch = GpuArch::kOther, bool tied_embeddings = false);
/// The framework version a command uses: --framework, else the one the --from file's layout dates it to;
/// std::nullopt for none. `inferred` is set when it came from the file.
std::optional<FrameworkVersion> framework_of(const PlanFlags& f, bool& inferred);
/// `e` (a plan the model or cluster cannot take, blamed on a flag) blamed on the --from file's field instead
/// when that knob came from the file ("FILE: parallelism.expert_parallel_degree = 8: ..."); `e` otherwise.
InputError blame_from_file(const PlanFlags& f, const InputError& e);
/// The global batch for resolve_plan: --global-batch, else the --from file's (train_batch_size,
/// training.global_batch_size) unless --grad-accum is given; 0 when none.
std::int64_t global_batch_from_flags(const PlanFlags& f);
/// After resolve_plan: the --from file's stated global batch and accumulation must agree with the resolved
/// plan (DeepSpeed asserts train_batch_size = micro batch x accumulation x data-parallel ranks); InputError
/// otherwise.
void check_from_consistency(const PlanFlags& f, const Plan& resolved);
/// A --from torchtitan config names its model (model_registry flavor): one line on stderr when --model is not
/// that flavor's architecture (the flags' model is the one simulated).
void check_from_model(const PlanFlags& f, const ModelGraph& model);
/// The --from file (nullptr without --from); reads it on first use and prints its unmodelled keys on stderr.
const ImportedConfig* imported_config(const PlanFlags& f);

struct Loaded {
  std::unique_ptr<ModelGraph> model;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CostModel> costs;
  std::string calibration;
};
/// Loads model, cluster (gpus default: one node) and the cost model (with calibration hooks when given).
Loaded load_inputs(const Inputs& in);
/// The plan the flags state, resolved on the loaded model and cluster: plan_from_flags, resolve_plan (a bad
/// knob blamed on the --from file's field when it came from there), and the --from file's consistency checks.
Plan resolve_flags_plan(const PlanFlags& f, const Loaded& l);
CalibrationHooks load_calibration_hooks(const std::string& path);

/// Writes text to FILE atomically, or to stdout for "-". Empty path: nothing.
void write_output(const std::string& path, const std::string& text);

}  // namespace shardplan::cli

// Shared CLI option sets and input loading.
#include "planner/cli/common.hpp"

#include <iostream>
#include <set>

#include "calibration/profile.hpp"
#include "core/atomic_file.hpp"
#include "planner/emit.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::cli {

void add_input_options(CLI::App* app, Inputs& in, bool with_calibration, bool model_required) {
  auto* model = app->add_option("--model", in.model,
                                "model preset name, model spec JSON, graph JSON or Hugging Face config.json");
  if (model_required) model->required();
  app->add_option("--cluster", in.cluster, "cluster preset name or cluster JSON")->capture_default_str();
  app->add_option("--gpus", in.gpus, "total GPUs (default: one node)");
  if (with_calibration)
    app->add_option("--calibration", in.calibration, "calibration profile (shardplan.calibration/1)");
}

void add_plan_options(CLI::App* app, PlanFlags& f) {
  for (const Knob& k : plan_knobs()) {
    const std::string key = k.key;
    if (k.kind == KnobKind::kSwitch) {
      const std::string sets = k.switch_sets;
      app->add_flag_callback(
          k.flag, [&f, key, sets]() { f.given[key] = sets; }, k.help);
      continue;
    }
    std::string help = k.help;
    if (!k.values.empty()) {
      help += ": ";
      for (std::size_t i = 0; i < k.values.size(); ++i) help += (i ? " | " : "") + k.values[i];
    }
    help += std::string(" (default: ") + k.default_text + ")";
    app->add_option_function<std::string>(
           k.flag, [&f, key](const std::string& v) { f.given[key] = v; }, help)
        ->type_name(k.kind == KnobKind::kInt      ? "INT"
                    : k.kind == KnobKind::kDouble ? "NUMBER"
                                                  : "TEXT");
  }
  app->add_option_function<std::int64_t>(
         "--global-batch",
         [&f](std::int64_t v) {
           f.global_batch = v;
           f.global_batch_given = true;
         },
         "sequences per optimizer step (sets --grad-accum)")
      ->type_name("INT");
  app->add_option("--framework", f.framework,
                  "the framework version whose defaults the plan takes for the knobs you do not set: "
                  "torchtitan@YYYY-MM-DD, torchtitan@0.1.0..0.3.0, torch@VERSION, deepspeed@VERSION "
                  "(`shardplan list frameworks`; a --from file's layout implies its torchtitan version)");
  app->add_option(
      "--from", f.from,
      "the plan of your own config: a DeepSpeed ds_config .json, a torchtitan 0.3.0 .py[:FUNCTION] or "
      "2024-2025 .toml, an accelerate FSDP .yaml, or a PEFT LoRA adapter_config.json or its folder "
      "(docs/formats.md); explicit flags override it");
}

const ImportedConfig* imported_config(const PlanFlags& f) {
  if (f.from.empty()) return nullptr;
  if (!f.imported) {
    f.imported = std::make_shared<const ImportedConfig>(import_config(f.from));
    auto line = [&](const char* what, const std::vector<std::string>& items) {
      if (items.empty()) return;
      std::string s = "shardplan: --from " + f.from + ": " + what + ":";
      for (std::size_t i = 0; i < items.size(); ++i) s += (i ? "; " : " ") + items[i];
      std::cerr << s << "\n";
    };
    line("not modelled (changes memory or time)", f.imported->unmodelled);
    line("not read (keys the reader does not know; they may change memory or time)", f.imported->unread);
    line("assumed", f.imported->assumed);
  }
  return f.imported.get();
}

std::int64_t global_batch_from_flags(const PlanFlags& f) {
  if (f.global_batch > 0) return f.global_batch;
  const ImportedConfig* c = imported_config(f);
  if (!c || f.given.count("grad_accum")) return 0;
  return c->global_batch;
}

void check_from_consistency(const PlanFlags& f, const Plan& p) {
  const ImportedConfig* c = imported_config(f);
  if (!c || f.global_batch > 0 || f.given.count("grad_accum") || f.given.count("mbs")) return;
  if (c->global_batch > 0 && c->knobs.count("grad_accum") &&
      std::to_string(p.grad_accum) != c->knobs.at("grad_accum"))
    throw InputError(f.from, c->global_batch_key,
                     std::to_string(c->global_batch) + " is not micro batch " + std::to_string(p.mbs) +
                         " x gradient_accumulation_steps " + c->knobs.at("grad_accum") + " x " +
                         std::to_string(p.dp) + " data-parallel ranks (--gpus / tp)");
}

void check_from_model(const PlanFlags& f, const ModelGraph& model) {
  const ImportedConfig* c = imported_config(f);
  if (!c || c->model.empty()) return;
  const auto flavor = torchtitan_flavor(model.spec());
  if (flavor && flavor->module + " " + flavor->flavor == c->model) return;
  std::cerr << "shardplan: --from " << f.from << ": the file's model is torchtitan " << c->model
            << "; simulating --model " << model.spec().name
            << (flavor ? " (torchtitan " + flavor->module + " " + flavor->flavor + ")"
                       : " (no torchtitan flavor)")
            << "\n";
}

std::optional<FrameworkVersion> framework_of(const PlanFlags& f, bool& inferred) {
  inferred = false;
  if (!f.framework.empty()) return parse_framework(f.framework, "--framework");
  const ImportedConfig* c = imported_config(f);
  if (!c || c->framework.empty()) return std::nullopt;
  inferred = true;
  return parse_framework(c->framework, "--from " + f.from);
}

Plan plan_from_flags(const PlanFlags& f, GpuArch arch, bool tied_embeddings) {
  Plan p;
  const ImportedConfig* c = imported_config(f);
  if (c)
    for (const auto& [key, value] : c->knobs)
      if (!f.given.count(key)) {
        const Knob* k = find_knob(key);
        if (const std::string why = k->set(p, value); !why.empty()) throw InputError(f.from, key, why);
      }
  for (const Knob& k : plan_knobs())
    if (auto it = f.given.find(k.key); it != f.given.end()) set_knob(k, p, it->second, k.flag);
  // The framework version's defaults for every knob neither the flags nor the file set.
  bool inferred = false;
  if (const auto fw = framework_of(f, inferred)) {
    std::set<std::string> explicit_keys;
    for (const auto& [k, v] : f.given) explicit_keys.insert(k);
    if (c)
      for (const auto& [k, v] : c->knobs) explicit_keys.insert(k);
    const auto applied = framework_defaults(*fw, p, arch, tied_embeddings, !inferred, explicit_keys);
    std::string line = "shardplan: " + fw->spec() +
                       (inferred ? " (" + c->framework_reason + "; --framework to choose another)" : "");
    if (applied.empty()) line += ": its defaults are the plan's";
    for (std::size_t i = 0; i < applied.size(); ++i) {
      const Knob* k = find_knob(applied[i].knob);
      if (const std::string why = k->set(p, applied[i].value); !why.empty())
        throw InputError::flag("--framework", applied[i].knob + ": " + why);
      line += (i ? ", " : ": ") + applied[i].knob + "=" + applied[i].value;
    }
    if (fw->framework == "deepspeed") line += " (no DeepSpeed version-dependent default is modelled yet)";
    std::cerr << line << "\n";
  }
  if (f.global_batch < 0 || (f.global_batch_given && f.global_batch < 1))
    throw InputError::flag("--global-batch", "must be >= 1, got " + std::to_string(f.global_batch));
  if (f.global_batch > 0 && f.given.count("grad_accum"))
    throw InputError::flag("--global-batch", "give --global-batch or --grad-accum, not both");
  return p;
}

InputError blame_from_file(const PlanFlags& f, const InputError& e) {
  const ImportedConfig* c = imported_config(f);
  if (!c || !e.file().empty()) return e;
  for (const Knob& k : plan_knobs()) {
    if (e.where() != k.flag || f.given.count(k.key)) continue;
    const auto it = c->source.find(k.key);
    if (it == c->source.end()) break;
    std::string msg = e.what();
    if (msg.rfind(e.where() + ": ", 0) == 0) msg = msg.substr(e.where().size() + 2);
    return InputError(f.from, it->second, msg);
  }
  return e;
}

CalibrationHooks load_calibration_hooks(const std::string& path) {
  auto prof = std::make_shared<CalibrationProfile>(CalibrationProfile::load(path));
  CalibrationHooks h;
  h.source = path;
  // The placement of the queried group (hosts and NVLink domains) picks the measured series; the analytic
  // model gives the shape used to scale it to other sizes and rank counts.
  h.collective_s = [prof](CollectiveKind k, double bytes,
                          const GroupView& g) -> std::optional<CollectiveCost> {
    const CollectivePlacement where{g.ranks, g.hosts, g.nodes, g.ranks_per_node,
                                    std::max(1, g.domain_gpus / std::max(1, g.host_gpus))};
    auto shape = [k, g](int ranks, double b) { return collective_cost(k, b, with_ranks(g, ranks)).time_s; };
    auto e = prof->collective_time(k, static_cast<std::int64_t>(bytes), where, shape);
    if (!e) return std::nullopt;
    CollectiveCost c;
    c.time_s = e->time_s;
    c.algorithm = "calibrated";
    c.protocol = "measured";
    c.source = to_string(e->source);
    c.why = e->detail;
    return c;
  };
  h.gemm_efficiency = [prof](double m, double n, double k) -> std::optional<double> {
    return prof->gemm_efficiency(static_cast<std::int64_t>(m), static_cast<std::int64_t>(n),
                                 static_cast<std::int64_t>(k));
  };
  h.hbm_Bps = prof->hbm_Bps();
  h.optimizer_Bps = prof->adamw_Bps("bf16-mixed");
  return h;
}

Loaded load_inputs(const Inputs& in) {
  Loaded l;
  l.model = std::make_unique<ModelGraph>(load_model(in.model));
  ClusterSpec spec = load_cluster_spec(in.cluster);
  if (in.gpus && *in.gpus < 1)
    throw InputError::flag("--gpus", "must be >= 1, got " + std::to_string(*in.gpus));
  const int gpus = in.gpus.value_or(spec.node.gpus);
  l.cluster = std::make_unique<Cluster>(std::move(spec), gpus);
  CalibrationHooks hooks;
  if (!in.calibration.empty()) hooks = load_calibration_hooks(in.calibration);
  l.calibration = in.calibration;
  l.costs = std::make_unique<CostModel>(*l.cluster, std::nullopt, std::move(hooks));
  return l;
}

Plan resolve_flags_plan(const PlanFlags& f, const Loaded& l) {
  Plan p;
  try {
    p = resolve_plan(plan_from_flags(f, l.cluster->spec().gpu.arch, l.model->spec().tied_embeddings),
                     *l.model, *l.cluster, global_batch_from_flags(f));
  } catch (const InputError& e) {
    throw blame_from_file(f, e);
  }
  check_from_consistency(f, p);
  check_from_model(f, *l.model);
  // LoRA transforms the model the plan runs on (frozen base, adapters: simulator/model/lora.hpp); a target
  // module the model does not have is the --from file's error when the file named it.
  try {
    if (p.lora_rank > 0) *l.model = lora_model(*l.model, p);
  } catch (const InputError& e) {
    throw blame_from_file(f, e);
  }
  return p;
}

void write_output(const std::string& path, const std::string& text) {
  if (!path.empty()) write_file_atomic(path, text);
}

}  // namespace shardplan::cli

// list, show, collective, memory and simulate subcommands.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "calibration/nccl_tests_import.hpp"
#include "calibration/profile.hpp"
#include "core/error.hpp"
#include "planner/cli/commands.hpp"
#include "planner/cli/common.hpp"
#include "planner/frameworks.hpp"
#include "planner/knob_table.hpp"
#include "planner/report/html.hpp"
#include "planner/report/report.hpp"
#include "simulator/collectives/collectives.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::cli {

Command add_list_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "list", "list model or cluster presets, the frameworks' version defaults or the plan knobs");
  auto what = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  sub->add_option("what", *what, "models | clusters | frameworks | knobs")->required();
  // --json alone prints to stdout (as `list frameworks --json` always has); --json FILE writes FILE.
  CLI::Option* json_opt =
      sub->add_option(
             "--json", *json,
             "frameworks, knobs: the table as JSON (shardplan.frameworks/1, tools/framework_defaults.json; "
             "shardplan.knobs/1, tools/common/knobs.json) to FILE, or - or nothing for stdout")
          ->expected(0, 1);
  return {sub, [what, json, json_opt]() {
            const std::string out = json_opt->count() == 0 ? "" : json->empty() ? "-" : *json;
            if (*what != "models" && *what != "clusters" && *what != "frameworks" && *what != "knobs")
              throw InputError::flag(
                  "list",
                  "expected \"models\", \"clusters\", \"frameworks\" or \"knobs\", got \"" + *what + "\"");
            if (!out.empty() && *what != "frameworks" && *what != "knobs")
              throw InputError::flag("--json",
                                     "list " + *what + " has no JSON form (frameworks and knobs have)");
            if (*what == "knobs") {
              if (out.empty())
                std::cout << knob_table_text();
              else
                write_output(out, knob_table_json().dump(1) + "\n");
              return 0;
            }
            if (*what == "frameworks") {
              if (!out.empty()) {
                write_output(out, version_rules_json().dump(1) + "\n");
                return 0;
              }
              std::cout
                  << "Version-dependent defaults (--framework FRAMEWORK@VERSION; --from infers torchtitan's "
                     "from a config's layout):\n";
              for (const VersionRule& r : version_rules())
                std::cout << fmt::format("  {:<10} {:<18} {:<16} {:>10} .. {:<10} {:<16}{} {}\n", r.framework,
                                         r.knob, r.value, *r.from ? r.from : "", *r.to ? r.to : "",
                                         r.condition, r.launcher ? " (launcher)" : "", r.source);
              std::cout << "torchtitan releases:";
              for (const auto& [rel, date] : torchtitan_releases())
                std::cout << " " << rel << " (" << date << ")";
              std::cout << "\n";
              return 0;
            }
            if (*what == "models") {
              for (const auto& n : model_preset_names()) {
                ModelGraph m = load_model(n);
                std::cout << fmt::format("{:<16} {:>18L} parameters  {}\n", n, m.parameters(),
                                         m.spec().description);
              }
            } else {
              for (const auto& n : cluster_preset_names()) {
                ClusterSpec c = load_cluster_spec(n);
                std::cout << fmt::format("{:<14} {}\n", n, c.description);
              }
            }
            return 0;
          }};
}

Command add_show_command(CLI::App& app) {
  auto* sub = app.add_subcommand("show", "print a preset as JSON that --model/--cluster accept back");
  auto what = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto graph = std::make_shared<bool>(false);
  sub->add_option("what", *what, "model | cluster")->required();
  sub->add_option("name", *name, "preset name or file")->required();
  sub->add_flag("--graph", *graph, "for a model: print the full layer graph (shardplan.graph/1)");
  // The LoRA knobs (the knob table's flags): --graph prints the model as the plan trains it, frozen base,
  // adapters and the activations a frozen base no longer saves (docs/model.md "LoRA and QLoRA").
  auto lora = std::make_shared<std::map<std::string, std::string>>();
  for (const char* key : {"lora_rank", "lora_targets", "lora_base"}) {
    const Knob* k = find_knob(key);
    sub->add_option_function<std::string>(
        k->flag, [lora, key](const std::string& v) { (*lora)[key] = v; },
        "with --graph: " + std::string(k->help));
  }
  return {sub, [what, name, graph, lora]() {
            if (*what == "model") {
              ModelGraph m = load_model(*name);
              if (!lora->empty()) {
                if (!*graph) throw InputError::flag("--lora-rank", "the LoRA knobs of show need --graph");
                Plan p;
                for (const auto& [key, text] : *lora)
                  set_knob(*find_knob(key), p, text, find_knob(key)->flag);
                m = lora_model(m, p);
              }
              std::cout << (*graph ? m.to_graph_json() : model_spec_to_json(m.spec())).dump(1) << "\n";
            } else if (*what == "cluster") {
              std::cout << cluster_spec_to_json(load_cluster_spec(*name)).dump(1) << "\n";
            } else {
              throw InputError::flag("show", "expected \"model\" or \"cluster\", got \"" + *what + "\"");
            }
            return 0;
          }};
}

namespace {
/// The model's time for one row of an nccl-tests log. The analytic time is the GPU's; nccl-tests' period also
/// cannot be shorter than the host's issue time when one thread drives several GPUs (-g), which a measured
/// curve already holds. The launch cost is the simulator's kernel_launch_s (5 us, docs/mechanics.md section
/// 5), not a fit: the -g 8 development logs' floor below 64 KiB is 35 us, 4.4 us per GPU. Sets
/// `launch_bound` when the host's issue time won.
CollectiveCost nccl_tests_row(const CostModel& cm, CollectiveKind kind, double bytes, const GroupView& g,
                              int gpus_per_thread, bool& launch_bound) {
  CollectiveCost c = cm.collective(kind, bytes, g);
  const double gpu_s = c.time_s;
  if (c.source == "analytic")
    c.time_s = nccl_tests_iteration_s(gpu_s, gpus_per_thread, ComputeConstants{}.kernel_launch_s);
  launch_bound = c.time_s > gpu_s;
  return c;
}
}  // namespace

namespace {
struct CollectiveArgs {
  std::string kind = "all_gather", cluster = "dgx-h100", calibration, json, algo, compare;
  double bytes = 0;
  int ranks = 8, stride = 1, gpus_per_node = 0, log_ranks = 0;
};

/// With --compare: the log's first table, whose kind and ranks replace --kind and --ranks.
std::optional<calibration::NcclTestsRun> load_compare_log(CollectiveArgs& a) {
  if (a.compare.empty()) return std::nullopt;
  calibration::NcclTestsOverrides ov;
  if (a.gpus_per_node > 0) ov.gpus_per_node = a.gpus_per_node;
  if (a.log_ranks > 0) ov.ranks = a.log_ranks;
  auto imp = calibration::parse_nccl_tests_file(a.compare, ov);
  if (imp.runs.empty()) throw InputError(a.compare, "", "no nccl-tests table");
  calibration::NcclTestsRun log = imp.runs.front();
  a.kind = std::string(collective_name(log.kind));
  a.ranks = log.ranks;
  a.bytes = 1;
  return log;
}

CollectiveKind checked_collective_args(const CollectiveArgs& a) {
  auto kind = parse_collective(a.kind);
  if (!kind || (*kind != CollectiveKind::kAllGather && *kind != CollectiveKind::kReduceScatter &&
                *kind != CollectiveKind::kAllReduce))
    throw InputError::flag("--kind", "unknown collective \"" + a.kind +
                                         "\"; expected one of: all_gather, reduce_scatter, all_reduce");
  if (!(a.bytes > 0) || a.bytes > 1e15) throw InputError::flag("--bytes", "must be in (0, 1e15]");
  if (a.ranks < 1 || a.ranks > (1 << 22)) throw InputError::flag("--ranks", "must be in [1, 4194304]");
  if (a.stride < 1) throw InputError::flag("--stride", "must be >= 1");
  return *kind;
}

/// The cluster the group lives in: whole NVLink domains covering ranks x stride GPUs.
Cluster collective_cluster(const CollectiveArgs& a) {
  ClusterSpec spec = load_cluster_spec(a.cluster);
  const int domain = spec.node.nvlink_domain_gpus;
  const std::int64_t span = static_cast<std::int64_t>(a.ranks) * a.stride;
  const int gpus = static_cast<int>(span <= domain ? domain : (span + domain - 1) / domain * domain);
  return Cluster(std::move(spec), gpus);
}

/// Every size >= 1 MiB of the log's first table (out-of-place column) against the model; errors are model /
/// measured - 1.
int run_collective_compare(const CollectiveArgs& a, const calibration::NcclTestsRun& log, const CostModel& cm,
                           CollectiveKind kind, const GroupView& g, const std::string& cluster) {
  std::vector<double> errs;
  Json rows = Json::array();
  CollectiveCost last;
  for (const auto& r : log.rows) {
    if (r.bytes < kMiB) continue;
    const double measured_s = r.oop_time_us * 1e-6;
    bool host = false;
    CollectiveCost c = nccl_tests_row(cm, kind, static_cast<double>(r.bytes), g, log.gpus_per_thread, host);
    const double e = c.time_s / measured_s - 1.0;
    errs.push_back(std::fabs(e));
    rows.push_back({{"bytes", r.bytes},
                    {"measured_s", measured_s},
                    {"time_s", c.time_s},
                    {"error", e},
                    {"algorithm", c.algorithm},
                    {"protocol", c.protocol},
                    {"source", c.source},
                    {"launch_bound", host}});
    if (a.json != "-")
      std::cout << fmt::format(
          "{:>14} B  measured {:>10.1f} us  model {:>10.1f} us  {:+6.1f} %  {} {} ({}{})\n", r.bytes,
          measured_s * 1e6, c.time_s * 1e6, e * 100, c.algorithm, c.protocol, c.source,
          host ? ", host-bound" : "");
    last = c;
  }
  if (errs.empty()) throw InputError(a.compare, "", "no size >= 1 MiB in the first table");
  std::vector<double> sorted = errs;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t m = sorted.size();
  const double median = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  Json j = {{"schema", "shardplan.collective-compare/1"},
            {"log", a.compare},
            {"kind", a.kind},
            {"ranks", a.ranks},
            {"nodes", g.nodes},
            {"hosts", g.hosts},
            {"cluster", cluster},
            {"median_abs_error", median},
            {"max_abs_error", sorted.back()},
            {"rows", rows}};
  if (a.json != "-")
    std::cout << fmt::format(
        "median |error| {:.1f} %, worst {:.1f} % over {} sizes >= 1 MiB; largest size: {}\n", median * 100,
        sorted.back() * 100, m, last.why);
  write_output(a.json, j.dump(1) + "\n");
  return 0;
}

/// One collective's predicted time; `uncal` says why the calibration profile did not answer (empty when none
/// was given or it answered).
int print_collective(const CollectiveArgs& a, const CollectiveCost& c, const GroupView& g,
                     const std::string& cluster, const std::string& uncal) {
  const double algbw = c.time_s > 0 ? a.bytes / c.time_s : 0;
  const double busbw = algbw * busbw_factor(*parse_collective(a.kind), a.ranks);
  Json j = {{"schema", "shardplan.collective/1"},
            {"kind", a.kind},
            {"bytes", a.bytes},
            {"ranks", a.ranks},
            {"nodes", g.nodes},
            {"hosts", g.hosts},
            {"ranks_per_node", g.ranks_per_node},
            {"cluster", cluster},
            {"time_s", c.time_s},
            {"algbw_Bps", algbw},
            {"busbw_Bps", busbw},
            {"algorithm", c.algorithm},
            {"protocol", c.protocol},
            {"channels", c.channels},
            {"source", c.source},
            {"why", c.why}};
  if (!uncal.empty()) j["calibration_not_used"] = uncal;
  if (a.json != "-") {
    std::cout << fmt::format(
        "{} of {} over {} ranks ({} NVLink domain{}, {} host{}) on {}: {:.2f} us, algbw {:.2f} "
        "GB/s, busbw {:.2f} GB/s\n",
        a.kind, format_bytes(a.bytes), a.ranks, g.nodes, g.nodes > 1 ? "s" : "", g.hosts,
        g.hosts > 1 ? "s" : "", cluster, c.time_s * 1e6, algbw / kGB, busbw / kGB);
    if (c.source == "analytic")
      std::cout << fmt::format(
          "  source: analytic model; algorithm {} / protocol {} / {} channels\n  why: {}\n", c.algorithm,
          c.protocol, c.channels, c.why);
    else
      std::cout << fmt::format("  source: {} ({})\n", c.source, c.why);
    if (!uncal.empty()) std::cout << "  calibration not used: " << uncal << "\n";
  }
  write_output(a.json, j.dump(1) + "\n");
  return 0;
}

int run_collective(CollectiveArgs& a) {
  const std::optional<calibration::NcclTestsRun> log = load_compare_log(a);
  const CollectiveKind kind = checked_collective_args(a);
  CollectiveConstants constants;
  if (!a.algo.empty()) constants.algorithms = CollectiveAlgorithms::parse(a.algo);
  Cluster cl = collective_cluster(a);
  CalibrationHooks hooks;
  std::shared_ptr<CalibrationProfile> prof;
  if (!a.calibration.empty()) {
    hooks = load_calibration_hooks(a.calibration);
    prof = std::make_shared<CalibrationProfile>(CalibrationProfile::load(a.calibration));
  }
  CostModel cm(cl, std::nullopt, std::move(hooks), constants);
  GroupView g = cl.group(a.ranks, a.stride);
  if (log) return run_collective_compare(a, *log, cm, kind, g, cl.spec().name);
  CollectiveCost c = cm.collective(kind, a.bytes, g);
  // Why the profile did not answer (it always says when it cannot).
  std::string uncal;
  if (prof && c.source == "analytic") {
    const CollectivePlacement where{g.ranks, g.hosts, g.nodes, g.ranks_per_node,
                                    std::max(1, g.domain_gpus / std::max(1, g.host_gpus))};
    auto shape = [&](int r, double b) {
      return collective_cost(kind, b, with_ranks(g, r), constants).time_s;
    };
    (void)prof->collective_time(kind, static_cast<std::int64_t>(a.bytes), where, shape, &uncal);
  }
  return print_collective(a, c, g, cl.spec().name, uncal);
}
}  // namespace

Command add_collective_command(CLI::App& app) {
  auto* sub = app.add_subcommand("collective", "predicted time and bandwidth of one collective");
  auto a = std::make_shared<CollectiveArgs>();
  sub->add_option("--kind", a->kind, "all_gather | reduce_scatter | all_reduce")->capture_default_str();
  sub->add_option("--bytes", a->bytes, "whole buffer in bytes (nccl-tests' size column)");
  sub->add_option("--ranks", a->ranks, "ranks in the group")->capture_default_str();
  sub->add_option("--stride", a->stride,
                  "rank distance between group members (e.g. the TP degree; 8 on a DGX = one GPU per node)");
  sub->add_option("--cluster", a->cluster, "cluster preset or JSON")->capture_default_str();
  sub->add_option("--calibration", a->calibration, "calibration profile");
  sub->add_option("--algo", a->algo,
                  "algorithms NCCL may use, NCCL_ALGO spelling (ring, tree, nvls, nvlstree, collnetchain, "
                  "pat; ^x = all but x)");
  sub->add_option("--compare", a->compare,
                  "nccl-tests log: predict every size >= 1 MiB of its first table (kind and ranks from the "
                  "log) and report the errors");
  sub->add_option("--gpus-per-node", a->gpus_per_node,
                  "with --compare: GPUs per host of the log when it names too few hosts");
  sub->add_option("--log-ranks", a->log_ranks, "with --compare: ranks of the log when it does not list them");
  sub->add_option("--json", a->json, "write the JSON result to FILE or - for stdout");
  return {sub, [a]() { return run_collective(*a); }};
}

namespace {
struct SimArgs {
  Inputs in;
  PlanFlags flags;
  std::string json, trace, html;
};

int run_simulation(const SimArgs& a, bool with_time) {
  Loaded l = load_inputs(a.in);
  const Plan p = resolve_flags_plan(a.flags, l);
  Simulator sim(*l.model, *l.cluster, *l.costs);
  const bool detail = !a.trace.empty() || !a.html.empty();
  const Result& r = sim.run(p, detail);
  ReportInputs ri{l.model.get(), l.cluster.get(), l.calibration};
  // Build every output first, then write them: no partial set of files on error.
  std::string json = a.json.empty() ? "" : report_json(r, ri).dump(1) + "\n";
  std::string trace = a.trace.empty() ? "" : trace_json(r);
  std::string html = a.html.empty() ? "" : html_simulate_report(r, ri);
  if (a.json != "-") std::cout << report_text(r, ri, with_time);
  write_output(a.json, json);
  write_output(a.trace, trace);
  write_output(a.html, html);
  return r.fits ? 0 : 1;
}
}  // namespace

Command add_memory_command(CLI::App& app) {
  auto* sub = app.add_subcommand("memory", "per-GPU memory of a plan");
  auto a = std::make_shared<SimArgs>();
  add_input_options(sub, a->in, false);
  add_plan_options(sub, a->flags);
  sub->add_option("--json", a->json, "write the JSON report to FILE or - for stdout");
  return {sub, [a]() { return run_simulation(*a, false); }};
}

Command add_simulate_command(CLI::App& app) {
  auto* sub = app.add_subcommand("simulate", "simulate one training step of a plan");
  auto a = std::make_shared<SimArgs>();
  add_input_options(sub, a->in, true);
  add_plan_options(sub, a->flags);
  sub->add_option("--json", a->json, "write the JSON report to FILE or - for stdout");
  sub->add_option("--trace", a->trace, "write a Chrome/Perfetto trace to FILE");
  sub->add_option("--html", a->html,
                  "write a self-contained HTML report (memory and timeline charts) to FILE");
  return {sub, [a]() { return run_simulation(*a, true); }};
}

}  // namespace shardplan::cli

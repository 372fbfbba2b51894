// list, show, collective, memory and simulate subcommands.
#include <fmt/format.h>

#include <iostream>

#include "planner/cli/commands.hpp"
#include "planner/cli/common.hpp"
#include "planner/report/html.hpp"
#include "planner/report/report.hpp"
#include "core/error.hpp"

namespace shardplan::cli {

Command add_list_command(CLI::App& app) {
  auto* sub = app.add_subcommand("list", "list model or cluster presets");
  auto what = std::make_shared<std::string>();
  sub->add_option("what", *what, "models | clusters")->required();
  return {sub, [what]() {
            std::vector<std::string> names;
            if (*what == "models") {
              for (const auto& n : model_preset_names()) {
                ModelGraph m = load_model(n);
                std::cout << fmt::format("{:<16} {:>18L} parameters  {}\n", n, m.parameters(), m.spec().description);
              }
            } else if (*what == "clusters") {
              for (const auto& n : cluster_preset_names()) {
                ClusterSpec c = load_cluster_spec(n);
                std::cout << fmt::format("{:<14} {}\n", n, c.description);
              }
            } else {
              throw InputError::flag("list", "expected \"models\" or \"clusters\", got \"" + *what + "\"");
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
  return {sub, [what, name, graph]() {
            if (*what == "model") {
              ModelGraph m = load_model(*name);
              std::cout << (*graph ? m.to_graph_json() : model_spec_to_json(m.spec())).dump(1) << "\n";
            } else if (*what == "cluster") {
              std::cout << cluster_spec_to_json(load_cluster_spec(*name)).dump(1) << "\n";
            } else {
              throw InputError::flag("show", "expected \"model\" or \"cluster\", got \"" + *what + "\"");
            }
            return 0;
          }};
}

Command add_collective_command(CLI::App& app) {
  auto* sub = app.add_subcommand("collective", "predicted time and bandwidth of one collective");
  struct Args {
    std::string kind = "all_gather", cluster = "dgx-h100", calibration, json;
    double bytes = 0;
    int ranks = 8, stride = 1;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--kind", a->kind, "all_gather | reduce_scatter | all_reduce")->capture_default_str();
  sub->add_option("--bytes", a->bytes, "whole buffer in bytes (nccl-tests' size column)")->required();
  sub->add_option("--ranks", a->ranks, "ranks in the group")->capture_default_str();
  sub->add_option("--stride", a->stride, "rank distance between group members (e.g. the TP degree)");
  sub->add_option("--cluster", a->cluster, "cluster preset or JSON")->capture_default_str();
  sub->add_option("--calibration", a->calibration, "calibration profile");
  sub->add_option("--json", a->json, "write the JSON result to FILE or - for stdout");
  return {sub, [a]() {
            auto kind = parse_collective(a->kind);
            if (!kind || (*kind != CollectiveKind::kAllGather && *kind != CollectiveKind::kReduceScatter &&
                          *kind != CollectiveKind::kAllReduce))
              throw InputError::flag("--kind", "unknown collective \"" + a->kind +
                                                   "\"; expected one of: all_gather, reduce_scatter, all_reduce");
            if (!(a->bytes > 0) || a->bytes > 1e15) throw InputError::flag("--bytes", "must be in (0, 1e15]");
            if (a->ranks < 1 || a->ranks > (1 << 22)) throw InputError::flag("--ranks", "must be in [1, 4194304]");
            if (a->stride < 1) throw InputError::flag("--stride", "must be >= 1");
            ClusterSpec spec = load_cluster_spec(a->cluster);
            const int domain = spec.node.nvlink_domain_gpus;
            const std::int64_t span = static_cast<std::int64_t>(a->ranks) * a->stride;
            int gpus = static_cast<int>(span <= domain ? domain : (span + domain - 1) / domain * domain);
            Cluster cl(std::move(spec), gpus);
            CalibrationHooks hooks;
            if (!a->calibration.empty()) hooks = load_calibration_hooks(a->calibration);
            CostModel cm(cl, std::nullopt, std::move(hooks));
            GroupView g = cl.group(a->ranks, a->stride);
            CollectiveCost c = cm.collective(*kind, a->bytes, g);
            const double algbw = c.time_s > 0 ? a->bytes / c.time_s : 0;
            const double busbw = algbw * busbw_factor(*kind, a->ranks);
            Json j = {{"schema", "shardplan.collective/1"},
                      {"kind", a->kind},
                      {"bytes", a->bytes},
                      {"ranks", a->ranks},
                      {"nodes", g.nodes},
                      {"cluster", cl.spec().name},
                      {"time_s", c.time_s},
                      {"algbw_Bps", algbw},
                      {"busbw_Bps", busbw},
                      {"algorithm", c.algorithm},
                      {"protocol", c.protocol}};
            if (a->json != "-")
              std::cout << fmt::format("{} of {} over {} ranks ({} node{}) on {}: {:.2f} us, algbw {:.2f} GB/s, busbw {:.2f} GB/s [{} {}]\n",
                                       a->kind, format_bytes(a->bytes), a->ranks, g.nodes, g.nodes > 1 ? "s" : "",
                                       cl.spec().name, c.time_s * 1e6, algbw / kGB, busbw / kGB, c.algorithm, c.protocol);
            write_output(a->json, j.dump(1) + "\n");
            return 0;
          }};
}

namespace {
struct SimArgs {
  Inputs in;
  PlanFlags flags;
  std::string json, trace, html;
};

int run_simulation(const SimArgs& a, bool with_time) {
  Loaded l = load_inputs(a.in);
  Plan p = resolve_plan(plan_from_flags(a.flags), *l.model, *l.cluster, a.flags.global_batch);
  Simulator sim(*l.model, *l.cluster, *l.costs);
  const bool detail = !a.trace.empty() || !a.html.empty();
  const Result& r = sim.run(p, detail);
  ReportInputs ri{l.model.get(), l.cluster.get(), l.calibration};
  // Build every output first, then write them: no partial set of files on error.
  std::string json = a.json.empty() ? "" : report_json(r, ri).dump(1) + "\n";
  std::string trace = a.trace.empty() ? "" : trace_json(sim, r);
  std::string html = a.html.empty() ? "" : html_simulate_report(sim, r, ri);
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
  sub->add_option("--html", a->html, "write a self-contained HTML report (memory and timeline charts) to FILE");
  return {sub, [a]() { return run_simulation(*a, true); }};
}

}  // namespace shardplan::cli

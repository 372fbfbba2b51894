// `shardplan compare PLAN-A PLAN-B ...`: several plans of one model on one cluster, simulated and set side by
// side (text, JSON, HTML). A PLAN is a string of plan flags ("--tp 2 --ac full"), a framework config `--from`
// reads, or a report JSON of `simulate`/`memory`/`plan` (its plan, or its recommendation).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "planner/cli/commands.hpp"
#include "planner/cli/common.hpp"
#include "planner/report/evidence.hpp"
#include "planner/report/html.hpp"
#include "planner/report/margin.hpp"
#include "planner/report/report.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::cli {

namespace {

struct CompareArgs {
  Inputs in;
  std::vector<std::string> plans;
  std::int64_t global_batch = 0;
  std::string seq;
  std::string json, html;
};

// One PLAN argument as plan flags: a file (report JSON or framework config), or a string of flags.
PlanFlags plan_argument(const std::string& arg, std::size_t index) {
  PlanFlags f;
  const std::string where = fmt::format("compare: plan {} (\"{}\")", index + 1, arg);
  const auto py = arg.find(".py:");
  const std::string path = py == std::string::npos ? arg : arg.substr(0, py + 3);
  std::error_code ec;
  if (arg.find(' ') == std::string::npos && arg.find('=') == std::string::npos && arg.rfind("--", 0) != 0 &&
      std::filesystem::is_regular_file(path, ec)) {
    // A file: a report JSON (its plan), else a framework config for --from (FILE.py:FUNCTION included).
    if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
      const Json j = load_json_file(path);
      const std::string schema = j.is_object() && j.contains("schema") && j["schema"].is_string()
                                     ? j["schema"].get<std::string>()
                                     : "";
      if (schema == "shardplan.report/1" || schema == "shardplan.plan/1") {
        const bool rec = schema == "shardplan.plan/1";
        if (rec && !(j.contains("recommended") && j["recommended"].is_object()))
          throw InputError(path, "/recommended", "the plan search recommended nothing (no plan fits)");
        const Json& rep = rec ? j["recommended"] : j;
        if (!rep.contains("plan")) throw InputError(path, rec ? "/recommended/plan" : "/plan", "missing");
        const Plan p = plan_from_json(JsonObj(rep["plan"], path, rec ? "/recommended/plan" : "/plan"));
        for (const Knob& k : plan_knobs()) {
          const std::string v = k.get(p);
          if (!v.empty()) f.given[k.key] = v;
        }
        return f;
      }
    }
    f.from = arg;
    return f;
  }
  std::istringstream in(arg);
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  if (tokens.empty())
    throw InputError::flag(where, "empty: give plan flags (\"--tp 2 --ac full\") or a file");
  std::vector<std::string> flags;
  for (const Knob& k : plan_knobs()) flags.push_back(k.flag);
  flags.push_back("--from");
  flags.push_back("--global-batch");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::string t = tokens[i], value;
    // KEY=VALUE (the run-record / --fix keys) or a bare switch key ("compile"), as well as CLI flags.
    const bool key_form = t.rfind("--", 0) != 0;
    if (const auto eq = t.find('='); eq != std::string::npos) value = t.substr(eq + 1), t = t.substr(0, eq);
    if (key_form) {
      std::replace(t.begin(), t.end(), '_', '-');
      t = "--" + t;
      if (value.empty()) {
        const Knob* k = find_knob(t);
        if (k && k->kind != KnobKind::kSwitch && k->kind != KnobKind::kBool)
          throw InputError::flag(where, tokens[i] + " needs a value (KEY=VALUE)");
        if (k && k->kind == KnobKind::kBool) value = "true";
      }
    }
    auto next = [&]() -> std::string {
      if (!value.empty()) return value;
      if (i + 1 >= tokens.size()) throw InputError::flag(where, t + " needs a value");
      return tokens[++i];
    };
    if (t == "--from") {
      f.from = next();
      continue;
    }
    if (t == "--global-batch") {
      const std::string v = next();
      char* end = nullptr;
      f.global_batch = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || f.global_batch < 1)
        throw InputError::flag(where, "--global-batch must be >= 1, got \"" + v + "\"");
      f.global_batch_given = true;
      continue;
    }
    const Knob* k = find_knob(t);
    if (!k) {
      const std::string m = did_you_mean_list(t, flags);
      throw InputError::flag(where, "unknown knob " + t + (m.empty() ? "" : "; did you mean " + m + "?"));
    }
    if (k->kind == KnobKind::kSwitch)
      f.given[k->key] = value.empty() ? std::string(k->switch_sets) : value;
    else
      f.given[k->key] = next();
  }
  return f;
}

// The knobs whose values differ between the plans (resolved), in knob-table order.
std::vector<std::pair<std::string, std::vector<std::string>>> differences(const std::vector<Result>& rs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const Knob& k : plan_knobs()) {
    std::vector<std::string> v;
    for (const Result& r : rs) v.push_back(k.get(r.plan));
    if (std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x != v.front(); }))
      out.push_back({k.key, v});
  }
  return out;
}

/// The comparison as JSON (shardplan.compare/1): every plan's report, labelled, and the knobs that differ.
std::string compare_json(const std::vector<Result>& results, const std::vector<std::string>& labels,
                         const std::vector<std::string>& arguments,
                         const std::vector<std::pair<std::string, std::vector<std::string>>>& diff,
                         const Loaded& l, const ReportInputs& ri) {
  Json plans = Json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    Json rep = report_json(results[i], ri);
    rep["label"] = labels[i];
    rep["argument"] = arguments[i];
    plans.push_back(rep);
  }
  Json d = Json::array();
  for (const auto& [k, v] : diff) d.push_back({{"knob", k}, {"values", v}});
  return Json{{"schema", "shardplan.compare/1"},
              {"inputs",
               {{"model", {{"name", l.model->spec().name}, {"parameters", l.model->parameters()}}},
                {"cluster", l.cluster->spec().name},
                {"gpus", l.cluster->gpus()}}},
              {"plans", plans},
              {"differences", d}}
             .dump(1) +
         "\n";
}

/// The comparison as text: the plans, the knobs that differ and the predictions side by side.
std::string compare_text(const std::vector<Result>& results, const std::vector<std::string>& labels,
                         const std::vector<std::string>& arguments,
                         const std::vector<std::pair<std::string, std::vector<std::string>>>& diff,
                         const Loaded& l) {
  std::string s =
      fmt::format("{} ({} parameters) on {} x {} ({})\n\n", l.model->spec().name, l.model->parameters(),
                  l.cluster->gpus(), l.cluster->spec().gpu.model, l.cluster->spec().name);
  for (std::size_t i = 0; i < results.size(); ++i) s += fmt::format("  {}: {}\n", labels[i], arguments[i]);
  s += "\n";
  auto row = [&](const std::string& name, auto cell) {
    s += fmt::format("  {:<30}", name);
    for (const Result& r : results) s += fmt::format(" {:>16}", cell(r));
    s += "\n";
  };
  s += fmt::format("  {:<30}", "");
  for (const auto& lab : labels) s += fmt::format(" {:>16}", lab);
  s += "\n";
  for (const auto& [k, v] : diff) {
    s += fmt::format("  {:<30}", k);
    for (const auto& x : v) s += fmt::format(" {:>16}", x.empty() ? "-" : x.substr(0, 16));
    s += "\n";
  }
  row("peak allocated", [](const Result& r) { return format_bytes(static_cast<double>(r.peak_bytes)); });
  row("peak reserved + overhead", [](const Result& r) {
    return format_bytes(static_cast<double>(r.peak_reserved_bytes + r.overhead.total()));
  });
  row("headroom", [](const Result& r) { return format_bytes(static_cast<double>(r.headroom_bytes())); });
  row("fits", [](const Result& r) { return std::string(r.fits ? "yes" : "NO"); });
  row("OOM probability", [](const Result& r) { return format_probability(oom_probability(r)); });
  row("step (s)", [](const Result& r) { return fmt::format("{:.3f}", r.step_s); });
  row("tokens/s/GPU", [](const Result& r) { return fmt::format("{:.0f}", r.tokens_per_s_per_gpu); });
  row("MFU", [](const Result& r) { return fmt::format("{:.1f} %", 100 * r.mfu); });
  row("exposed communication (s)", [](const Result& r) { return fmt::format("{:.3f}", r.exposed_comm_s); });
  row("network per GPU per step", [](const Result& r) {
    double b = 0;
    for (int k = 0; k < kCommKinds; ++k)
      if (static_cast<CommKind>(k) != CommKind::kOffloadCopy)
        b += r.comm[static_cast<std::size_t>(k)].bytes_per_rank;
    return format_bytes(b);
  });
  row("warnings", [&](const Result& r) {
    return std::to_string(evidence_warnings(r, l.model->spec(), l.cluster->spec()).size());
  });
  for (std::size_t i = 0; i < results.size(); ++i)
    for (const auto& w : evidence_warnings(results[i], l.model->spec(), l.cluster->spec()))
      s += fmt::format("warning ({}): {}\n", labels[i], w);
  return s;
}

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "compare", "simulate several plans of one model on one cluster and set them side by side");
  auto a = std::make_shared<CompareArgs>();
  add_input_options(sub, a->in, true);
  sub->add_option(
         "plans", a->plans,
         "PLAN-A PLAN-B ...: each a quoted list of plan knobs (\"tp=2 ac=full compile\", the --fix and "
         "run-record keys; after `--` also CLI flags, \"--tp 2 --ac full\"), a framework config "
         "(--from's formats) or a report JSON (simulate/memory --json, or plan --json: its "
         "recommendation)")
      ->required();
  sub->add_option("--global-batch", a->global_batch,
                  "sequences per optimizer step for every plan (a plan's own --global-batch or file wins)");
  sub->add_option("--seq", a->seq, "sequence length for every plan (a plan's own seq wins)");
  sub->add_option("--json", a->json, "write the comparison (shardplan.compare/1) to FILE or - for stdout");
  sub->add_option("--html", a->html, "write a self-contained HTML comparison to FILE");
  return {
      sub, [a]() {
        if (a->plans.size() < 2) throw InputError::flag("compare", "give at least two plans");
        if (a->global_batch < 0) throw InputError::flag("--global-batch", "must be >= 1");
        Loaded l = load_inputs(a->in);
        std::vector<Result> results;
        std::vector<std::string> labels;
        for (std::size_t i = 0; i < a->plans.size(); ++i) {
          PlanFlags f = plan_argument(a->plans[i], i);
          // The compare-wide batch for plans that state neither their own nor an accumulation (a report's
          // plan states its accumulation).
          if (!f.global_batch_given && !f.given.count("grad_accum") && a->global_batch > 0)
            f.global_batch = a->global_batch;
          Plan p;
          try {
            p = resolve_plan(plan_from_flags(f, l.cluster->spec().gpu.arch, l.model->spec().tied_embeddings),
                             *l.model, *l.cluster, global_batch_from_flags(f));
          } catch (const InputError& e) {
            const InputError blamed = blame_from_file(f, e);
            if (!blamed.file().empty()) throw blamed;
            throw InputError::flag(fmt::format("compare: plan {} (\"{}\")", i + 1, a->plans[i]), e.what());
          }
          const ModelGraph run_model = lora_model(*l.model, p);  // LoRA: frozen base and adapters
          Simulator sim(run_model, *l.cluster, *l.costs);
          results.push_back(sim.run(p, !a->html.empty()));
          labels.push_back(fmt::format("{}", static_cast<char>('A' + std::min<std::size_t>(i, 25))));
        }
        ReportInputs ri{l.model.get(), l.cluster.get(), l.calibration};
        const auto diff = differences(results);
        // Build every output first, then write them.
        const std::string json = a->json.empty() ? "" : compare_json(results, labels, a->plans, diff, l, ri);
        const std::string html = a->html.empty() ? "" : html_compare_report(results, labels, a->plans, ri);
        if (a->json != "-") std::cout << compare_text(results, labels, a->plans, diff, l);
        write_output(a->json, json);
        write_output(a->html, html);
        return std::all_of(results.begin(), results.end(), [](const Result& r) { return r.fits; }) ? 0 : 1;
      }};
}

}  // namespace shardplan::cli

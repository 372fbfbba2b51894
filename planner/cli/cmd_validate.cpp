// `shardplan validate`: predicted vs measured for run records, per record, per source and per term.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>

#include "planner/cli/commands.hpp"
#include "planner/cli/common.hpp"
#include "planner/measured_memory.hpp"
#include "planner/report/evidence.hpp"
#include "planner/report/html.hpp"
#include "planner/report/report.hpp"
#include "planner/search.hpp"
#include "planner/validate.hpp"

namespace shardplan::cli {

namespace {
std::string fmt_value(const std::string& term, double v) {
  if (term.find("bytes") != std::string::npos) return format_bytes(v);
  if (term == "mfu") return fmt::format("{:.1f} %", 100 * v);
  if (term == "step_s") return fmt::format("{:.3f} s", v);
  return fmt::format("{:.0f}", v);
}

std::string summary_line(const ValidationReport::Summary& t) {
  return fmt::format("  {:<22} n={:<4} median |err| {:>5.1f} %  MAPE {:>5.1f} %  worst {:>6.1f} %\n", t.term,
                     t.n, 100 * t.median_abs, 100 * t.mape, 100 * t.worst_abs);
}

Json summary_json(const ValidationReport::Summary& t) {
  return {{"term", t.term},
          {"n", t.n},
          {"median_abs_error", t.median_abs},
          {"mape", t.mape},
          {"worst_abs_error", t.worst_abs}};
}

/// A section to append to docs/accuracy.md (`--markdown-section TITLE`): the summary and the per-record table
/// of another set of records (the reference lane's), under a level-2 heading.
std::string markdown_section(const ValidationReport& v, const std::vector<std::string>& files,
                             const std::string& title) {
  std::string s = "\n## " + title + "\n\n`shardplan validate";
  for (const auto& f : files) s += " " + f;
  s += "`.\n\n| term | records | median abs error | MAPE | worst |\n|---|--:|--:|--:|--:|\n";
  for (const auto& x : v.summary_all())
    s += fmt::format("| {} | {} | {:.1f} % | {:.1f} % | {:.1f} % |\n", x.term, x.n, 100 * x.median_abs,
                     100 * x.mape, 100 * x.worst_abs);
  s += "\n| record | term | predicted | measured | error |\n|---|---|--:|--:|--:|\n";
  for (const auto& r : v.rows)
    s += fmt::format("| {} | {} | {} | {} | {:+.1f} % |\n", r.id, r.term, fmt_value(r.term, r.predicted),
                     fmt_value(r.term, r.measured), 100 * r.rel_error());
  if (!v.skipped.empty()) {
    s += "\n| record not expressible | reason |\n|---|---|\n";
    for (const auto& k : v.skipped) s += fmt::format("| {} | {} |\n", k.id, k.reason);
  }
  return s;
}

/// docs/accuracy.md's coverage and out-of-memory sections, from the evidence of this validation.
std::string evidence_markdown(const ValidationReport& v, const Evidence& e) {
  std::string s =
      "\n## Coverage: measured rows per GPU architecture and plan feature\n\n"
      "What the warnings of `memory`, `simulate` and `plan` (JSON `warnings`) are checked against "
      "(`planner/evidence.json`, written with this page). Time: in-scope records with a measured tokens/s or "
      "step time on that architecture, per feature of their resolved plan. Memory: in-scope records with a "
      "measured memory term, any GPU, plus the reference lane's configurations. A prediction whose plan has "
      "a "
      "feature with no row in its column gets a warning; so does an MFU above the architecture's best "
      "measured "
      "and a model feature the reference lane never ran.\n\n";
  std::vector<std::string> archs;
  for (const auto& a : e.archs) archs.push_back(a.arch);
  std::vector<std::string> features;
  for (const auto& c : e.coverage)
    if (std::find(features.begin(), features.end(), c.feature) == features.end())
      features.push_back(c.feature);
  std::sort(features.begin(), features.end());
  s += "| feature |";
  for (const auto& a : archs) s += " time: " + a + " |";
  s += " memory |\n|---|";
  for (std::size_t i = 0; i < archs.size(); ++i) s += "--:|";
  s += "--:|\n";
  for (const auto& f : features) {
    s += "| " + f + " |";
    for (const auto& a : archs) {
      const Evidence::Cell* c = e.cell(a, f);
      s += fmt::format(" {} |", c ? c->time : 0);
    }
    const Evidence::Cell* c = e.cell("any", f);
    s += fmt::format(" {} |\n", c ? c->memory : 0);
  }
  s += "\n| architecture | GPU | in-scope throughput records | out of scope | best measured MFU | record | "
       "why out "
       "of scope |\n|---|---|--:|--:|--:|---|---|\n";
  for (const auto& a : e.archs)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", a.arch, a.gpu, a.time_records,
                     a.out_of_scope_records, a.best_mfu > 0 ? fmt::format("{:.1f} %", 100 * a.best_mfu) : "-",
                     a.best_mfu_id.empty() ? "-" : a.best_mfu_id,
                     a.out_of_scope_reason.empty() ? "-" : a.out_of_scope_reason);
  s += fmt::format("\nReference lane: {} configurations; model features run:", e.reference_records);
  for (const auto& [f, n] : e.reference_features) s += fmt::format(" {} ({})", f, n);
  s += ".\n";

  const OomCalibration c = oom_calibration(v, e);
  s += fmt::format(
      "\n## Out-of-memory probability\n\n"
      "`memory.margin.oom_probability` (docs/model.md \"Out-of-memory probability\"): the probability that "
      "the "
      "run's reserved memory exceeds the GPU's memory less the runtime overhead, from the {} in-scope "
      "measured "
      "reserved-memory errors above (kernel-smoothed, the plan's regime weighted in).\n\n"
      "### Calibration, leave one out\n\n"
      "For each of those runs and each probability level p = 2.5 %, 7.5 %, ..., 97.5 %: the GPU memory at "
      "which the distribution *without that run* gives it probability p, and whether its measured reserved "
      "memory exceeded that memory (it would have run out). Calibrated: in each bin about the mean predicted "
      "share ran out.\n\n| predicted p | cases | mean predicted | ran out of memory | share |\n"
      "|---|--:|--:|--:|--:|\n",
      e.reserved.size());
  for (const auto& b : c.levels)
    s += fmt::format("| {:.0f}-{:.0f} % | {} | {:.1f} % | {} | {:.1f} % |\n", 100 * b.lo, 100 * b.hi, b.cases,
                     100 * b.mean_p, b.oom, b.cases ? 100.0 * b.oom / b.cases : 0.0);
  s += "\n### Every development record on its own GPU\n\n"
       "The probability each development record gets on the GPU it ran on (leave one out for the runs that "
       "measured reserved memory). Every one of them ran: no record of the development set reports running "
       "out "
       "of memory, so the bins below can only show over-confident \"would not fit\" predictions, not missed "
       "out-of-memory runs.\n\n| predicted p | records | mean predicted | ran out of memory |\n"
       "|---|--:|--:|--:|\n";
  for (const auto& b : c.actual)
    s += fmt::format("| {:.0f}-{:.0f} % | {} | {:.2f} % | {} |\n", 100 * b.lo, 100 * b.hi, b.cases,
                     100 * b.mean_p, b.oom);
  s += "\n| record | predicted use of GPU memory | OOM probability | outcome |\n|---|--:|--:|---|\n";
  for (const auto& r : c.runs)
    s += fmt::format("| {}{}{} | {:.1f} % | {} | {} |\n", r.id,
                     r.measured_reserved ? " (reserved measured)" : "",
                     r.memory_in_scope ? "" : " (memory out of scope)", 100 * r.used_fraction,
                     r.p < 0.0001 ? std::string("< 0.01 %") : fmt::format("{:.2f} %", 100 * r.p),
                     r.oom ? "out of memory" : "ran");
  return s;
}

std::string markdown(const ValidationReport& v, const std::vector<std::string>& files) {
  std::string s = "# Accuracy against measured runs\n\n";
  s += "Generated by `tools/accuracy.sh` (`shardplan validate";
  for (const auto& f : files) s += " " + f;
  s += " --markdown docs/accuracy.md`); do not edit by hand. Uncalibrated: datasheet defaults only.\n";
  s += "Error = (predicted - measured) / measured. Memory is compared with the kind each record measured "
       "(allocated, active, reserved, or device = reserved + CUDA context + NCCL).\n\n";
  const auto table = [](const std::vector<ValidationReport::Summary>& sums) {
    std::string t = "| term | records | median abs error | MAPE | worst |\n|---|--:|--:|--:|--:|\n";
    for (const auto& x : sums)
      t += fmt::format("| {} | {} | {:.1f} % | {:.1f} % | {:.1f} % |\n", x.term, x.n, 100 * x.median_abs,
                       100 * x.mape, 100 * x.worst_abs);
    return t;
  };
  std::vector<const ValidationRow*> outside;
  for (const auto& r : v.rows)
    if (!r.out_of_scope.empty()) outside.push_back(&r);
  s += "## Summary per term\n\n";
  if (!outside.empty())
    s += "Records the tool can express (rows a record marks out of scope, listed below with the reason, are "
         "left out "
         "here and counted in the all-records table).\n\n";
  s += table(v.summary());
  if (!outside.empty()) s += "\n### All records, in scope or not\n\n" + table(v.summary_all());
  for (const auto& term : {"peak_reserved_bytes", "peak_active_bytes", "peak_allocated_bytes",
                           "peak_device_bytes", "tokens_per_s_per_gpu"}) {
    auto by = v.summary_by_source(term);
    if (by.empty()) continue;
    s += fmt::format(
        "\n## {} per source\n\n| source | records | median abs error | MAPE | worst "
        "|\n|---|--:|--:|--:|--:|\n",
        term);
    for (const auto& t : by)
      s += fmt::format("| {} | {} | {:.1f} % | {:.1f} % | {:.1f} % |\n", t.term, t.n, 100 * t.median_abs,
                       100 * t.mape, 100 * t.worst_abs);
  }
  const auto pairs = v.knob_pairs();
  if (!pairs.empty()) {
    int right = 0, n_time = 0, right_time = 0;
    std::vector<std::string> groups;
    for (const auto& q : pairs) {
      right += q.direction_right();
      const bool time = q.term.find("bytes") == std::string::npos;
      n_time += time;
      right_time += time && q.direction_right();
      const std::string key = q.id_a + "|" + q.id_b;
      if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
    }
    s += fmt::format(
        "\n## Paired runs: one knob changed\n\nPairs of records with the same source, model, cluster and GPU "
        "count whose resolved plans differ in exactly one knob: the change from the first record to the "
        "second, "
        "predicted and measured (throughput: tokens/s per GPU, or step time where a record has no tokens/s; "
        "memory: each term both measured). The direction is right when the signs agree or both changes are "
        "under {:.0f} %. {} pairs, {} comparisons: direction right in {} ({} of {} throughput, {} of {} "
        "memory).\n\n| knob | change | records | term | predicted | measured | direction |\n"
        "|---|---|---|---|--:|--:|---|\n",
        100 * KnobPair::kFlatChange, groups.size(), pairs.size(), right, right_time, n_time,
        right - right_time, static_cast<int>(pairs.size()) - n_time);
    for (const auto& q : pairs)
      s += fmt::format("| {} | {} → {} | {} → {} | {} | {:+.1f} % | {:+.1f} % | {} |\n", q.knob, q.from, q.to,
                       q.id_a, q.id_b, q.term, 100 * q.predicted_change, 100 * q.measured_change,
                       q.direction_right() ? "right" : "wrong");
  }
  s += "\n## Per record\n\n| record | term | predicted | measured | error |\n|---|---|--:|--:|--:|\n";
  for (const auto& r : v.rows)
    s += fmt::format("| {}{} | {} | {} | {} | {:+.1f} % |\n", r.id,
                     r.out_of_scope.empty() ? "" : " (out of scope)", r.term, fmt_value(r.term, r.predicted),
                     fmt_value(r.term, r.measured), 100 * r.rel_error());
  if (!outside.empty()) {
    s += "\n## Out of scope\n\n| record | term | error | why the defaults do not model it "
         "|\n|---|---|--:|---|\n";
    for (const auto* r : outside)
      s += fmt::format("| {} | {} | {:+.1f} % | {} |\n", r->id, r->term, 100 * r->rel_error(),
                       r->out_of_scope);
  }
  if (!v.skipped.empty()) {
    s += "\n## Not expressible yet\n\n| record | reason |\n|---|---|\n";
    for (const auto& k : v.skipped) s += fmt::format("| {} | {} |\n", k.id, k.reason);
  }
  return s;
}
/// `validate --oom-message FILE` / `--memory-snapshot FILE` with the plan flags: the measurement read first
/// (a bad file is refused before anything is simulated), then the stated plan simulated and compared. Exit 0.
struct MeasuredArgs {
  Inputs in;
  PlanFlags flags;
  std::string oom_message, memory_snapshot, json;
};

int run_measured_memory(const MeasuredArgs& a) {
  if (a.in.model.empty())
    throw InputError::flag("--model", "required with --oom-message / --memory-snapshot (the run's model)");
  std::optional<OomMessage> oom;
  std::optional<MemorySnapshot> snap;
  if (!a.oom_message.empty()) oom = read_oom_message(a.oom_message);
  if (!a.memory_snapshot.empty()) snap = read_memory_snapshot(a.memory_snapshot);
  Loaded l = load_inputs(a.in);
  const Plan p = resolve_flags_plan(a.flags, l);
  Simulator sim(*l.model, *l.cluster, *l.costs);
  const Result r = sim.run(p);
  std::vector<MemoryComparison> cs;
  if (oom) cs.push_back(compare_oom_message(*oom, r, kDefaultHeadroom));
  if (snap)
    for (const SnapshotDevice& d : snap->devices) cs.push_back(compare_snapshot(d, r, kDefaultHeadroom));
  std::string text = fmt::format("plan: {}\n", plan_to_flags(r.plan));
  Json comparisons = Json::array();
  for (MemoryComparison& c : cs) {
    add_fit_advice(c, *l.model, *l.cluster, *l.costs, r);
    text += memory_comparison_text(c);
    comparisons.push_back(memory_comparison_json(c));
  }
  if (oom && oom->messages > 1)
    text += fmt::format("note: {} holds {} out-of-memory messages; the first was read\n", a.oom_message,
                        oom->messages);
  Json j = {{"schema", "shardplan.measured-memory/1"},
            {"plan", plan_to_flags(r.plan)},
            {"model", l.model->spec().name},
            {"cluster", l.cluster->spec().name},
            {"gpus", l.cluster->gpus()},
            {"comparisons", comparisons}};
  if (a.json != "-") std::cout << text;
  write_output(a.json, j.dump(1) + "\n");
  return 0;
}
}  // namespace

/// The validation as JSON (shardplan.validation/1): every compared row, the summaries, the skipped records.
Json validation_json(const ValidationReport& v, const Json& terms, const Json& terms_all, bool failed) {
  Json rows = Json::array();
  for (const auto& r : v.rows) {
    Json row = {{"id", r.id},
                {"source", r.source},
                {"term", r.term},
                {"predicted", r.predicted},
                {"measured", r.measured},
                {"rel_error", r.rel_error()}};
    if (!r.out_of_scope.empty()) row["out_of_scope"] = r.out_of_scope;
    rows.push_back(std::move(row));
  }
  Json skipped = Json::array();
  for (const auto& k : v.skipped) skipped.push_back({{"id", k.id}, {"reason", k.reason}});
  return Json{{"schema", "shardplan.validation/1"}, {"rows", rows},       {"summary", terms},
              {"summary_all", terms_all},           {"skipped", skipped}, {"failed", failed}};
}

Command add_validate_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("validate", "compare predictions with measured runs (shardplan.run/1 records)");
  struct Args {
    std::vector<std::string> files;
    std::string calibration, json, markdown, markdown_section, html, reference_lane, evidence;
    double max_error = -1, max_median_error = -1;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("records", a->files, "run-record files (a record, a list, or {records: [...]})");
  auto m = std::make_shared<MeasuredArgs>();
  sub->add_option(
      "--oom-message", m->oom_message,
      "a PyTorch CUDA out-of-memory message (a log or traceback holding \"Tried to allocate ...\"): "
      "compared with the prediction for the plan the flags state (--model, --cluster, --gpus, plan "
      "flags), with the plan changes that would fit");
  sub->add_option("--memory-snapshot", m->memory_snapshot,
                  "a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot; read as data, never "
                  "executed): compared like --oom-message");
  add_input_options(sub, m->in, false, false);
  add_plan_options(sub, m->flags);
  sub->add_option("--calibration", a->calibration, "calibration profile");
  sub->add_option("--json", a->json, "write the JSON result to FILE or - for stdout");
  sub->add_option("--markdown", a->markdown, "write the accuracy table as Markdown to FILE");
  sub->add_option("--markdown-section", a->markdown_section,
                  "with --markdown: write a section titled TITLE (summary and per-record table) to append to "
                  "another accuracy document, instead of a whole document");
  sub->add_option("--html", a->html,
                  "write a self-contained HTML report (predicted vs measured scatter) to FILE");
  sub->add_option("--max-error", a->max_error,
                  "exit 1 if any in-scope record's |relative error| exceeds this (e.g. 0.1)");
  sub->add_option("--max-median-error", a->max_median_error,
                  "exit 1 if any term's median |relative error| over in-scope records exceeds this");
  sub->add_flag("--quiet", a->quiet, "print only the summary");
  sub->add_option("--reference-lane", a->reference_lane,
                  "the reference lane's records (tools/reference/data/records.json): with --markdown, the "
                  "coverage and out-of-memory sections; with --evidence, its model features");
  sub->add_option(
      "--evidence", a->evidence,
      "write the evidence of these records (shardplan.evidence/1: reserved-memory errors, coverage, "
      "best MFU per GPU architecture) to FILE: planner/evidence.json, embedded at build time");
  return {sub, [a, m]() {
            if (!m->oom_message.empty() || !m->memory_snapshot.empty()) {
              if (!a->files.empty())
                throw InputError::flag("records",
                                       "give run records or --oom-message / --memory-snapshot, not both");
              m->json = a->json;
              m->in.calibration = a->calibration;
              return run_measured_memory(*m);
            }
            if (a->files.empty())
              throw InputError::flag("records",
                                     "give run-record files, or --oom-message / --memory-snapshot");
            CalibrationHooks hooks;
            if (!a->calibration.empty()) hooks = load_calibration_hooks(a->calibration);
            ValidationReport v = validate_files(a->files, a->calibration.empty() ? nullptr : &hooks);
            std::string text;
            if (!a->quiet) {
              text += fmt::format("{:<58} {:<22} {:>12} {:>12} {:>8}\n", "record", "term", "predicted",
                                  "measured", "error");
              for (const auto& r : v.rows)
                text += fmt::format("{:<58} {:<22} {:>12} {:>12} {:>+7.1f}%{}\n", r.id.substr(0, 58), r.term,
                                    fmt_value(r.term, r.predicted), fmt_value(r.term, r.measured),
                                    100 * r.rel_error(), r.out_of_scope.empty() ? "" : "  (out of scope)");
              for (const auto& k : v.skipped) text += fmt::format("skipped {}: {}\n", k.id, k.reason);
            }
            const bool any_outside = std::any_of(
                v.rows.begin(), v.rows.end(), [](const ValidationRow& r) { return !r.out_of_scope.empty(); });
            text += any_outside ? "\nsummary (records in scope):\n" : "\nsummary:\n";
            bool failed = false;
            Json terms = Json::array();
            for (const auto& t : v.summary()) {
              text += summary_line(t);
              terms.push_back(summary_json(t));
              if (a->max_median_error >= 0 && t.median_abs > a->max_median_error) failed = true;
              if (a->max_error >= 0 && t.worst_abs > a->max_error) failed = true;
            }
            Json terms_all = Json::array();
            if (any_outside) text += "summary (all records):\n";
            for (const auto& t : v.summary_all()) {
              if (any_outside) text += summary_line(t);
              terms_all.push_back(summary_json(t));
            }
            const std::string json =
                a->json.empty() ? "" : validation_json(v, terms, terms_all, failed).dump(1) + "\n";
            std::optional<ValidationReport> lane;
            if (!a->reference_lane.empty()) lane = validate_files({a->reference_lane});
            std::optional<Evidence> ev;
            if (lane || !a->evidence.empty()) ev = evidence_from(v, lane ? &*lane : nullptr);
            std::string md = a->markdown.empty() ? ""
                             : a->markdown_section.empty()
                                 ? markdown(v, a->files) + (lane ? evidence_markdown(v, *ev) : "")
                                 : markdown_section(v, a->files, a->markdown_section);
            const std::string evidence_json = a->evidence.empty() ? "" : evidence_to_json(*ev).dump(1) + "\n";
            std::string html = a->html.empty() ? "" : html_validate_report(v);
            if (a->json != "-") std::cout << text;
            write_output(a->json, json);
            write_output(a->markdown, md);
            write_output(a->html, html);
            write_output(a->evidence, evidence_json);
            return failed ? 1 : 0;
          }};
}

}  // namespace shardplan::cli

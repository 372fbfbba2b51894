// Self-contained HTML reports (inline SVG and CSS, nothing loaded from the network) for people to look at:
// one simulated step (memory over time by category, the lanes' Gantt chart, the breakdown), a plan search
// (top plans, the recommended plan's step), and a validation (predicted vs measured per term). They format;
// they compute nothing beyond replaying the program's memory effects per category for the plot.
#pragma once
#include <string>

#include "planner/report/report.hpp"
#include "planner/search.hpp"
#include "planner/validate.hpp"

namespace shardplan {

/// Elements above which the charts merge tasks and drop samples more aggressively (keeps 405B steps < 2 MB).
inline constexpr std::size_t kHtmlMaxSvgElements = 12000;

/// The report of the simulator's last run. The run must have been made with detail = true (labels and memory
/// samples); without it the charts say so instead of drawing.
/// `r` comes from a detail run (Simulator::run(plan, true)): the charts draw its program and timeline.
std::string html_simulate_report(const Result& r, const ReportInputs& in);

/// The plan search: top plans (tokens/s/GPU, peak memory, binding constraint), then the recommended plan's
/// memory and Gantt charts from the detail run the search keeps for it (nothing is re-simulated here).
std::string html_plan_report(const SearchOutcome& o, const ModelGraph& model, const Cluster& cluster);

/// `shardplan compare`: the plans side by side (what differs, memory, OOM probability, time, warnings), bars
/// of tokens/s and memory per plan, and each plan's timeline (detail runs: the whole step for pipeline
/// plans).
std::string html_compare_report(const std::vector<Result>& results, const std::vector<std::string>& labels,
                                const std::vector<std::string>& arguments, const ReportInputs& in);

/// Predicted vs measured, one scatter per term (log-log where the values span a wide range), with y = x and
/// ±10 % bands; the summary and the per-row table.
std::string html_validate_report(const ValidationReport& v);

}  // namespace shardplan

// HTML reports: `shardplan compare`, the plans side by side.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "planner/report/evidence.hpp"
#include "planner/report/html.hpp"
#include "planner/report/html_detail.hpp"
#include "planner/report/margin.hpp"
#include "planner/report/svg.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

using namespace html_detail;

namespace {

/// Horizontal bars, one per plan: `value` of each, labelled with `text`.
std::string compare_bars(const std::vector<Result>& rs, const std::vector<std::string>& labels,
                         const std::string& title, const std::string& axis,
                         const std::function<double(const Result&)>& value,
                         const std::function<std::string(const Result&)>& text, double reference,
                         const std::string& reference_label) {
  const double row_h = 30, top = 36, left = 90;
  const double H = top + static_cast<double>(rs.size()) * row_h + 52;
  svg::Canvas c(kChartW / 2 - 10, H, title, "chart compare");
  double hi = reference;
  for (const Result& r : rs) hi = std::max(hi, value(r));
  double lo = 0;
  hi = std::max(hi, 1e-12);
  svg::nice_range(lo, hi, 5, false);
  svg::Frame f;
  f.area = {left, top, kChartW / 2 - 10 - left - 90, static_cast<double>(rs.size()) * row_h};
  f.x = {0, hi, f.area.x, f.area.right(), false};
  f.y = {0, 1, f.area.bottom(), f.area.y, false};
  c.text(f.area.x, 20, title, "axis-title");
  svg::axes(c, f, svg::Axis{axis, svg::nice_ticks(0, hi, 5), [](double v) { return num(v, 1); }, true},
            svg::Axis{"", {}, {}, false});
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const double y = top + static_cast<double>(i) * row_h;
    c.open_group("compare-bar", fmt::format("data-plan=\"{}\"", escape(labels[i])));
    c.text(left - 10, y + row_h / 2 + 4, labels[i], "bar-label", "end");
    const double w = f.x(value(rs[i])) - f.area.x;
    c.rect(f.area.x, y + 6, std::max(0.0, w), row_h - 12, rs[i].fits ? "#4e79a7" : "#c62828", "bar",
           text(rs[i]));
    c.text(f.area.x + std::max(0.0, w) + 6, y + row_h / 2 + 4, text(rs[i]), "bar-value");
    c.close_group();
  }
  if (reference > 0) {
    const double x = f.x(reference);
    c.line(x, f.area.y, x, f.area.bottom(), "capacity-line", "#c62828");
    c.text(x, f.area.y - 4, reference_label, "ref-label", "end");
  }
  return c.str();
}

}  // namespace

std::string html_compare_report(const std::vector<Result>& rs, const std::vector<std::string>& labels,
                                const std::vector<std::string>& arguments, const ReportInputs& in) {
  std::string b;
  b += "<h1>" +
       escape(fmt::format("Compare {} plans: {} on {} × {}", rs.size(), in.model->spec().name,
                          in.cluster->gpus(), in.cluster->spec().gpu.model)) +
       "</h1>";
  b += "<p class=\"sub\">" +
       escape(fmt::format("{} · simulated with {}", in.cluster->spec().name,
                          in.calibration.empty() ? "datasheet defaults" : "calibration " + in.calibration)) +
       "</p>\n";
  // What each plan is, and the knobs that differ.
  b += "<section><h2>Plans</h2><table class=\"compare\"><tr><th></th>";
  for (const auto& l : labels) b += "<th>" + escape(l) + "</th>";
  b += "</tr>\n<tr><td>given as</td>";
  for (const auto& a : arguments) b += "<td><code>" + escape(a) + "</code></td>";
  b += "</tr>\n";
  for (const Knob& k : plan_knobs()) {
    std::vector<std::string> v;
    for (const Result& r : rs) v.push_back(k.get(r.plan));
    if (std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == v.front(); })) continue;
    b += "<tr><td>" + escape(k.key) + "</td>";
    for (const auto& x : v) b += "<td>" + escape(x.empty() ? "-" : x) + "</td>";
    b += "</tr>\n";
  }
  auto row = [&](const std::string& name, const std::function<std::string(const Result&)>& cell) {
    b += "<tr><td>" + escape(name) + "</td>";
    for (const Result& r : rs) b += "<td class=\"n\">" + cell(r) + "</td>";
    b += "</tr>\n";
  };
  row("fits", [](const Result& r) {
    return std::string(r.fits ? "<span class=\"badge ok\">fits</span>"
                              : "<span class=\"badge bad\">does not fit</span>");
  });
  row("peak allocated", [](const Result& r) { return escape(gib(static_cast<double>(r.peak_bytes))); });
  row("peak reserved + overhead", [](const Result& r) {
    return escape(gib(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())));
  });
  row("headroom", [](const Result& r) { return escape(gib(static_cast<double>(r.headroom_bytes()))); });
  row("OOM probability", [](const Result& r) { return escape(format_probability(oom_probability(r))); });
  row("step", [](const Result& r) { return escape(seconds(r.step_s)); });
  row("tokens/s per GPU",
      [](const Result& r) { return escape(fmt::format("{:.0f}", r.tokens_per_s_per_gpu)); });
  row("MFU", [](const Result& r) { return escape(fmt::format("{:.1f} %", 100 * r.mfu)); });
  row("exposed communication", [](const Result& r) { return escape(seconds(r.exposed_comm_s)); });
  row("network per GPU per step",
      [](const Result& r) { return escape(fmt::format("{:.2f} GB", 1e-9 * network_bytes_per_gpu(r))); });
  row("binding", [](const Result& r) { return escape(binding_constraint(r)); });
  b += "</table></section>\n";
  // Bars.
  const double cap = static_cast<double>(rs.front().capacity_bytes) / static_cast<double>(kGiB);
  b += "<section class=\"cols\"><div><figure>" +
       compare_bars(
           rs, labels, "Throughput", "tokens/s per GPU",
           [](const Result& r) { return r.tokens_per_s_per_gpu; },
           [](const Result& r) { return fmt::format("{:.0f}", r.tokens_per_s_per_gpu); }, 0, "") +
       "</figure></div><div><figure>" +
       compare_bars(
           rs, labels, "Memory", "peak reserved + overhead (GiB)",
           [](const Result& r) {
             return static_cast<double>(r.peak_reserved_bytes + r.overhead.total()) /
                    static_cast<double>(kGiB);
           },
           [](const Result& r) {
             return fmt::format("{} (OOM {})",
                                gib(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
                                format_probability(oom_probability(r)));
           },
           cap, "GPU " + gib(static_cast<double>(rs.front().capacity_bytes), 0)) +
       "</figure></div></section>\n";
  // Warnings.
  std::string warnings;
  for (std::size_t i = 0; i < rs.size(); ++i)
    for (const auto& w : evidence_warnings(rs[i], in.model->spec(), in.cluster->spec()))
      warnings += "<li><b>" + escape(labels[i]) + "</b>: " + escape(w) + "</li>";
  if (!warnings.empty())
    b += "<section><h2>Where the predictions leave the evidence</h2><ul>" + warnings + "</ul></section>\n";
  // Each plan's timeline.
  for (std::size_t i = 0; i < rs.size(); ++i) {
    if (!rs[i].detail) continue;
    b += "<section><h2>" + escape(fmt::format("{}: timeline", labels[i])) + "</h2><figure>" +
         (rs[i].pipeline && !rs[i].pipeline->spans.empty() ? pipeline_gantt(rs[i]) : gantt_chart(rs[i])) +
         "</figure></section>\n";
  }
  Json doc = {{"schema", "shardplan.compare/1"}, {"plans", Json::array()}};
  for (const Result& r : rs) doc["plans"].push_back(report_json(r, in));
  b += json_block("shardplan-compare", doc);
  return page(fmt::format("shardplan compare — {}", in.model->spec().name), b);
}

// ------------------------------------------------------------------------------------------- validation
// report

}  // namespace shardplan

// HTML reports, pipeline plans drawn whole: one lane per pipeline rank over the full step and each rank's
// memory (html_detail.hpp).
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

namespace shardplan::html_detail {

/// The busiest rank's memory lane of the gantt chart: each action's total while it runs, held between actions
/// at the next one's state without its working set, the optimizer's tail after the last; the reported peak
/// marked at the action (or the optimizer tail) that sets it.
void pipeline_memory_lane(svg::Canvas& c, const svg::Frame& f, const Result& r, const TimeUnit& tu, double y0,
                          double h) {
  const PipelineSummary& ps = *r.pipeline;
  std::vector<const PipelineSpan*> mine;
  for (const PipelineSpan& sp : ps.spans)
    if (sp.rank == ps.busiest_rank) mine.push_back(&sp);
  double top_bytes = std::max({static_cast<double>(r.peak_bytes), static_cast<double>(ps.tail_bytes), 1.0});
  for (const PipelineSpan* sp : mine) top_bytes = std::max(top_bytes, static_cast<double>(sp->total()));
  const double drawn_peak = [&] {
    double d = static_cast<double>(ps.tail_bytes);
    for (const PipelineSpan* sp : mine) d = std::max(d, static_cast<double>(sp->total()));
    return d;
  }();
  top_bytes *= 1.08;
  auto y_of = [&](double b) { return y0 + h - h * b / top_bytes; };
  c.open_group("gantt-memory",
               fmt::format("data-lane=\"allocated memory, rank {}\" data-drawn-peak-bytes=\"{:.0f}\" "
                           "data-report-peak-bytes=\"{}\"",
                           ps.busiest_rank, drawn_peak, r.peak_bytes));
  c.rect(f.area.x, y0, f.area.w, h, {}, "row-bg");
  c.text(f.area.x - 8, y0 + h / 2 - 6, fmt::format("rank {} memory", ps.busiest_rank), "row-label", "end");
  c.text(f.area.x - 8, y0 + h / 2 + 9, fmt::format("0–{}", gib(top_bytes, 0)), "tick-label", "end");
  std::string d;
  double last_x = f.area.x;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const PipelineSpan& sp = *mine[i];
    const double x0 = f.x(sp.start_s * tu.factor), x1 = f.x(sp.end_s * tu.factor);
    const double between = static_cast<double>(sp.held_bytes + sp.accum_grad_bytes + sp.saved_act_bytes);
    d += d.empty() ? fmt::format("M{:.1f} {:.1f}", f.area.x, y_of(between)) : "";
    d += fmt::format(" H{:.1f} V{:.1f} H{:.1f} V{:.1f}", x0, y_of(static_cast<double>(sp.total())),
                     std::max(x1, x0 + 0.5), y_of(between));
    last_x = std::max(x1, x0 + 0.5);
  }
  if (!mine.empty()) {
    const double xt = std::max(last_x, f.x(ps.tail_start_s * tu.factor));
    d +=
        fmt::format(" H{:.1f} V{:.1f} H{:.1f}", xt, y_of(static_cast<double>(ps.tail_bytes)), f.area.right());
    c.path(d, {}, "mem-gpu", "allocated memory of the busiest pipeline rank over the step");
  }
  // The reported peak, at the action (or the optimizer tail) that sets it.
  double peak_x = f.x(ps.tail_start_s * tu.factor);
  for (const PipelineSpan* sp : mine)
    if (sp->total() == r.peak_bytes) {
      peak_x = f.x(sp->start_s * tu.factor);
      break;
    }
  c.line(peak_x, y0, peak_x, y0 + h, "mem-peak");
  const bool left = peak_x > f.area.x + f.area.w * 0.62;
  c.text(peak_x + (left ? -6 : 6), y0 + 13,
         fmt::format("peak {} — {}", gib(static_cast<double>(r.peak_bytes)), r.peak_phase), "peak-label",
         left ? "end" : "start");
  c.close_group();
}

std::string pipeline_gantt(const Result& r) {
  const PipelineSummary& ps = *r.pipeline;
  const double end_s = std::max(r.step_s, 1e-9);
  const TimeUnit tu = time_unit(end_s);
  const double row_h = 26, gap = 8, top = 44, mem_h = 110;
  const int lanes = ps.pp + 1;
  const double rows_h = lanes * (row_h + gap) + mem_h + gap;
  const double H = top + rows_h + 52;
  svg::Frame f;
  f.area = {kLeft, top, kChartW - kLeft - kRight, rows_h - gap};
  f.x = {0, end_s * tu.factor, f.area.x, f.area.right(), false};
  f.y = {0, 1, f.area.bottom(), f.area.y, false};
  const std::array<std::pair<char, const char*>, 4> colors = {
      {{'F', "#5b8fd0"}, {'B', "#2a4d7a"}, {'I', "#4e79a7"}, {'W', "#76b7b2"}}};
  auto color = [&](char op) {
    for (auto [o, col] : colors)
      if (o == op) return col;
    return "#7f7f7f";
  };
  auto op_name = [](char op) {
    return op == 'F'   ? "forward"
           : op == 'B' ? "backward"
           : op == 'I' ? "input-gradient backward"
                       : "weight-gradient backward";
  };
  std::vector<std::vector<svg::Span>> rows(static_cast<std::size_t>(ps.pp));
  std::array<bool, 4> used{};
  for (const PipelineSpan& sp : ps.spans) {
    if (sp.rank < 0 || sp.rank >= ps.pp) continue;
    for (std::size_t k = 0; k < colors.size(); ++k) used[k] = used[k] || colors[k].first == sp.op;
    rows[static_cast<std::size_t>(sp.rank)].push_back(
        {sp.start_s * tu.factor, sp.end_s * tu.factor, color(sp.op),
         fmt::format("stage {}, micro-batch {}: {} {} {} from {} {}", sp.stage, sp.micro_batch,
                     op_name(sp.op), num((sp.end_s - sp.start_s) * tu.factor, 3), tu.name,
                     num(sp.start_s * tu.factor, 3), tu.name)});
  }
  std::vector<std::pair<double, double>> ex;
  if (r.exposed_intervals)
    for (auto [a, b] : *r.exposed_intervals) ex.push_back({a * tu.factor, b * tu.factor});
  for (double min_px = 1.5;; min_px *= 2) {
    svg::Canvas c(
        kChartW, H,
        "Pipeline timeline of the whole step: each pipeline rank's micro-batches, the slowest rank's "
        "exposed communication, the busiest rank's memory",
        "chart gantt pipeline");
    std::vector<svg::LegendItem> items;
    for (std::size_t k = 0; k < colors.size(); ++k)
      if (used[k]) items.push_back({op_name(colors[k].first), colors[k].second, {}});
    items.push_back({"exposed communication", "#c62828", {}});
    svg::legend(c, f.area.x, 10, f.area.w, items);
    svg::axes(c, f,
              svg::Axis{fmt::format("time in the step ({})", tu.name),
                        svg::nice_ticks(0, end_s * tu.factor, 12),
                        {},
                        true},
              svg::Axis{"", {}, {}, false});
    for (int k = 0; k < ps.pp; ++k)
      svg::gantt_row(c, f, top + k * (row_h + gap), row_h,
                     fmt::format("rank {}{}", k, k == ps.busiest_rank ? " (peak)" : ""),
                     rows[static_cast<std::size_t>(k)], "gantt-row", min_px);
    exposed_lane(c, f, top + ps.pp * (row_h + gap), row_h, fmt::format("exposed, rank {}", ps.slowest_rank),
                 ex, tu, r.exposed_comm_s);
    pipeline_memory_lane(c, f, r, tu, top + lanes * (row_h + gap), mem_h);
    if (c.elements() <= kHtmlMaxSvgElements || min_px > 64) return c.str();
  }
}

/// The busiest pipeline rank's memory over the whole step, stacked by what holds it (the composition its
/// peak is the largest of), with the capacity lines: it reaches the reported peak.
std::string pipeline_memory_chart(const Result& r, double H) {
  const PipelineSummary& ps = *r.pipeline;
  const double end_s = std::max(r.step_s, 1e-9);
  const TimeUnit tu = time_unit(end_s);
  svg::Frame f;
  f.area = {kLeft, 46, kChartW - kLeft - kRight, H - 46 - 58};
  const double cap = static_cast<double>(r.capacity_bytes), g = static_cast<double>(kGiB);
  std::vector<double> xs;
  std::vector<svg::Series> series = {{"held (state, parameters, buffers)", "#4e79a7", {}},
                                     {"accumulated gradients", "#f28e2b", {}},
                                     {"saved activations", "#e15759", {}},
                                     {"working set", "#76b7b2", {}}};
  auto push = [&](double t, double a, double b, double c2, double d) {
    xs.push_back(t * tu.factor);
    series[0].ys.push_back(a / g), series[1].ys.push_back(b / g), series[2].ys.push_back(c2 / g),
        series[3].ys.push_back(d / g);
  };
  double drawn = 0;
  for (const PipelineSpan& sp : ps.spans) {
    if (sp.rank != ps.busiest_rank) continue;
    push(sp.start_s, static_cast<double>(sp.held_bytes), static_cast<double>(sp.accum_grad_bytes),
         static_cast<double>(sp.saved_act_bytes), static_cast<double>(sp.work_bytes));
    push(sp.end_s, static_cast<double>(sp.held_bytes), static_cast<double>(sp.accum_grad_bytes),
         static_cast<double>(sp.saved_act_bytes), 0);
    drawn = std::max(drawn, static_cast<double>(sp.total()));
  }
  // The optimizer's tail: held state plus its transients (held_bytes of the spans excludes the sharded
  // gradients the reduction makes; the tail's figure includes them).
  const double held = series[0].ys.empty() ? 0 : series[0].ys.back() * g;
  push(ps.tail_start_s, held, 0, 0, std::max(0.0, static_cast<double>(ps.tail_bytes) - held));
  push(end_s, held, 0, 0, 0);
  drawn = std::max(drawn, static_cast<double>(ps.tail_bytes));
  double ymax = std::max({drawn, cap, static_cast<double>(r.peak_reserved_bytes)}) * 1.04 / g, ymin = 0;
  svg::nice_range(ymin, ymax, 8, false);
  f.x = {0, end_s * tu.factor, f.area.x, f.area.right(), false};
  f.y = {0, ymax, f.area.bottom(), f.area.y, false};
  svg::Canvas c(
      kChartW, H,
      fmt::format("Memory allocated on pipeline rank {} (the busiest) over the whole step, stacked by "
                  "what holds it",
                  ps.busiest_rank),
      "chart memory pipeline");
  std::vector<svg::LegendItem> items;
  for (const auto& se : series) items.push_back({se.name, se.color, {}});
  svg::legend(c, f.area.x, 10, f.area.w, items);
  svg::axes(
      c, f,
      svg::Axis{
          fmt::format("time in the step ({})", tu.name), svg::nice_ticks(0, end_s * tu.factor, 12), {}, true},
      svg::Axis{"allocated memory (GiB)", svg::nice_ticks(0, ymax, 8), [](double v) { return num(v, 1); },
                true});
  svg::stacked_area(c, f, xs, series);
  c.open_group(
      "memory-peak-data",
      fmt::format("data-drawn-peak-bytes=\"{:.0f}\" data-report-peak-bytes=\"{}\"", drawn, r.peak_bytes));
  c.close_group();
  memory_reference_lines(c, f, r, cap);
  svg::hline(c, f, static_cast<double>(r.peak_bytes) / g, "peak",
             fmt::format("peak allocated {} — {}", gib(static_cast<double>(r.peak_bytes)), r.peak_phase),
             true);
  return c.str();
}

// ------------------------------------------------------------------------------------------- tables

}  // namespace shardplan::html_detail

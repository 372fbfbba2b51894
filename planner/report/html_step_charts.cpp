// HTML reports, one step's charts: memory over time by category (replayed from the program) and the lanes'
// Gantt chart with the exposed-communication lane (html_detail.hpp).
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

// ------------------------------------------------------------------------------------------- memory replay

MemoryCurve replay_memory(const Program& prog, const Timeline& tl) {
  MemoryCurve m;
  std::array<double, kMemCategories> cur{};
  for (int c = 0; c < kMemCategories; ++c)
    cur[static_cast<std::size_t>(c)] = static_cast<double>(tl.current[static_cast<std::size_t>(c)]);
  for (const MemEffect& e : prog.effects)
    cur[static_cast<std::size_t>(e.category)] -= static_cast<double>(e.delta_bytes);
  auto total = [](const std::array<double, kMemCategories>& a) {
    double s = 0;
    for (double v : a) s += v;
    return s;
  };
  auto push = [&](double t, const std::array<double, kMemCategories>& a) {
    m.t_s.push_back(t);
    m.by_cat.push_back(a);
    m.max_total = std::max(m.max_total, total(a));
  };
  push(0.0, cur);
  const std::size_t n = std::min(prog.tasks.size(), tl.timing.size());
  for (std::size_t i = 0; i < n; ++i) {
    const Task& t = prog.tasks[i];
    if (t.n_effects == 0) continue;
    auto hi = cur;
    double hi_total = total(cur);
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects && e < prog.effects.size(); ++e) {
      cur[static_cast<std::size_t>(prog.effects[e].category)] +=
          static_cast<double>(prog.effects[e].delta_bytes);
      const double tot = total(cur);
      if (tot > hi_total) hi = cur, hi_total = tot;
    }
    const double at = tl.timing[i].issue_s;
    if (hi != cur) push(at, hi);
    push(at, cur);
  }
  push(std::max(tl.end_s, m.t_s.back()), cur);
  return m;
}

/// Keeps, per pixel column, the highest point and the last one (so peaks survive and steps stay right).
MemoryCurve downsample(const MemoryCurve& m, const svg::Scale& x, double px_per_bucket) {
  if (m.t_s.size() < 2) return m;
  MemoryCurve out;
  out.max_total = m.max_total;
  auto total = [](const std::array<double, kMemCategories>& a) {
    double s = 0;
    for (double v : a) s += v;
    return s;
  };
  std::size_t i = 0;
  while (i < m.t_s.size()) {
    const double bucket = std::floor(x(m.t_s[i]) / px_per_bucket);
    std::size_t j = i, best = i;
    while (j < m.t_s.size() && std::floor(x(m.t_s[j]) / px_per_bucket) == bucket) {
      if (total(m.by_cat[j]) > total(m.by_cat[best])) best = j;
      ++j;
    }
    const std::size_t last = j - 1;
    if (i == 0 && best != 0) {  // keep the starting state
      out.t_s.push_back(m.t_s[0]);
      out.by_cat.push_back(m.by_cat[0]);
    }
    if (best != last) {
      out.t_s.push_back(m.t_s[best]);
      out.by_cat.push_back(m.by_cat[best]);
    }
    out.t_s.push_back(m.t_s[last]);
    out.by_cat.push_back(m.by_cat[last]);
    i = j;
  }
  return out;
}

/// The part of the curve within [0, t1_s], ending with the state at t1_s.
MemoryCurve clip(const MemoryCurve& m, double t1_s) {
  MemoryCurve out;
  out.max_total = m.max_total;
  for (std::size_t i = 0; i < m.t_s.size() && m.t_s[i] <= t1_s; ++i) {
    out.t_s.push_back(m.t_s[i]);
    out.by_cat.push_back(m.by_cat[i]);
  }
  if (!out.t_s.empty() && out.t_s.back() < t1_s) {
    out.t_s.push_back(t1_s);
    out.by_cat.push_back(out.by_cat.back());
  }
  return out;
}

/// The CPU issues kernels (and so allocates and frees) ahead of the GPU: the time of the last memory effect.
double last_effect_s(const MemoryCurve& m) {
  return m.t_s.size() >= 2 ? m.t_s[m.t_s.size() - 2] : 0.0;
}

/// Memory over [0, t1_s] as a stacked area by category, with the capacity lines and the peak.
std::string memory_chart(const Result& r, const MemoryCurve& full, double t1_s, bool zoom, double H) {
  const TimeUnit tu = time_unit(t1_s);
  svg::Frame f;
  f.area = {kLeft, 46, kChartW - kLeft - kRight, H - 46 - 58};
  const double cap = static_cast<double>(r.capacity_bytes);
  double ymax = std::max({full.max_total, cap, static_cast<double>(r.peak_reserved_bytes)}) * 1.04 /
                static_cast<double>(kGiB);
  double ymin = 0;
  svg::nice_range(ymin, ymax, 8, false);
  f.x = {0, t1_s * tu.factor, f.area.x, f.area.right(), false};
  f.y = {0, ymax, f.area.bottom(), f.area.y, false};
  svg::Scale xs_s = f.x;  // the same scale over seconds, for bucketing
  xs_s.d1 = t1_s;
  const MemoryCurve m = downsample(clip(full, t1_s), xs_s, 1.0);

  svg::Canvas c(kChartW, H,
                zoom ? "Memory allocated while the CPU issues the step (zoomed), stacked by category"
                     : "Memory allocated on the busiest GPU over one step, stacked by category",
                zoom ? "chart memory-zoom" : "chart memory");
  std::vector<svg::LegendItem> items;
  for (int k = 0; k < kMemCategories; ++k)
    items.push_back(
        {to_string(static_cast<MemCategory>(k)), kCategoryColor[static_cast<std::size_t>(k)], {}});
  svg::legend(c, f.area.x, 10, f.area.w, items);

  svg::Axis ax{fmt::format("{}time in the step ({})", zoom ? "CPU issue " : "", tu.name),
               svg::nice_ticks(0, t1_s * tu.factor, 12),
               {},
               true};
  svg::Axis ay{"allocated memory (GiB)", svg::nice_ticks(0, ymax, 8), [](double v) { return num(v, 1); },
               true};
  svg::axes(c, f, ax, ay);

  std::vector<double> xs;
  xs.reserve(m.t_s.size());
  for (double t : m.t_s) xs.push_back(t * tu.factor);
  // A high point that a free at the same instant ends (a task's allocations and frees, the peak among them)
  // would be a zero-width spike: it is held for one pixel, so the area visibly reaches the peak.
  {
    const double px = (f.x.d1 - f.x.d0) / f.area.w;
    auto total = [](const std::array<double, kMemCategories>& a) {
      double t = 0;
      for (double v : a) t += v;
      return t;
    };
    for (std::size_t i = 0; i + 1 < xs.size(); ++i)
      if (xs[i + 1] - xs[i] < px && total(m.by_cat[i]) > total(m.by_cat[i + 1])) xs[i + 1] = xs[i] + px;
    for (std::size_t i = 1; i < xs.size(); ++i) xs[i] = std::max(xs[i], xs[i - 1]);
  }
  std::vector<svg::Series> series;
  for (int k = 0; k < kMemCategories; ++k) {
    svg::Series s{to_string(static_cast<MemCategory>(k)), kCategoryColor[static_cast<std::size_t>(k)], {}};
    s.ys.reserve(m.by_cat.size());
    for (const auto& a : m.by_cat)
      s.ys.push_back(std::max(0.0, a[static_cast<std::size_t>(k)]) / static_cast<double>(kGiB));
    series.push_back(std::move(s));
  }
  svg::stacked_area(c, f, xs, series);
  // What the chart draws against what the report says (the tests compare them).
  double drawn = 0;
  for (const auto& a : m.by_cat) {
    double t = 0;
    for (double v : a) t += std::max(0.0, v);
    drawn = std::max(drawn, t);
  }
  c.open_group(
      "memory-peak-data",
      fmt::format("data-drawn-peak-bytes=\"{:.0f}\" data-report-peak-bytes=\"{}\"", drawn, r.peak_bytes));
  c.close_group();

  const double g = static_cast<double>(kGiB);
  memory_reference_lines(c, f, r, cap);
  // The peak: where the engine found it (issue time of the peak task).
  if (r.peak_time_s <= t1_s) {
    const double px = f.x(r.peak_time_s * tu.factor), py = f.y(static_cast<double>(r.peak_bytes) / g);
    c.open_group("peak");
    c.line(px, py, px, f.area.bottom(), "peak-stem", "#1d2330");
    c.circle(px, py, 5.5, "#1d2330", "peak-marker",
             fmt::format("peak allocated {} at {} {} — {}", gib(static_cast<double>(r.peak_bytes)),
                         num(r.peak_time_s * tu.factor, 2), tu.name, r.peak_phase));
    const bool left = px > f.area.x + f.area.w * 0.62;
    c.text(px + (left ? -10 : 10), std::max(py - 10, f.area.y + 14),
           fmt::format("peak {} — {}", gib(static_cast<double>(r.peak_bytes)), r.peak_phase), "peak-label",
           left ? "end" : "start");
    c.close_group();
  }
  return c.str();
}

// ------------------------------------------------------------------------------------------- Gantt

/// The chart colour of a task, from what the lowering recorded (its type, communication kind and pass);
/// labels are display text only.
std::size_t task_kind(const Task& t) {
  if (t.type == TaskType::kOptimizer) return 6;
  if (t.type == TaskType::kCollective || t.comm_kind != 0xff) {
    switch (static_cast<CommKind>(t.comm_kind)) {
      case CommKind::kAllGather:
      case CommKind::kTpAllGather:
        return 2;
      case CommKind::kReduceScatter:
      case CommKind::kTpReduceScatter:
        return 3;
      case CommKind::kAllReduce:
        return 4;
      case CommKind::kOffloadCopy:
        return 5;
      case CommKind::kCpRing:
        return 2;
      case CommKind::kAllToAll:
        return 4;
      case CommKind::kOptimizerAllGather:
        return 2;
    }
    return 7;
  }
  if (t.type == TaskType::kCopy) return 5;
  if (t.type == TaskType::kCompute) return t.backward ? 1 : 0;
  return 7;
}

/// The exposed-communication lane: the intervals (axis units) at their true share of each pixel column, with
/// the drawn and the reported exposed time as data attributes and a label (what the tests compare).
void exposed_lane(svg::Canvas& c, const svg::Frame& f, double y, double h, const std::string& name,
                  const std::vector<std::pair<double, double>>& intervals, const TimeUnit& tu,
                  double report_s) {
  double total = 0;
  for (auto [a, b] : intervals) total += b - a;
  c.open_group(
      "gantt-exposed",
      fmt::format("data-lane=\"{}\" data-exposed-s=\"{:.9g}\" data-report-exposed-s=\"{:.9g}\" "
                  "data-px-per-s=\"{:.9g}\"",
                  escape(name), total / tu.factor, report_s, f.area.w / (f.x.d1 - f.x.d0) * tu.factor));
  c.text(f.area.x - 8, y + h / 2 + 4, name, "row-label", "end");
  c.rect(f.area.x, y, f.area.w, h, {}, "row-bg");
  svg::share_bars(c, f, y, h, intervals, "exposed",
                  fmt::format("exposed communication: {} {} of the step ({:.1f} %)", num(total, 3), tu.name,
                              f.x.d1 > 0 ? 100 * total / f.x.d1 : 0.0));
  c.close_group();
}

/// The allocated-memory curve on the GPU's time axis in a band [y0, y0 + h) under the Gantt lanes: a step
/// line through Timeline::gpu_samples (per pixel column its highest and its last value), 0 at the bottom, and
/// the reported peak marked at its task's kernel start, labelled with the phase.
void memory_band(svg::Canvas& c, const svg::Frame& f, const Result& r, const TimeUnit& tu, double y0,
                 double h) {
  const std::vector<MemSample>& mem = r.detail->timeline.gpu_samples;
  double top_bytes = static_cast<double>(r.peak_bytes);
  for (const MemSample& m : mem) top_bytes = std::max(top_bytes, static_cast<double>(m.allocated_bytes));
  top_bytes = std::max(top_bytes * 1.08, 1.0);
  auto y_of = [&](double b) { return y0 + h - h * b / top_bytes; };
  c.open_group("gantt-memory", "data-lane=\"allocated memory\"");
  c.rect(f.area.x, y0, f.area.w, h, {}, "row-bg");
  c.text(f.area.x - 8, y0 + h / 2 - 6, "allocated", "row-label", "end");
  c.text(f.area.x - 8, y0 + h / 2 + 9, fmt::format("0–{}", gib(top_bytes, 0)), "tick-label", "end");
  std::string d;
  double cur_px = -1, hi = 0, last = 0;
  auto flush = [&]() {
    if (cur_px < 0) return;
    d += fmt::format(" H{:.1f} V{:.1f} V{:.1f}", cur_px, y_of(hi), y_of(last));
  };
  for (const MemSample& m : mem) {
    const double px = std::round(f.x(m.time_s * tu.factor) * 2) / 2;
    const double b = static_cast<double>(m.allocated_bytes);
    if (cur_px < 0) {
      d = fmt::format("M{:.1f} {:.1f}", f.area.x, y_of(b));
      cur_px = px, hi = last = b;
    } else if (px != cur_px) {
      flush();
      cur_px = px, hi = last = b;
    } else {
      hi = std::max(hi, b), last = b;
    }
  }
  flush();
  if (!d.empty()) {
    d += fmt::format(" H{:.1f}", f.area.right());
    c.path(d, {}, "mem-gpu", "memory allocated by the framework, on the GPU's time axis");
  }
  const Timeline& tl = r.detail->timeline;
  if (tl.peak_task >= 0 && static_cast<std::size_t>(tl.peak_task) < tl.timing.size()) {
    const double px = f.x(tl.timing[static_cast<std::size_t>(tl.peak_task)].start_s * tu.factor);
    c.line(px, y0, px, y0 + h, "mem-peak");
    const bool left = px > f.area.x + f.area.w * 0.62;
    c.text(px + (left ? -6 : 6), y0 + 13,
           fmt::format("peak {} — {}", gib(static_cast<double>(r.peak_bytes)), r.peak_phase), "peak-label",
           left ? "end" : "start");
  }
  c.close_group();
}

std::string gantt_chart(const Result& r) {
  const Program& prog = r.detail->program;
  const Timeline& tl = r.detail->timeline;
  const double end_s = std::max({tl.end_s, r.step_s, 1e-9});
  const TimeUnit tu = time_unit(end_s);
  const int lanes = static_cast<int>(prog.lane_names.size());
  std::vector<char> lane_used(static_cast<std::size_t>(std::max(lanes, 1)), 0);
  lane_used[0] = 1;
  for (std::size_t i = 0; i < std::min(prog.tasks.size(), tl.timing.size()); ++i)
    if (prog.tasks[i].lane < lane_used.size() && tl.timing[i].end_s > tl.timing[i].start_s)
      lane_used[prog.tasks[i].lane] = 1;
  const int used_lanes = static_cast<int>(std::count(lane_used.begin(), lane_used.end(), 1));
  const double row_h = 30, gap = 10, top = 44;
  // Below the lanes, on the same time axis: memory allocated as the GPU runs (Timeline::gpu_samples).
  const std::vector<MemSample>& mem = tl.gpu_samples;
  const double mem_h = mem.empty() ? 0 : 110;
  const double rows_h = (used_lanes + 1) * (row_h + gap) + (mem_h > 0 ? mem_h + gap : 0);
  const double H = top + rows_h + 52;
  svg::Frame f;
  f.area = {kLeft, top, kChartW - kLeft - kRight, rows_h - gap};
  f.x = {0, end_s * tu.factor, f.area.x, f.area.right(), false};
  f.y = {0, 1, f.area.bottom(), f.area.y, false};

  // Spans per lane.
  std::vector<std::vector<svg::Span>> rows(static_cast<std::size_t>(std::max(lanes, 0)));
  std::array<bool, kKinds.size()> used{};
  const std::size_t n = std::min(prog.tasks.size(), tl.timing.size());
  for (std::size_t i = 0; i < n; ++i) {
    const Task& t = prog.tasks[i];
    const auto& tm = tl.timing[i];
    if (!(tm.end_s > tm.start_s) || t.lane >= rows.size()) continue;
    const std::string& label = t.label < prog.labels.size() ? prog.labels[t.label] : std::string();
    const std::size_t k = task_kind(t);
    used[k] = true;
    rows[t.lane].push_back({tm.start_s * tu.factor, tm.end_s * tu.factor, kKinds[k].color,
                            fmt::format("{}: {} {} from {} {}", label.empty() ? kKinds[k].name : label,
                                        num((tm.end_s - tm.start_s) * tu.factor, 3), tu.name,
                                        num(tm.start_s * tu.factor, 3), tu.name)});
  }
  // The simulator's own exposed intervals (a detail run keeps them): the chart draws what the report counts.
  const std::vector<std::pair<double, double>> exposed =
      r.exposed_intervals ? *r.exposed_intervals : std::vector<std::pair<double, double>>{};
  double exposed_total = 0;
  for (auto [a, b] : exposed) exposed_total += b - a;
  used[8] = !exposed.empty();

  // Draw; if the element budget is exceeded, merge at a coarser pixel width.
  for (double min_px = 1.5;; min_px *= 2) {
    svg::Canvas c(kChartW, H,
                  "Gantt chart of the step: compute and communication lanes, exposed communication in red",
                  "chart gantt");
    std::vector<svg::LegendItem> items;
    for (std::size_t k = 0; k < kKinds.size(); ++k)
      if (used[k]) items.push_back({kKinds[k].name, kKinds[k].color, {}});
    svg::legend(c, f.area.x, 10, f.area.w, items);
    svg::Axis ax{
        fmt::format("time in the step ({})", tu.name), svg::nice_ticks(0, end_s * tu.factor, 12), {}, true};
    svg::Axis ay{"", {}, {}, false};
    svg::axes(c, f, ax, ay);
    // Exposed communication at its true share of each pixel column (svg::share_bars): behind the rows as a
    // light band, and as its own lane. Drawn length = the simulator's exposed intervals = the report's.
    std::vector<std::pair<double, double>> ex_units;
    for (auto [a, b] : exposed) ex_units.push_back({a * tu.factor, b * tu.factor});
    c.open_group("exposed-bands");
    svg::share_bars(c, f, f.area.y, f.area.h, ex_units, "exposed-band", "exposed communication");
    c.close_group();
    int row = 0;
    for (int l = 0; l < lanes; ++l) {
      if (rows[static_cast<std::size_t>(l)].empty() && l != 0) continue;  // lanes this plan does not use
      const double y = top + row++ * (row_h + gap);
      svg::gantt_row(c, f, y, row_h,
                     prog.lane_names.size() > static_cast<std::size_t>(l)
                         ? prog.lane_names[static_cast<std::size_t>(l)]
                         : fmt::format("lane {}", l),
                     rows[static_cast<std::size_t>(l)], "gantt-row", min_px);
    }
    exposed_lane(c, f, top + row * (row_h + gap), row_h, "exposed comm", ex_units, tu, r.exposed_comm_s);
    if (mem_h > 0) memory_band(c, f, r, tu, top + (row + 1) * (row_h + gap), mem_h);
    c.text(
        f.area.right(), H - 8,
        fmt::format("exposed communication drawn: {} {} (report: {} {})", num(exposed_total * tu.factor, 2),
                    tu.name, num(r.exposed_comm_s * tu.factor, 2), tu.name),
        "tick-label", "end");
    if (c.elements() <= kHtmlMaxSvgElements || min_px > 64) return c.str();
  }
}

// ------------------------------------------------------------------------------------------- pipeline

/// A pipeline plan's whole step (PipelineSummary::spans): one lane per pipeline rank with each stage's
/// forward and backward micro-batches, the slowest rank's exposed communication at its true share (what
/// exposed_comm_s counts), and the busiest rank's allocated memory under the lanes, reaching its peak.

}  // namespace shardplan::html_detail

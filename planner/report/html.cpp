// HTML reports: one page per simulate / plan / validate run, with inline SVG charts drawn by svg.hpp and the
// tables of the text report. No scripts beyond an inert JSON block, nothing fetched from the network.
#include "planner/report/html.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "planner/report/evidence.hpp"
#include "planner/report/margin.hpp"
#include "planner/report/svg.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {
namespace {

using svg::escape;
using svg::num;

constexpr double kChartW = 1300;  // SVG user units; the page is laid out for a 1400 px wide window
constexpr double kLeft = 150, kRight = 30;

// Category colours (colour-blind-friendly Tableau 10), in MemCategory order.
constexpr std::array<const char*, kMemCategories> kCategoryColor = {
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#bab0ac"};

const char* kCss = R"css(
:root { --fg:#1d2330; --muted:#5b6472; --line:#d9dde3; --bg:#ffffff; --panel:#f6f7f9; --bad:#c62828; --good:#2e7d32; }
* { box-sizing: border-box; }
body { margin: 0 auto; padding: 18px 28px 40px; max-width: 1380px; color: var(--fg); background: var(--bg);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 22px; margin: 4px 0 2px; } h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
p.sub { color: var(--muted); margin: 0 0 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12px; } .card .v { font-size: 19px; font-weight: 600; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 10px; color: #fff; font-weight: 600; font-size: 13px; }
.badge.ok { background: var(--good); } .badge.bad { background: var(--bad); }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; } td.n, th.n { text-align: right; }
.cols { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
.swatch-inline { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
pre { background: var(--panel); border: 1px solid var(--line); padding: 8px; overflow: auto; max-height: 360px; font-size: 12px; }
figure { margin: 6px 0 14px; } figcaption { color: var(--muted); font-size: 12.5px; margin-top: 2px; }
svg.chart { width: 100%; height: auto; display: block; max-width: 1300px; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; fill: #1d2330; }
svg .tick-label { font-size: 12px; fill: #4a5260; } svg .axis-title { font-size: 13px; font-weight: 600; }
svg .grid { stroke: #e6e8ec; stroke-width: 1; } svg .tick, svg .domain { stroke: #555c66; stroke-width: 1; }
svg .row-label { font-size: 12.5px; } svg .legend-label { font-size: 12.5px; }
svg .row-bg { fill: #f3f4f6; } svg .swatch { stroke: rgba(0,0,0,.25); stroke-width: .5; }
svg .capacity .ref { stroke: #c62828; stroke-width: 2; } svg .capacity .ref-label { fill: #c62828; font-weight: 600; font-size: 12px; }
svg .usable .ref { stroke: #c62828; stroke-width: 1.2; stroke-dasharray: 6 4; } svg .usable .ref-label { fill: #c62828; font-size: 12px; }
svg .reserved .ref { stroke: #333; stroke-width: 1.2; stroke-dasharray: 2 3; } svg .reserved .ref-label { fill: #333; font-size: 12px; }
svg .peak-marker { stroke: #fff; stroke-width: 1.5; } svg .peak-label { font-size: 12.5px; font-weight: 600; }
svg .ref-label, svg .peak-label { paint-order: stroke; stroke: rgba(255,255,255,.85); stroke-width: 3px; stroke-linejoin: round; }
svg .mem-gpu { fill: none; stroke: #2a4d7a; stroke-width: 1.5; } svg .mem-peak { stroke: #c62828; stroke-width: 1.2; stroke-dasharray: 4 3; }
svg .exposed-band { fill: rgba(198,40,40,.13); } svg .gantt-exposed rect:not(.row-bg) { fill: #c62828; }
svg .identity { stroke: #333; stroke-width: 1.2; fill: none; } svg .band { fill: rgba(46,125,50,.12); stroke: none; }
svg .point { stroke: rgba(0,0,0,.55); stroke-width: .6; fill-opacity: .85; }
svg .point-label { font-size: 10.5px; fill: #4b5563; }
svg .bar-label { font-size: 12.5px; } svg .bar-value { font-size: 12px; } svg .mem-over { fill: #c62828; }
.note { color: var(--muted); font-size: 12.5px; }
@media print {
  body { max-width: none; padding: 0 6mm; font-size: 11px; }
  h2 { break-after: avoid; } section, figure, table { break-inside: avoid; }
  .card { padding: 4px 8px; } .noprint { display: none; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  pre { max-height: none; white-space: pre-wrap; }
}
)css";

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         "<title>" +
         escape(title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n" + body +
         "<p class=\"note\">Generated by shardplan. Self-contained: no network "
         "resources.</p>\n</body>\n</html>\n";
}

std::string gib(double bytes, int decimals = 2) {
  return fmt::format("{:.{}f} GiB", bytes / static_cast<double>(kGiB), decimals);
}

std::string card(const std::string& k, const std::string& v) {
  return "<div class=\"card\"><div class=\"k\">" + escape(k) + "</div><div class=\"v\">" + v + "</div></div>";
}

/// A JSON value as table text: strings bare, the rest as JSON.
std::string json_cell(const Json& v) {
  return escape(v.is_string() ? v.get<std::string>() : v.dump());
}

/// Embeds JSON in a non-executed script block (machine-readable copy of the report).
std::string json_block(const std::string& id, const Json& j) {
  std::string s = j.dump();
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<')
      out += "\\u003c";
    else
      out += s[i];
  }
  return "<script type=\"application/json\" id=\"" + escape(id) + "\">" + out + "</script>\n";
}

// Time axis in seconds or milliseconds, whichever reads better for the step.
struct TimeUnit {
  double factor;
  const char* name;
};
TimeUnit time_unit(double span_s) {
  return span_s < 2.0 ? TimeUnit{1e3, "ms"} : TimeUnit{1.0, "s"};
}
/// "1.307 s", "38 ms", "0.42 ms": a duration for text.
std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  const double ms = s * 1e3;
  return num(ms, ms >= 100 ? 0 : ms >= 10 ? 1 : 2) + " ms";
}

// ------------------------------------------------------------------------------------------- memory replay

/// Memory per category over the step, replayed from the program's effects in CPU issue order at issue time
/// (how torch.cuda.memory_allocated moves). A task that allocates then frees contributes its high point too.
struct MemoryCurve {
  std::vector<double> t_s;
  std::vector<std::array<double, kMemCategories>> by_cat;
  double max_total = 0;
};

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
  const double usable = cap - static_cast<double>(r.overhead.total());
  svg::hline(c, f, cap / g, "capacity", "GPU capacity " + gib(cap));
  svg::hline(c, f, usable / g, "usable",
             fmt::format("usable: capacity − CUDA context & NCCL ({}) = {}",
                         gib(static_cast<double>(r.overhead.total())), gib(usable)),
             true);
  if (r.peak_reserved_bytes > r.peak_bytes)
    svg::hline(c, f, static_cast<double>(r.peak_reserved_bytes) / g, "reserved",
               "peak reserved " + gib(static_cast<double>(r.peak_reserved_bytes)));
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

struct TaskKind {
  const char* name;
  const char* color;
};
constexpr std::array<TaskKind, 9> kKinds = {{{"forward", "#5b8fd0"},
                                             {"backward", "#2a4d7a"},
                                             {"all_gather", "#59a14f"},
                                             {"reduce_scatter", "#f28e2b"},
                                             {"all_reduce", "#b07aa1"},
                                             {"copy", "#9aa3ad"},
                                             {"optimizer", "#edc948"},
                                             {"other", "#7f7f7f"},
                                             {"exposed communication", "#c62828"}}};

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
    // The busiest rank's memory: each action's total while it runs, held between actions at the next one's
    // state without its working set, the optimizer's tail after the last.
    {
      const double y0 = top + lanes * (row_h + gap), h = mem_h;
      std::vector<const PipelineSpan*> mine;
      for (const PipelineSpan& sp : ps.spans)
        if (sp.rank == ps.busiest_rank) mine.push_back(&sp);
      double top_bytes =
          std::max({static_cast<double>(r.peak_bytes), static_cast<double>(ps.tail_bytes), 1.0});
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
      c.text(f.area.x - 8, y0 + h / 2 - 6, fmt::format("rank {} memory", ps.busiest_rank), "row-label",
             "end");
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
        d += fmt::format(" H{:.1f} V{:.1f} H{:.1f}", xt, y_of(static_cast<double>(ps.tail_bytes)),
                         f.area.right());
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
  const double usable = cap - static_cast<double>(r.overhead.total());
  svg::hline(c, f, cap / g, "capacity", "GPU capacity " + gib(cap));
  svg::hline(c, f, usable / g, "usable",
             fmt::format("usable: capacity − CUDA context & NCCL ({}) = {}",
                         gib(static_cast<double>(r.overhead.total())), gib(usable)),
             true);
  if (r.peak_reserved_bytes > r.peak_bytes)
    svg::hline(c, f, static_cast<double>(r.peak_reserved_bytes) / g, "reserved",
               "peak reserved " + gib(static_cast<double>(r.peak_reserved_bytes)));
  svg::hline(c, f, static_cast<double>(r.peak_bytes) / g, "peak",
             fmt::format("peak allocated {} — {}", gib(static_cast<double>(r.peak_bytes)), r.peak_phase),
             true);
  return c.str();
}

// ------------------------------------------------------------------------------------------- tables

std::string breakdown_table(const Result& r) {
  const double peak = std::max(1.0, static_cast<double>(r.peak_bytes));
  std::string s =
      "<table class=\"breakdown\"><tr><th>category</th><th class=\"n\">at the peak</th><th "
      "class=\"n\">bytes</th>"
      "<th class=\"n\">share</th></tr>\n";
  for (int c = 0; c < kMemCategories; ++c) {
    const double b = static_cast<double>(r.breakdown[static_cast<std::size_t>(c)]);
    s += fmt::format(
        "<tr><td><span class=\"swatch-inline\" style=\"background:{}\"></span>{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{:.1f} %</td></tr>\n",
        kCategoryColor[static_cast<std::size_t>(c)], to_string(static_cast<MemCategory>(c)), gib(b),
        static_cast<std::int64_t>(b), 100 * b / peak);
  }
  auto row = [&](const std::string& k, double b, const std::string& note) {
    s += fmt::format("<tr><th>{}</th><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
                     escape(k), gib(b), static_cast<std::int64_t>(b), escape(note));
  };
  row("peak allocated", static_cast<double>(r.peak_bytes), "max_memory_allocated");
  row("peak reserved", static_cast<double>(r.peak_reserved_bytes), "max_memory_reserved");
  row("runtime overhead", static_cast<double>(r.overhead.total()), "CUDA context + NCCL");
  row("total", static_cast<double>(r.peak_reserved_bytes + r.overhead.total()),
      fmt::format("of {} → {}", gib(static_cast<double>(r.capacity_bytes)),
                  r.fits ? "fits" : "does not fit"));
  row("persistent state", static_cast<double>(r.persistent_bytes),
      fmt::format("params {} + grads {} + optimizer {}", gib(static_cast<double>(r.persistent_split[0])),
                  gib(static_cast<double>(r.persistent_split[1])),
                  gib(static_cast<double>(r.persistent_split[2]))));
  return s + "</table>\n";
}

std::string comm_table(const Result& r) {
  std::string s =
      "<table class=\"comm\"><tr><th>collective</th><th class=\"n\">sent per rank</th><th "
      "class=\"n\">count</th>"
      "<th class=\"n\">time (s)</th><th class=\"n\">exposed (s)</th></tr>\n";
  for (int k = 0; k < kCommKinds; ++k) {
    const auto& c = r.comm[static_cast<std::size_t>(k)];
    if (c.count == 0 && c.bytes_per_rank <= 0) continue;
    s += fmt::format(
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4f}</td>"
        "<td class=\"n\">{:.4f}</td></tr>\n",
        to_string(static_cast<CommKind>(k)), gib(c.bytes_per_rank), c.count, c.time_s, c.exposed_s);
  }
  return s + "</table>\n";
}

std::string kv_table(const Json& obj, const std::string& cls) {
  std::string s = "<table class=\"" + escape(cls) + "\">";
  for (auto it = obj.begin(); it != obj.end(); ++it)
    s += "<tr><th>" + escape(it.key()) + "</th><td>" + json_cell(it.value()) + "</td></tr>";
  return s + "</table>\n";
}

std::string plan_short(const Plan& p) {
  const std::string pipe =
      p.pp > 1 ? fmt::format(" pp{} {} V{}", p.pp, to_string(p.pp_schedule), std::max(1, p.virtual_stages))
               : "";
  const std::string cp_ep =
      (p.cp > 1 ? fmt::format(" cp{}", p.cp) : std::string()) + (p.ep > 1 ? fmt::format(" ep{}", p.ep) : "");
  return fmt::format("{} zero{} shard{}{} tp{}{}{} mbs{}×{} ac={} wrap{} pf{}{}{}", to_string(p.runtime),
                     p.zero, p.shard_group, p.replicas > 1 ? fmt::format("×{}", p.replicas) : "", p.tp, pipe,
                     cp_ep, p.mbs, p.grad_accum, to_string(p.ac), p.wrap, p.prefetch,
                     p.reshard() ? "" : " no-reshard", p.reduce() == Dtype::kBf16 ? " rd=bf16" : "");
}

/// The sections shared by the simulate and plan reports: key numbers, memory, Gantt, tables, plan and inputs.
std::string step_sections(const Result& r, const ReportInputs& in, const std::string& heading) {
  const Json rep = report_json(r, in);
  std::string b;
  b += "<section class=\"summary\">";
  if (!heading.empty()) b += "<h2>" + escape(heading) + "</h2>";
  b += "<div class=\"cards\">";
  b += card("memory", r.fits ? "<span class=\"badge ok\">fits</span>"
                             : "<span class=\"badge bad\">does not fit</span>");
  b += card("peak reserved + overhead",
            escape(gib(static_cast<double>(r.peak_reserved_bytes + r.overhead.total()))) +
                " <span class=\"note\">of " + escape(gib(static_cast<double>(r.capacity_bytes), 0)) +
                "</span>");
  b += card("peak allocated", escape(gib(static_cast<double>(r.peak_bytes))));
  b += card("step", escape(seconds(r.step_s)));
  b += card("tokens/s per GPU", escape(fmt::format("{:.0f}", r.tokens_per_s_per_gpu)));
  b += card("MFU", escape(fmt::format("{:.1f} %", 100 * r.mfu)));
  b += card("exposed communication", escape(seconds(r.exposed_comm_s)));
  b += "</div>";
  b += "<p class=\"sub\">peak at: " + escape(r.peak_phase) + "</p></section>\n";
  const MemoryCurve curve = replay_memory(r.detail->program, r.detail->timeline);
  const double end_s = std::max({r.detail->timeline.end_s, r.step_s, 1e-9});
  const double issue_s = last_effect_s(curve);
  const std::string whole_caption =
      "Memory allocated by the framework on the busiest GPU (what torch.cuda.memory_allocated reports), "
      "replayed per "
      "category in CPU issue order at the time each kernel is issued, on the same time axis as the timeline "
      "above. "
      "The caching allocator's rounding shows as the reserved line; CUDA context and NCCL buffers as the gap "
      "between "
      "the usable and the capacity lines.";
  if (r.pipeline && !r.pipeline->spans.empty()) {
    const PipelineSummary& ps = *r.pipeline;
    b +=
        "<section><h2>Timeline of the whole step</h2><figure>" + pipeline_gantt(r) +
        fmt::format(
            "<figcaption>All {} pipeline ranks over the {} step ({} schedule, {} stages, {} micro-batches, "
            "bubble {:.1f} %): each stage's forward and backward of every micro-batch (hover for stage and "
            "micro-batch; bars narrower than a pixel are merged). Red: the exposed communication of rank {} "
            "(the slowest, whose step the report gives) at its true share of each pixel: the first forwards' "
            "waits on the parameter all-gathers, the tensor-parallel collectives of every action, the "
            "reductions that outlast the compute. Under the lanes: the allocated memory of rank {} (the "
            "busiest).</figcaption></figure></section>\n",
            ps.pp, seconds(r.step_s), to_string(ps.schedule), ps.stages, ps.micro_batches,
            100 * ps.bubble_fraction, ps.slowest_rank, ps.busiest_rank);
    b +=
        "<section><h2>Memory of the busiest pipeline rank</h2><figure>" + pipeline_memory_chart(r, 400) +
        "<figcaption>Allocated memory of the busiest pipeline rank while each action runs (held state, the "
        "unsharded gradients accumulated between a stage's first and last backward, the other micro-batches' "
        "saved activations, the running action's working set), then the optimizer's tail. Its top is the "
        "reported peak allocated memory; the reserved line adds the caching allocator's "
        "rounding.</figcaption>"
        "</figure></section>\n";
  } else {
    b += "<section><h2>Timeline</h2><figure>" + gantt_chart(r) +
         "<figcaption>Kernels per lane (CUDA stream / NCCL communicator). Red bands: a collective runs while "
         "the compute "
         "lane is idle (exposed communication). Tasks narrower than a pixel are merged; hover for "
         "details. Under the lanes: memory allocated by the framework as the GPU runs, each task's "
         "allocations and frees placed at its kernel's start (the charts below place them when the CPU "
         "issues the kernel), with the reported peak marked at its task.</figcaption>"
         "</figure></section>\n";
    b += "<section><h2>Memory as the CPU issues the step</h2>";
    if (issue_s > 0 && issue_s < 0.5 * end_s) {
      // The CPU runs ahead of the GPU: every allocation happens early. Show that window first, then the whole
      // step.
      double t1 = issue_s * 1.04, lo = 0;
      svg::nice_range(lo, t1, 12, false);
      t1 = std::min(t1, end_s);
      b += "<figure>" + memory_chart(r, curve, t1, true, 400) +
           fmt::format(
               "<figcaption>The first {} of the step: the CPU issues kernels ahead of the GPU, and with them "
               "every allocation and free of the step, so memory moves only in this window. Memory allocated "
               "by "
               "the framework on the busiest GPU (torch.cuda.memory_allocated), replayed per category in CPU "
               "issue order.</figcaption></figure>",
               escape(seconds(t1)));
      b += "<figure>" + memory_chart(r, curve, end_s, false, 300) + "<figcaption>" + whole_caption +
           "</figcaption></figure>";
    } else {
      b += "<figure>" + memory_chart(r, curve, end_s, false, 440) + "<figcaption>" + whole_caption +
           "</figcaption></figure>";
    }
    b += "</section>\n";
  }
  b += "<section class=\"cols\"><div><h2>Memory breakdown at the peak</h2>" + breakdown_table(r) + "</div>";
  b += "<div><h2>Communication</h2>" + comm_table(r) +
       fmt::format(
           "<p class=\"note\">step {:.4f} s = compute {:.4f} s + exposed communication {:.4f} s + other; "
           "optimizer "
           "{:.4f} s</p>",
           r.step_s, r.compute_s, r.exposed_comm_s, r.optimizer_s) +
       "</div></section>\n";
  Json inputs = rep["inputs"];
  Json model_spec = inputs["model"]["spec"];
  inputs["model"].erase("spec");
  Json flat_inputs = {{"model", inputs["model"]["name"]},
                      {"parameters", inputs["model"]["parameters"]},
                      {"cluster", inputs["cluster"]["name"]},
                      {"gpu", inputs["cluster"]["gpu"]},
                      {"gpu_memory_bytes", inputs["cluster"]["gpu_memory_bytes"]},
                      {"gpus_per_node", inputs["cluster"]["gpus_per_node"]},
                      {"gpus", inputs["gpus"]},
                      {"calibration", inputs["calibration"].is_null() ? Json("none (datasheet defaults)")
                                                                      : inputs["calibration"]}};
  b += "<section class=\"cols\"><div><h2>Effective plan</h2>" + kv_table(rep["plan"], "plan") + "</div>";
  b += "<div><h2>Inputs</h2>" + kv_table(flat_inputs, "inputs") + "<h2>Model</h2>" +
       kv_table(model_spec, "model") + "</div></section>\n";
  b += "<details class=\"noprint\"><summary>report JSON (shardplan.report/1)</summary><pre>" +
       escape(rep.dump(1)) + "</pre></details>\n";
  return b;
}

}  // namespace

std::string html_simulate_report(const Result& r, const ReportInputs& in) {
  std::string b;
  b += "<h1>" +
       escape(fmt::format("{} on {} × {}", in.model->spec().name, in.cluster->gpus(),
                          in.cluster->spec().gpu.model)) +
       "</h1>";
  b += "<p class=\"sub\">" +
       escape(fmt::format("{} · {} · simulated step with {}", in.cluster->spec().name, plan_short(r.plan),
                          in.calibration.empty() ? "datasheet defaults" : "calibration " + in.calibration)) +
       "</p>\n";
  if (r.detail) b += step_sections(r, in, "");
  b += json_block("shardplan-report", report_json(r, in));
  return page(fmt::format("shardplan simulate — {}", in.model->spec().name), b);
}

// ------------------------------------------------------------------------------------------- plan report

namespace {

std::string plans_chart(const SearchOutcome& o) {
  const std::size_t n = o.plans.size();
  const double row_h = 30, top = 40;
  const double H = top + static_cast<double>(n) * row_h + 56;
  const double label_w = 470, mem_x = 985, mem_w = 150, bind_x = 1190;
  svg::Canvas c(kChartW, H,
                "Top plans by tokens per second per GPU, with peak memory and the binding constraint",
                "chart plans");
  double tmax = 0;
  for (const auto& r : o.plans) tmax = std::max(tmax, r.tokens_per_s_per_gpu);
  double lo = 0, hi = std::max(tmax, 1.0);
  svg::nice_range(lo, hi, 6, false);
  svg::Frame f;
  f.area = {label_w, top, mem_x - 40 - label_w, static_cast<double>(n) * row_h};
  f.x = {0, hi, f.area.x, f.area.right(), false};
  f.y = {0, 1, f.area.bottom(), f.area.y, false};
  c.text(f.area.x, 22, "throughput", "axis-title");
  c.text(mem_x, 22, "memory of capacity", "axis-title");
  c.text(bind_x, 22, "binding", "axis-title");
  svg::axes(
      c, f,
      svg::Axis{"tokens/s per GPU", svg::nice_ticks(0, hi, 6), [](double v) { return num(v, 0); }, true},
      svg::Axis{"", {}, {}, false});
  for (std::size_t i = 0; i < n; ++i) {
    const Result& r = o.plans[i];
    const double y = top + static_cast<double>(i) * row_h;
    c.open_group("plan-bar", fmt::format("data-rank=\"{}\"", i + 1));
    c.text(label_w - 10, y + row_h / 2 + 4, fmt::format("#{} {}", i + 1, plan_short(r.plan)), "bar-label",
           "end");
    const double w = f.x(r.tokens_per_s_per_gpu) - f.area.x;
    c.rect(f.area.x, y + 5, w, row_h - 10, i == 0 ? "#2a4d7a" : "#5b8fd0", "bar",
           fmt::format("{:.0f} tokens/s/GPU, step {:.3f} s, MFU {:.1f} %", r.tokens_per_s_per_gpu, r.step_s,
                       100 * r.mfu));
    c.text(f.area.x + w + 6, y + row_h / 2 + 4, fmt::format("{:.0f}", r.tokens_per_s_per_gpu), "bar-value");
    const double used = static_cast<double>(r.peak_reserved_bytes + r.overhead.total());
    const double cap = std::max(1.0, static_cast<double>(r.capacity_bytes));
    c.rect(mem_x, y + 8, mem_w, row_h - 16, "#e6e8ec", "mem-bg");
    c.rect(mem_x, y + 8, mem_w * std::min(1.0, used / cap), row_h - 16, used > cap ? "#c62828" : "#59a14f",
           "mem", fmt::format("{} of {}", gib(used), gib(cap)));
    c.text(mem_x + mem_w + 6, y + row_h / 2 + 4, fmt::format("{:.0f}%", 100 * used / cap), "bar-value");
    c.text(bind_x, y + row_h / 2 + 4, binding_constraint(r), "bar-value");
    c.close_group();
  }
  return c.str();
}

/// Why the recommendation is not a Pareto point that beats it on both charted axes: such a point is within
/// the tie tolerance of the fastest plan (or choose_plan would have taken it), and the first tie rule
/// separating the two decided.
std::string pareto_note(const SearchOutcome& o, const Result& r) {
  const Result& rec = o.plans[0];
  if (!(r.tokens_per_s_per_gpu > rec.tokens_per_s_per_gpu && r.headroom_bytes() > rec.headroom_bytes()))
    return r.tokens_per_s_per_gpu > rec.tokens_per_s_per_gpu ? "faster than #1, less headroom"
                                                             : "more headroom than #1, slower";
  const TieKeys a = tie_keys(rec), b = tie_keys(r);
  const std::array<int, 4> ka = {a.memory_risk, a.parallel_dims, a.runtime_rank, a.non_default_knobs},
                           kb = {b.memory_risk, b.parallel_dims, b.runtime_rank, b.non_default_knobs};
  for (std::size_t i = 0; i < ka.size(); ++i)
    if (ka[i] != kb[i])
      return fmt::format(
          "faster and more headroom than #1, within the model's {:.1f} % error: a tie, which #1 "
          "wins by the rule \"{}\"",
          100 * o.tie_tolerance, tie_rule_names()[i]);
  return "faster and more headroom than #1, within the model's error; #1 has fewer network bytes per GPU";
}

/// The Pareto front of the search: memory headroom (x) against tokens/s per GPU (y), each point a plan no
/// fitting plan beats on tokens/s, headroom and network bytes per GPU together (the third axis in the
/// tooltip). The listed plans are marked #k over the front; every other point is labelled Pk and listed in
/// the table below the chart with why it is not the recommendation when it beats #1 on both axes.
std::string pareto_chart(const SearchOutcome& o, std::vector<const Result*>& labelled) {
  const double H = 380, left = 90, top = 30, right = 300, bottom = 60;
  svg::Canvas c(kChartW, H, "Pareto front: tokens per second per GPU against memory headroom",
                "chart pareto");
  auto hx = [](const Result& r) {
    return static_cast<double>(r.headroom_bytes()) / static_cast<double>(kGiB);
  };
  double xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  bool first = true;
  auto extend = [&](const Result& r) {
    if (first) xlo = xhi = hx(r), ylo = yhi = r.tokens_per_s_per_gpu, first = false;
    xlo = std::min(xlo, hx(r)), xhi = std::max(xhi, hx(r));
    ylo = std::min(ylo, r.tokens_per_s_per_gpu), yhi = std::max(yhi, r.tokens_per_s_per_gpu);
  };
  for (const auto& r : o.pareto) extend(r);
  for (const auto& r : o.plans) extend(r);
  xlo = std::min(0.0, xlo);
  if (yhi - ylo < 1) ylo -= 1, yhi += 1;
  svg::nice_range(xlo, xhi, 6, false);
  svg::nice_range(ylo, yhi, 6, false);
  svg::Frame f;
  f.area = {left, top, kChartW - left - right, H - top - bottom};
  f.x = {xlo, xhi, f.area.x, f.area.right(), false};
  f.y = {ylo, yhi, f.area.bottom(), f.area.y, false};
  svg::axes(
      c, f,
      svg::Axis{"memory headroom (GiB)", svg::nice_ticks(xlo, xhi, 6), [](double v) { return num(v, 1); },
                true},
      svg::Axis{"tokens/s per GPU", svg::nice_ticks(ylo, yhi, 6), [](double v) { return num(v, 0); }, true});
  auto tip = [](const Result& r, const std::string& what) {
    return fmt::format("{}: {}; {:.0f} tokens/s/GPU, {:.1f} GiB headroom, {:.2f} GB network per GPU per step",
                       what, plan_family(r.plan), r.tokens_per_s_per_gpu,
                       static_cast<double>(r.headroom_bytes()) / static_cast<double>(kGiB),
                       1e-9 * network_bytes_per_gpu(r));
  };
  labelled.clear();
  for (const auto& r : o.pareto) {
    const bool listed =
        std::any_of(o.plans.begin(), o.plans.end(), [&](const Result& p) { return p.plan == r.plan; });
    const double x = f.x(hx(r)), y = f.y(r.tokens_per_s_per_gpu);
    if (listed) {
      c.circle(x, y, 3.5, "#9aa3ad", "point", tip(r, "Pareto (listed)"));
      continue;
    }
    labelled.push_back(&r);
    const std::string name = fmt::format("P{}", labelled.size());
    c.open_group("pareto-point", fmt::format("data-label=\"{}\"", name));
    c.circle(x, y, 3.5, "#9aa3ad", "point", tip(r, name));
    c.text(x + 6, y + 12, name, "point-label");
    c.close_group();
  }
  for (std::size_t i = o.plans.size(); i-- > 0;) {
    const Result& r = o.plans[i];
    const double x = f.x(hx(r)), y = f.y(r.tokens_per_s_per_gpu);
    c.circle(x, y, i == 0 ? 8 : 5.5, i == 0 ? "#c62828" : "#4e79a7", i == 0 ? "recommended" : "alternative",
             tip(r, i == 0 ? "recommended" : fmt::format("#{}", i + 1)));
    c.text(x + 9, y - 6, fmt::format("#{}", i + 1), "bar-value");
  }
  const double lx = f.area.right() + 30;
  c.circle(lx, top + 10, 8, "#c62828", "legend");
  c.text(lx + 14, top + 14, "#1 recommended", "bar-value");
  c.circle(lx, top + 34, 5.5, "#4e79a7", "legend");
  c.text(lx + 14, top + 38, "#2+ listed plans (table)", "bar-value");
  c.circle(lx, top + 58, 3.5, "#9aa3ad", "legend");
  c.text(lx + 14, top + 62, fmt::format("Pareto front ({} plans)", o.pareto.size()), "bar-value");
  c.text(lx, top + 86, "Pk: a front plan not listed,", "bar-value");
  c.text(lx, top + 102, " described below the chart", "bar-value");
  return c.str();
}

/// The table of the Pareto points the chart labels Pk.
std::string pareto_table(const SearchOutcome& o, const std::vector<const Result*>& labelled) {
  if (labelled.empty()) return "";
  std::string b =
      "<table class=\"pareto\"><tr><th>point</th><th>plan</th><th class=\"n\">tokens/s/GPU</th><th "
      "class=\"n\">headroom</th><th class=\"n\">network per GPU</th><th>against #1</th></tr>\n";
  for (std::size_t i = 0; i < labelled.size(); ++i) {
    const Result& r = *labelled[i];
    b += fmt::format(
        "<tr><td>P{}</td><td>{}</td><td class=\"n\">{:.0f}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{:.2f} GB</td><td>{}</td></tr>\n",
        i + 1,
        escape(plan_short(r.plan) + (r.plan.compile ? " compile" : "") +
               (r.plan.async_tp ? " async-tp" : "")),
        r.tokens_per_s_per_gpu, gib(static_cast<double>(r.headroom_bytes())), 1e-9 * network_bytes_per_gpu(r),
        escape(pareto_note(o, r)));
  }
  return b + "</table>\n";
}

}  // namespace

std::string html_plan_report(const SearchOutcome& o, const ModelGraph& model, const Cluster& cluster) {
  std::string b;
  b += "<h1>" +
       escape(fmt::format("Plan search: {} on {} × {}", model.spec().name, cluster.gpus(),
                          cluster.spec().gpu.model)) +
       "</h1>";
  b += "<p class=\"sub\">" +
       escape(
           fmt::format("{} · {} candidates considered, {} simulated, {} fit (headroom {:.0f} %) in {:.2f} s",
                       cluster.spec().name, o.stats.considered, o.stats.evaluated, o.stats.fitting,
                       100 * o.headroom, o.stats.seconds)) +
       "</p>\n";
  if (!o.explanation.empty()) b += "<p style=\"white-space: pre-line\">" + escape(o.explanation) + "</p>\n";
  ReportInputs ri{&model, &cluster, ""};
  if (o.plans.empty()) {
    b += "<section><h2>No plan fits</h2>";
    if (o.closest)
      b += "<p>" +
           escape(fmt::format("Closest: {} — over by {}.", plan_short(o.closest->plan),
                              gib(static_cast<double>(o.closest_over_bytes)))) +
           "</p>";
    if (!o.binding_hint.empty()) b += "<p>" + escape("What would help most: " + o.binding_hint) + "</p>";
    b += "</section>\n";
  } else {
    b += "<section><h2>Recommendation and alternatives</h2><figure>" + plans_chart(o) +
         "<figcaption>Bars: predicted tokens/s per GPU (#1 is the recommendation; then the fastest plan "
         "when the tie rules chose another; then the fastest plan of each other family: runtime × TP × PP × "
         "CP × EP × AC × HSDP). Beside: peak reserved memory plus "
         "runtime overhead as a share of GPU memory, and the constraint that binds the "
         "plan.</figcaption></figure>";
    if (!o.pareto.empty()) {
      std::vector<const Result*> labelled;
      const std::string chart = pareto_chart(o, labelled);  // fills `labelled` for the table below
      b += "<figure>" + chart +
           "<figcaption>Pareto front of the fitting plans over tokens/s per GPU, memory headroom and network "
           "bytes per GPU per step (grey); the listed plans (#k, the table above). Every other front plan is "
           "labelled Pk and described below, with why it is not the recommendation where it beats #1 on both "
           "axes (the third axis, network bytes, or a tie within the model's throughput error decided by the "
           "tie rules).</figcaption></figure>" +
           pareto_table(o, labelled);
    }
    b += "<table class=\"plans\"><tr><th>#</th><th>plan</th><th class=\"n\">tokens/s/GPU</th><th "
         "class=\"n\">step (s)</th>"
         "<th class=\"n\">vs fastest</th><th class=\"n\">MFU</th><th class=\"n\">peak + "
         "overhead</th><th>binding</th></tr>\n";
    for (std::size_t i = 0; i < o.plans.size(); ++i) {
      const Result& r = o.plans[i];
      const std::string vs = i >= o.alternatives.size() ? std::string("—")
                             : o.alternatives[i].delta_fastest == 0
                                 ? std::string("fastest")
                                 : fmt::format("{:+.1f} % ({})", 100 * o.alternatives[i].delta_fastest,
                                               o.alternatives[i].within_error ? "a tie" : "beyond error");
      b += fmt::format(
          "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.0f}</td><td class=\"n\">{:.4f}</td>"
          "<td class=\"n\">{}</td><td class=\"n\">{:.1f} %</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
          i + 1,
          escape(plan_short(r.plan) + (r.plan.compile ? " compile" : "") +
                 (r.plan.async_tp ? " async-tp" : "") +
                 (r.plan.fp8 != Fp8::kNone ? std::string(" fp8=") + to_string(r.plan.fp8) : "") +
                 (r.plan.cp > 1 ? " cp" + std::to_string(r.plan.cp) : "") +
                 (r.plan.ep > 1 ? " ep" + std::to_string(r.plan.ep) : "")),
          r.tokens_per_s_per_gpu, r.step_s, escape(vs), 100 * r.mfu,
          gib(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
          escape(binding_constraint(r)));
    }
    b += "</table></section>\n";
  }
  if (!o.stats.rejections.count.empty()) {
    b += "<section><h2>Rejected candidates</h2><table class=\"rejections\"><tr><th>reason</th><th "
         "class=\"n\">count</th>"
         "<th>example</th></tr>";
    for (const auto& [reason, count] : o.stats.rejections.count) {
      auto ex = o.stats.rejections.example.find(reason);
      b += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>", escape(to_string(reason)),
                       count, escape(ex == o.stats.rejections.example.end() ? "" : ex->second));
    }
    b += "</table></section>\n";
  }
  if (!o.plans.empty()) {
    const Result& r = o.plans[0];  // the search keeps the recommended plan's detail run
    if (r.detail) b += step_sections(r, ri, "Recommended plan: " + plan_short(r.plan));
    Json doc = {{"schema", "shardplan.report/1"}, {"plans", Json::array()}};
    for (const auto& p : o.plans) doc["plans"].push_back(report_json(p, ri));
    b += json_block("shardplan-plans", doc);
  }
  return page(fmt::format("shardplan plan — {}", model.spec().name), b);
}

// ------------------------------------------------------------------------------------------- compare

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

namespace {

struct TermUnit {
  double scale;
  std::string unit;
};
TermUnit term_unit(const std::string& term) {
  if (term.size() > 6 && term.compare(term.size() - 6, 6, "_bytes") == 0)
    return {1.0 / static_cast<double>(kGiB), "GiB"};
  if (term == "step_s") return {1.0, "s"};
  if (term == "tokens_per_s_per_gpu") return {1.0, "tokens/s/GPU"};
  if (term == "mfu") return {100.0, "%"};
  return {1.0, ""};
}

/// About three significant digits, no more decimals than that needs.
std::string readable(double v) {
  const double a = std::abs(v);
  return num(v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

constexpr std::array<const char*, 8> kSourceColor = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                                     "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};

/// A short source name: the part before the first ';' (e.g. "mosaicml/llm-foundry").
std::string source_key(const std::string& s) {
  std::string k = s.substr(0, s.find(';'));
  if (k.size() > 48) k = k.substr(0, 45) + "...";
  return k.empty() ? "unknown" : k;
}

std::string scatter(const std::string& term, const std::vector<const ValidationRow*>& rows,
                    const std::map<std::string, std::size_t>& source_idx) {
  const TermUnit u = term_unit(term);
  double lo = 1e300, hi = -1e300;
  for (const auto* r : rows)
    for (double v : {r->predicted * u.scale, r->measured * u.scale})
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(hi > 0)) lo = 0.1, hi = 1;
  const bool log = hi / lo > 20;
  double d0 = log ? lo / 1.15 : 0, d1 = hi * 1.1;
  svg::nice_range(d0, d1, 6, log);
  const double W = 640, H = 470;
  svg::Frame f;
  f.area = {84, 30, W - 84 - 24, H - 30 - 62};
  f.x = {d0, d1, f.area.x, f.area.right(), log};
  f.y = {d0, d1, f.area.bottom(), f.area.y, log};
  svg::Canvas c(W, H, "Predicted vs measured: " + term, "chart scatter");
  c.text(f.area.x, 18, fmt::format("{}{}", term, log ? " (log-log)" : ""), "axis-title");
  auto lab = [log](double v) { return log ? num(v, v < 1 ? 3 : v < 10 ? 1 : 0) : num(v, 2); };
  const std::string unit = u.unit.empty() ? "" : " (" + u.unit + ")";
  svg::axes(
      c, f,
      svg::Axis{"measured" + unit, log ? svg::log_ticks(d0, d1) : svg::nice_ticks(d0, d1, 6), lab, true},
      svg::Axis{"predicted" + unit, log ? svg::log_ticks(d0, d1) : svg::nice_ticks(d0, d1, 6), lab, true});
  // ±10 % band and y = x, sampled so they are right on either scale.
  std::string band, upper, lower;
  const int k = 48;
  std::vector<double> xs, ys;
  for (int i = 0; i <= k; ++i) {
    const double t = static_cast<double>(i) / k;
    const double x = log ? d0 * std::pow(d1 / d0, t) : d0 + (d1 - d0) * t;
    xs.push_back(x);
    ys.push_back(x);
    upper += fmt::format("{}{} {}", i == 0 ? 'M' : 'L', num(f.x(x)),
                         num(std::max(f.area.y, f.y(std::min(x * 1.1, d1)))));
  }
  for (int i = k; i >= 0; --i) {
    const double x = xs[static_cast<std::size_t>(i)];
    lower += fmt::format("L{} {}", num(f.x(x)), num(f.y(std::max(x * 0.9, d0))));
  }
  c.path(upper + lower + "Z", {}, "band", "±10 % of measured");
  svg::polyline(c, f, xs, ys, "identity");
  c.text(f.area.x + 8, f.area.y + 14, "line: predicted = measured; band: ±10 %", "tick-label");
  c.open_group("points");
  for (const auto* r : rows) {
    const double x = r->measured * u.scale, y = r->predicted * u.scale;
    if (!(x > 0) || !(y > 0) || !std::isfinite(x) || !std::isfinite(y)) continue;
    const auto it = source_idx.find(source_key(r->source));
    const std::size_t si =
        it == source_idx.end() ? kSourceColor.size() - 1 : std::min(it->second, kSourceColor.size() - 1);
    const double cx = std::clamp(f.x(x), f.area.x, f.area.right()),
                 cy = std::clamp(f.y(y), f.area.y, f.area.bottom());
    c.circle(cx, cy, 4.2, kSourceColor[si], "point",
             fmt::format("{}: predicted {} measured {} {} ({:+.1f} %)", r->id, readable(y), readable(x),
                         u.unit, 100 * r->rel_error()));
  }
  c.close_group();
  return c.str();
}

}  // namespace

std::string html_validate_report(const ValidationReport& v) {
  std::string b;
  b += "<h1>Validation: predicted vs measured</h1>";
  b += "<p class=\"sub\">" +
       escape(fmt::format("{} comparisons, {} record{} skipped", v.rows.size(), v.skipped.size(),
                          v.skipped.size() == 1 ? "" : "s")) +
       "</p>\n";
  const auto summary = v.summary();
  b +=
      "<section><h2>Summary per term</h2><table class=\"summary\"><tr><th>term</th><th class=\"n\">n</th>"
      "<th class=\"n\">median |error|</th><th class=\"n\">MAPE</th><th class=\"n\">worst |error|</th></tr>\n";
  for (const auto& s : summary)
    b += fmt::format(
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1f} %</td><td class=\"n\">{:.1f} %</td>"
        "<td class=\"n\">{:.1f} %</td></tr>\n",
        escape(s.term), s.n, 100 * s.median_abs, 100 * s.mape, 100 * s.worst_abs);
  b += "</table></section>\n";

  // Sources get stable colours by first appearance; more than the palette share the last colour.
  std::map<std::string, std::size_t> source_idx;
  std::vector<std::string> sources;
  for (const auto& r : v.rows) {
    const std::string k = source_key(r.source);
    if (source_idx.emplace(k, sources.size()).second) sources.push_back(k);
  }
  std::vector<std::string> terms;
  std::map<std::string, std::vector<const ValidationRow*>> by_term;
  for (const auto& r : v.rows) {
    if (by_term[r.term].empty()) terms.push_back(r.term);
    by_term[r.term].push_back(&r);
  }
  if (!terms.empty()) {
    b += "<section><h2>Predicted vs measured</h2><p class=\"sub\">Each point is one run; colour = source. ";
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (i + 1 == kSourceColor.size() && sources.size() > kSourceColor.size()) {
        b += fmt::format("<span class=\"swatch-inline\" style=\"background:{}\"></span>{} other sources ",
                         kSourceColor.back(), sources.size() - i);
        break;
      }
      b += fmt::format("<span class=\"swatch-inline\" style=\"background:{}\"></span>{} &nbsp;",
                       kSourceColor[i], escape(sources[i]));
    }
    b += "</p><div class=\"cols\">";
    for (const auto& t : terms)
      b += "<figure class=\"scatter\" style=\"width:640px\">" + scatter(t, by_term[t], source_idx) +
           "</figure>";
    b += "</div></section>\n";
  }
  b += "<section><h2>All comparisons</h2><table class=\"rows\"><tr><th>id</th><th>term</th><th "
       "class=\"n\">predicted</th>"
       "<th class=\"n\">measured</th><th class=\"n\">error</th></tr>\n";
  for (const auto& r : v.rows) {
    const TermUnit u = term_unit(r.term);
    b += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"n\">{} {}</td><td class=\"n\">{} {}</td><td "
        "class=\"n\">{:+.1f} %</td></tr>\n",
        escape(r.id), escape(r.term), readable(r.predicted * u.scale), escape(u.unit),
        readable(r.measured * u.scale), escape(u.unit), 100 * r.rel_error());
  }
  b += "</table></section>\n";
  if (!v.skipped.empty()) {
    b += "<section><h2>Skipped records</h2><table class=\"skipped\"><tr><th>id</th><th>reason</th></tr>";
    for (const auto& s : v.skipped)
      b += "<tr><td>" + escape(s.id) + "</td><td>" + escape(s.reason) + "</td></tr>";
    b += "</table></section>\n";
  }
  return page("shardplan validate", b);
}

}  // namespace shardplan

// HTML reports: `shardplan validate`, predicted against measured per term.
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

// The SVG writer behind the HTML reports: escaping, scales and ticks, and the chart primitives.
#include "planner/report/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace shardplan::svg {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string num(double v, int decimals) {
  if (!std::isfinite(v)) return "0";
  std::string s = fmt::format("{:.{}f}", v, std::max(0, decimals));
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

double Scale::operator()(double v) const {
  double a = d0, b = d1, x = v;
  if (log) {
    a = std::log10(std::max(a, 1e-300));
    b = std::log10(std::max(b, 1e-300));
    x = std::log10(std::max(x, 1e-300));
  }
  if (b == a) return (r0 + r1) / 2;
  return r0 + (x - a) / (b - a) * (r1 - r0);
}

double nice_step(double span, int target) {
  if (!(span > 0) || !std::isfinite(span)) return 1;
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double m = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
  return m * mag;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> t;
  if (!(hi > lo)) {
    t.push_back(lo);
    return t;
  }
  const double step = nice_step(hi - lo, target);
  const double eps = step * 1e-9;
  for (double k = std::ceil((lo - eps) / step); k * step <= hi + eps && t.size() < 200; k += 1) {
    double v = k * step;
    if (std::abs(v) < eps) v = 0;
    t.push_back(v);
  }
  return t;
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  if (!(lo > 0) || !(hi > lo)) {
    t.push_back(lo > 0 ? lo : 1);
    return t;
  }
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  const bool fine = e1 - e0 <= 2;
  for (int e = e0; e <= e1; ++e) {
    const double p = std::pow(10.0, e);
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double v = m * p;
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
    }
  }
  return t;
}

void nice_range(double& lo, double& hi, int target, bool log) {
  if (log) {
    if (!(lo > 0)) lo = 1;
    if (!(hi > lo)) hi = lo * 10;
    lo = std::pow(10.0, std::floor(std::log10(lo) + 1e-9));
    hi = std::pow(10.0, std::ceil(std::log10(hi) - 1e-9));
    return;
  }
  if (!(hi > lo)) hi = lo + 1;
  const double step = nice_step(hi - lo, target);
  lo = std::floor(lo / step + 1e-9) * step;
  hi = std::ceil(hi / step - 1e-9) * step;
}

// ---------------------------------------------------------------------------------------------- Canvas

Canvas::Canvas(double width, double height, std::string title, std::string css_class)
    : w_(width), h_(height), title_(std::move(title)), cls_(std::move(css_class)) {}

void Canvas::open_group(std::string_view cls, std::string_view attrs) {
  body_ += fmt::format("<g class=\"{}\"{}{}>", escape(cls), attrs.empty() ? "" : " ", attrs);
  ++depth_;
  ++elements_;
}

void Canvas::close_group() {
  if (depth_ == 0) return;
  body_ += "</g>\n";
  --depth_;
}

void Canvas::tooltip_close(std::string_view tag, std::string_view tooltip) {
  if (tooltip.empty()) {
    body_ += "/>";
  } else {
    body_ += "><title>" + escape(tooltip) + "</title></" + std::string(tag) + ">";
    ++elements_;
  }
}

static std::string attr(std::string_view name, std::string_view value) {
  return value.empty() ? std::string() : fmt::format(" {}=\"{}\"", name, escape(value));
}

void Canvas::rect(double x, double y, double w, double h, std::string_view fill, std::string_view cls,
                  std::string_view tooltip) {
  body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"{}{}", num(x), num(y),
                       num(std::max(0.0, w)), num(std::max(0.0, h)), attr("fill", fill), attr("class", cls));
  tooltip_close("rect", tooltip);
  ++elements_;
}

void Canvas::line(double x1, double y1, double x2, double y2, std::string_view cls, std::string_view stroke) {
  body_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"{}{}/>", num(x1), num(y1), num(x2),
                       num(y2), attr("class", cls), attr("stroke", stroke));
  ++elements_;
}

void Canvas::text(double x, double y, std::string_view content, std::string_view cls, std::string_view anchor,
                  std::string_view attrs) {
  body_ += fmt::format("<text x=\"{}\" y=\"{}\"{}{}{}{}>{}</text>", num(x), num(y), attr("class", cls),
                       anchor == "start" ? std::string() : attr("text-anchor", anchor),
                       attrs.empty() ? "" : " ", attrs, escape(content));
  ++elements_;
}

void Canvas::path(std::string_view d, std::string_view fill, std::string_view cls, std::string_view tooltip,
                  std::string_view attrs) {
  body_ += fmt::format("<path d=\"{}\"{}{}{}{}", d, attr("fill", fill), attr("class", cls),
                       attrs.empty() ? "" : " ", attrs);
  tooltip_close("path", tooltip);
  ++elements_;
}

void Canvas::circle(double cx, double cy, double r, std::string_view fill, std::string_view cls,
                    std::string_view tooltip) {
  body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\"{}{}", num(cx), num(cy), num(r),
                       attr("fill", fill), attr("class", cls));
  tooltip_close("circle", tooltip);
  ++elements_;
}

void Canvas::raw(std::string_view markup) {
  body_ += markup;
  ++elements_;
}

std::string Canvas::str() const {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"{}\" viewBox=\"0 0 {} {}\" width=\"{}\" "
      "height=\"{}\" "
      "role=\"img\" aria-label=\"{}\" preserveAspectRatio=\"xMinYMin meet\">\n<title>{}</title>\n",
      escape(cls_), num(w_), num(h_), num(w_), num(h_), escape(title_), escape(title_));
  s += body_;
  for (int i = 0; i < depth_; ++i) s += "</g>";
  s += "</svg>\n";
  return s;
}

// ---------------------------------------------------------------------------------------------- charts

void axes(Canvas& c, const Frame& f, const Axis& x, const Axis& y) {
  const Box& b = f.area;
  auto lab = [](const Axis& a, double v) { return a.label ? a.label(v) : num(v, 2); };
  c.open_group("axis x");
  for (double v : x.ticks) {
    const double px = f.x(v);
    if (px < b.x - 0.5 || px > b.right() + 0.5) continue;
    if (x.grid) c.line(px, b.y, px, b.bottom(), "grid");
    c.line(px, b.bottom(), px, b.bottom() + 5, "tick");
    c.text(px, b.bottom() + 19, lab(x, v), "tick-label", "middle");
  }
  c.line(b.x, b.bottom(), b.right(), b.bottom(), "domain");
  c.text(b.x + b.w / 2, b.bottom() + 40, x.title, "axis-title", "middle");
  c.close_group();
  c.open_group("axis y");
  for (double v : y.ticks) {
    const double py = f.y(v);
    if (py < b.y - 0.5 || py > b.bottom() + 0.5) continue;
    if (y.grid) c.line(b.x, py, b.right(), py, "grid");
    c.line(b.x - 5, py, b.x, py, "tick");
    c.text(b.x - 8, py + 4, lab(y, v), "tick-label", "end");
  }
  c.line(b.x, b.y, b.x, b.bottom(), "domain");
  const double tx = b.x - 56, ty = b.y + b.h / 2;
  c.text(tx, ty, y.title, "axis-title", "middle",
         fmt::format("transform=\"rotate(-90 {} {})\"", num(tx), num(ty)));
  c.close_group();
}

void stacked_area(Canvas& c, const Frame& f, const std::vector<double>& xs,
                  const std::vector<Series>& series) {
  const std::size_t n = xs.size();
  std::vector<std::vector<double>> top(series.size(), std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i) {
    double acc = 0;
    for (std::size_t s = 0; s < series.size(); ++s) {
      acc += i < series[s].ys.size() ? series[s].ys[i] : 0.0;
      top[s][i] = acc;
    }
  }
  const double y0 = f.y(0 > f.y.d0 ? 0 : f.y.d0);
  const double x_end = f.area.right();
  c.open_group("stack");
  // Paint from the top of the stack down: each series fills from the baseline to its cumulative top, the
  // series below paints over it. Half the path data of upper/lower outlines, and no slivers between series.
  for (std::size_t k = series.size(); k-- > 0;) {
    std::string d;
    d.reserve(n * 16 + 32);
    if (n > 0) {
      d += fmt::format("M{} {}", num(f.x(xs[0])), num(y0));
      double prev_y = std::numeric_limits<double>::quiet_NaN();
      for (std::size_t i = 0; i < n; ++i) {
        const double px = f.x(xs[i]);
        const double py = f.y(top[k][i]);
        if (py == prev_y) continue;
        d += fmt::format("H{}V{}", num(px), num(py));
        prev_y = py;
      }
      d += fmt::format("H{}V{}Z", num(x_end), num(y0));
    }
    // A stroke in the fill colour keeps zero-width spikes (allocate-then-free within one task) visible.
    c.path(d, series[k].color, "series", series[k].name,
           fmt::format("data-series=\"{}\" stroke=\"{}\" stroke-width=\"1\"", escape(series[k].name),
                       escape(series[k].color)));
  }
  c.close_group();
}

void hline(Canvas& c, const Frame& f, double y, std::string_view cls, std::string_view label,
           bool label_below) {
  const double py = f.y(y);
  c.open_group(cls);
  c.line(f.area.x, py, f.area.right(), py, "ref");
  if (!label.empty()) c.text(f.area.right() - 4, label_below ? py + 15 : py - 5, label, "ref-label", "end");
  c.close_group();
}

void polyline(Canvas& c, const Frame& f, const std::vector<double>& xs, const std::vector<double>& ys,
              std::string_view cls, std::string_view stroke) {
  std::string d;
  for (std::size_t i = 0; i < std::min(xs.size(), ys.size()); ++i)
    d += fmt::format("{}{} {}", i == 0 ? 'M' : 'L', num(f.x(xs[i])), num(f.y(ys[i])));
  c.path(d, "none", cls, {}, stroke.empty() ? std::string() : "stroke=\"" + escape(stroke) + "\"");
}

std::size_t gantt_row(Canvas& c, const Frame& f, double y, double h, std::string_view name,
                      std::vector<Span> spans, std::string_view row_cls, double min_px) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.a < b.a; });
  c.open_group(row_cls, "data-lane=\"" + escape(name) + "\"");
  c.text(f.area.x - 8, y + h / 2 + 4, name, "row-label", "end");
  c.rect(f.area.x, y, f.area.w, h, {}, "row-bg");
  std::size_t drawn = 0;
  struct Cur {
    double a, b, longest;
    std::size_t count;
    const Span* lead;
  };
  std::optional<Cur> cur;
  auto flush = [&] {
    if (!cur) return;
    const double x0 = f.x(cur->a), x1 = f.x(cur->b);
    const std::string tip =
        cur->count == 1 ? cur->lead->tooltip
                        : fmt::format("{} tasks merged (largest: {})", cur->count, cur->lead->tooltip);
    c.rect(x0, y, std::max(x1 - x0, 0.6), h, cur->lead->color, {}, tip);
    ++drawn;
    cur.reset();
  };
  const double gap_px = 0.5;
  for (const Span& s : spans) {
    if (!(s.b > s.a)) continue;
    if (cur) {
      const double cur_px = f.x(cur->b) - f.x(cur->a);
      const bool touching = f.x(s.a) - f.x(cur->b) < gap_px;
      if (touching && cur_px < min_px) {
        cur->b = std::max(cur->b, s.b);
        ++cur->count;
        if (s.b - s.a > cur->longest) cur->longest = s.b - s.a, cur->lead = &s;
        continue;
      }
      flush();
    }
    cur = Cur{s.a, s.b, s.b - s.a, 1, &s};
  }
  flush();
  c.close_group();
  return drawn;
}

double share_bars(Canvas& c, const Frame& f, double y, double h,
                  const std::vector<std::pair<double, double>>& intervals, std::string_view cls,
                  std::string_view tooltip) {
  const auto cols = static_cast<std::size_t>(std::max(1.0, std::ceil(f.area.w)));
  std::vector<double> cover(cols, 0.0);  // pixels of each column covered
  for (auto [a, b] : intervals) {
    double x0 = std::clamp(f.x(a) - f.area.x, 0.0, static_cast<double>(cols));
    const double x1 = std::clamp(f.x(b) - f.area.x, 0.0, static_cast<double>(cols));
    while (x0 < x1) {
      const auto col = std::min(cols - 1, static_cast<std::size_t>(std::floor(x0)));
      const double edge = std::min(x1, static_cast<double>(col + 1));
      cover[col] += edge - x0;
      x0 = edge;
    }
  }
  double covered_px = 0;
  std::size_t run = 0, run_start = 0;  // a run of fully covered columns
  // Widths to 1/1000 px (Canvas::rect rounds to 0.1 px, which would drop the sub-pixel bars this draws).
  const std::string tip = tooltip.empty() ? "" : "<title>" + escape(tooltip) + "</title>";
  auto bar = [&](double x, double w) {
    c.raw(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"{}\">{}</rect>", num(x, 3),
                      num(y), num(w, 3), num(h), escape(cls), tip));
  };
  auto flush = [&] {
    if (run) bar(f.area.x + static_cast<double>(run_start), static_cast<double>(run));
    run = 0;
  };
  for (std::size_t col = 0; col < cols; ++col) {
    const double w = std::min(1.0, cover[col]);
    covered_px += w;
    if (w >= 1.0 - 1e-9) {
      if (!run) run_start = col;
      ++run;
      continue;
    }
    flush();
    if (w > 0) bar(f.area.x + static_cast<double>(col), w);
  }
  flush();
  const double px_per_unit = f.area.w / (f.x.d1 - f.x.d0);
  return px_per_unit > 0 ? covered_px / px_per_unit : 0.0;
}

double legend(Canvas& c, double x, double y, double max_w, const std::vector<LegendItem>& items) {
  c.open_group("legend");
  double cx = x, cy = y;
  const double row_h = 20;
  for (const auto& it : items) {
    const double w = 22 + 7.2 * static_cast<double>(it.name.size()) + 18;
    if (cx > x && cx + w > x + max_w) cx = x, cy += row_h;
    c.rect(cx, cy, 14, 14, it.color, it.cls.empty() ? "swatch" : "swatch " + it.cls);
    c.text(cx + 20, cy + 11.5, it.name, "legend-label");
    cx += w;
  }
  c.close_group();
  return cy - y + row_h;
}

}  // namespace shardplan::svg

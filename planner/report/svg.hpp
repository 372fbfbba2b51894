// A small SVG writer for the HTML reports: a canvas of escaped elements, linear and log scales with readable
// ticks, and the chart pieces the reports draw (axes, stacked areas, bars, Gantt rows, lines, legends).
// Coordinates are SVG user units (CSS pixels at 100 % zoom); the charts scale with their container.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::svg {

/// Escapes text for XML element content and attribute values (& < > " ').
std::string escape(std::string_view text);
/// A compact number for coordinates and labels: at most `decimals` decimals, trailing zeros dropped.
std::string num(double v, int decimals = 1);

/// Maps a data interval onto a pixel interval; `log` maps log10 of the value (values must be > 0).
struct Scale {
  double d0 = 0, d1 = 1;
  double r0 = 0, r1 = 1;
  bool log = false;
  double operator()(double v) const;
};

/// About `target` ticks at 1-2-5 multiples covering [lo, hi] (inclusive of values within rounding).
std::vector<double> nice_ticks(double lo, double hi, int target);
/// The 1-2-5 step nice_ticks uses.
double nice_step(double span, int target);
/// Ticks for a log axis: decades, with 2 and 5 in between when the range spans few decades.
std::vector<double> log_ticks(double lo, double hi);
/// Rounds [lo, hi] outward to the ticks of nice_ticks (or to decades when `log`).
void nice_range(double& lo, double& hi, int target, bool log);

struct Box {
  double x = 0, y = 0, w = 0, h = 0;
  double right() const { return x + w; }
  double bottom() const { return y + h; }
};

/// A plot area and its scales.
struct Frame {
  Box area;
  Scale x, y;
};

/// One axis: its title (with the unit), ticks in data units and how to label them.
struct Axis {
  std::string title;
  std::vector<double> ticks;
  std::function<std::string(double)> label;  ///< empty: num(v, 2)
  bool grid = true;
};

/// The document: elements appended in paint order. Counts elements so reports can cap their size.
class Canvas {
 public:
  Canvas(double width, double height, std::string title, std::string css_class = "chart");
  double width() const { return w_; }
  double height() const { return h_; }

  void open_group(std::string_view cls, std::string_view attrs = {});
  void close_group();
  /// `fill` is a colour or empty (CSS decides); `tooltip` becomes a <title> child.
  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view cls = {},
            std::string_view tooltip = {});
  void line(double x1, double y1, double x2, double y2, std::string_view cls, std::string_view stroke = {});
  void text(double x, double y, std::string_view content, std::string_view cls = {},
            std::string_view anchor = "start", std::string_view attrs = {});
  void path(std::string_view d, std::string_view fill, std::string_view cls = {},
            std::string_view tooltip = {}, std::string_view attrs = {});
  void circle(double cx, double cy, double r, std::string_view fill, std::string_view cls = {},
              std::string_view tooltip = {});
  /// Appends pre-escaped markup (for definitions such as <pattern>); counted as one element.
  void raw(std::string_view markup);

  std::size_t elements() const { return elements_; }
  std::string str() const;

 private:
  void tooltip_close(std::string_view tag, std::string_view tooltip);
  double w_, h_;
  std::string title_, cls_, body_;
  std::size_t elements_ = 0;
  int depth_ = 0;
};

/// Grid, ticks, tick labels and the two axis titles, in groups of class "axis x" and "axis y".
void axes(Canvas& c, const Frame& f, const Axis& x, const Axis& y);

/// One stacked series. `ys` are the series' own values (not cumulative) at the shared xs.
struct Series {
  std::string name, color;
  std::vector<double> ys;
};
/// Stacked areas with step interpolation (the value holds until the next x); the first series is at the
/// bottom. Each series is one <path class="series" data-series="NAME">; all-zero series are still drawn
/// (empty).
void stacked_area(Canvas& c, const Frame& f, const std::vector<double>& xs,
                  const std::vector<Series>& series);

/// A horizontal reference line across the frame at data value `y`, with a label at its right end, above the
/// line or below it.
void hline(Canvas& c, const Frame& f, double y, std::string_view cls, std::string_view label,
           bool label_below = false);
/// A polyline through data points.
void polyline(Canvas& c, const Frame& f, const std::vector<double>& xs, const std::vector<double>& ys,
              std::string_view cls, std::string_view stroke = {});

/// One Gantt bar: [a, b] in data units of f.x.
struct Span {
  double a = 0, b = 0;
  std::string color, tooltip;
};
/// A row of bars at pixel rows [y, y + h] labelled `name` left of the frame, as <g class="gantt-row"
/// data-lane=NAME>. A bar narrower than `min_px` absorbs the bars that touch it until it is `min_px` wide
/// (the merged bar takes the colour of its longest member and a tooltip counting its members), which bounds
/// the element count by the pixel width while long runs of small tasks keep their colours at pixel
/// resolution. Returns bars drawn.
std::size_t gantt_row(Canvas& c, const Frame& f, double y, double h, std::string_view name,
                      std::vector<Span> spans, std::string_view row_cls = "gantt-row", double min_px = 1.5);

/// Intervals at their true share of each pixel column: per column of the frame one bar at the column's left
/// edge, as wide as the part of the column the intervals cover (columns covered throughout are merged into
/// one bar), in pixel rows [y, y + h]. The bars' widths sum to the intervals' total length on the x scale
/// (unlike gantt_row, which widens sub-pixel bars to be seen): a lane of many tiny spans looks as covered as
/// it is. `intervals` are in data units of f.x, non-overlapping. Returns the covered length in data units.
double share_bars(Canvas& c, const Frame& f, double y, double h,
                  const std::vector<std::pair<double, double>>& intervals, std::string_view cls,
                  std::string_view tooltip);

struct LegendItem {
  std::string name, color;
  std::string cls;  ///< optional extra class on the swatch (e.g. a hatch)
};
/// A legend laid out left to right from (x, y), wrapping at x + max_w. Returns the height used.
double legend(Canvas& c, double x, double y, double max_w, const std::vector<LegendItem>& items);

}  // namespace shardplan::svg

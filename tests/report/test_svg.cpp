// The SVG writer: escaping, ticks and scales, and the structure of the chart primitives.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "planner/report/svg.hpp"
#include "report_helpers.hpp"

using namespace shardplan;
using shardplan::test::count_of;

TEST_CASE("svg escapes text and attributes", "[svg]") {
  CHECK(svg::escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  svg::Canvas c(100, 50, "t<1>");
  c.text(1, 2, "<script>alert(1)</script>", "x\"y");
  const std::string s = c.str();
  CHECK(s.find("<script>") == std::string::npos);
  CHECK(s.find("&lt;script&gt;") != std::string::npos);
  CHECK(s.find("class=\"x&quot;y\"") != std::string::npos);
  CHECK(s.find("<title>t&lt;1&gt;</title>") != std::string::npos);
}

TEST_CASE("svg numbers are compact", "[svg]") {
  CHECK(svg::num(1.0) == "1");
  CHECK(svg::num(1.25, 2) == "1.25");
  CHECK(svg::num(-0.01) == "0");
  CHECK(svg::num(12.3456, 1) == "12.3");
}

TEST_CASE("nice ticks are 1-2-5 multiples covering the range", "[svg]") {
  // 0..80 GiB with ~8 ticks: raw step 10 -> 10; ticks 0, 10, ..., 80.
  auto t = svg::nice_ticks(0, 80, 8);
  REQUIRE(t.size() == 9);
  CHECK(t.front() == 0);
  CHECK(t.back() == Approx(80));
  // 0..0.37 s with ~12 ticks: raw step 0.37/12 = 0.031 = 3.1 x 0.01; 3.1 < 3.5 rounds to 2 -> step 0.02.
  t = svg::nice_ticks(0, 0.37, 12);
  CHECK(t[1] == Approx(0.02));
  CHECK(t.back() <= 0.37 + 1e-12);
  double lo = 0, hi = 83.2;
  svg::nice_range(lo, hi, 8, false);
  CHECK(hi == Approx(90));  // step 10
  lo = 0.03, hi = 4000;
  svg::nice_range(lo, hi, 6, true);
  CHECK(lo == Approx(0.01));
  CHECK(hi == Approx(10000));
  auto lt = svg::log_ticks(0.01, 10000);
  CHECK(lt.size() == 7);  // decades only when the range spans many
  auto fine = svg::log_ticks(1, 100);
  CHECK(fine == std::vector<double>{1, 2, 5, 10, 20, 50, 100});
}

TEST_CASE("scales map linearly and logarithmically", "[svg]") {
  svg::Scale lin{0, 10, 100, 200, false};
  CHECK(lin(5) == Approx(150));
  svg::Scale inv{0, 10, 200, 100, false};  // y axis: pixels grow downwards
  CHECK(inv(10) == Approx(100));
  svg::Scale lg{1, 1000, 0, 300, true};
  CHECK(lg(10) == Approx(100));
  CHECK(lg(100) == Approx(200));
}

TEST_CASE("axes, stacked areas, reference lines and legends have their structure", "[svg]") {
  svg::Canvas c(600, 400, "test");
  svg::Frame f{{80, 20, 500, 320}, {0, 10, 80, 580, false}, {0, 100, 340, 20, false}};
  svg::axes(c, f, {"time (s)", svg::nice_ticks(0, 10, 5), {}, true},
            {"memory (GiB)", svg::nice_ticks(0, 100, 5), {}, true});
  std::vector<double> xs = {0, 1, 2, 3, 4};
  std::vector<svg::Series> ser = {{"a", "#111111", {1, 2, 3, 2, 1}},
                                  {"b", "#222222", {0, 0, 0, 0, 0}},
                                  {"c", "#333333", {5, 5, 5, 5, 5}}};
  svg::stacked_area(c, f, xs, ser);
  svg::hline(c, f, 80, "capacity", "GPU capacity");
  svg::legend(c, 80, 0, 500, {{"a", "#111111", {}}, {"b", "#222222", {}}});
  const std::string s = c.str();
  CHECK(count_of(s, "<g class=\"axis x\"") == 1);
  CHECK(count_of(s, "<g class=\"axis y\"") == 1);
  CHECK(s.find(">time (s)</text>") != std::string::npos);
  CHECK(s.find(">memory (GiB)</text>") != std::string::npos);
  CHECK(count_of(s, "class=\"series\"") == 3);  // one per series, the all-zero one too
  for (const char* n : {"a", "b", "c"}) CHECK(count_of(s, std::string("data-series=\"") + n + "\"") == 1);
  CHECK(count_of(s, "<g class=\"capacity\"") == 1);
  CHECK(count_of(s, "<g class=\"legend\"") == 1);
  // Balanced groups.
  CHECK(count_of(s, "<g ") == count_of(s, "</g>"));
  // Series c is painted first (top of the stack) and reaches 1 + 0 + 5 = 8 at x = 2 -> y = 340 - 8/100*320.
  const auto pc = s.find("data-series=\"c\"");
  const auto pa = s.find("data-series=\"a\"");
  CHECK(pc < pa);
  CHECK(s.find("V314.4") != std::string::npos);
}

TEST_CASE("gantt rows merge bars narrower than the pixel budget", "[svg]") {
  svg::Canvas c(1000, 100, "gantt");
  svg::Frame f{{100, 10, 800, 60}, {0, 1.0, 100, 900, false}, {0, 1, 70, 10, false}};
  std::vector<svg::Span> spans;
  // 20 000 back-to-back tasks of 50 us over 1 s: 0.04 px each on an 800 px row.
  for (int i = 0; i < 20000; ++i)
    spans.push_back({i * 5e-5, (i + 1) * 5e-5, "#123456", fmt::format("t{}", i)});
  // And one big task that keeps its own bar.
  const std::size_t drawn = svg::gantt_row(c, f, 10, 30, "compute", spans, "gantt-row", 1.5);
  CHECK(drawn <= 800 / 1.5 + 2);
  CHECK(drawn >= 1);
  const std::string s = c.str();
  CHECK(count_of(s, "<g class=\"gantt-row\" data-lane=\"compute\"") == 1);
  CHECK(s.find("tasks merged") != std::string::npos);

  svg::Canvas c2(1000, 100, "gantt2");
  std::vector<svg::Span> wide = {
      {0.0, 0.4, "#111111", "a"}, {0.4, 0.41, "#222222", "tiny"}, {0.5, 1.0, "#333333", "b"}};
  CHECK(svg::gantt_row(c2, f, 10, 30, "lane", wide) == 3);  // 0.01 s = 8 px: nothing to merge
}

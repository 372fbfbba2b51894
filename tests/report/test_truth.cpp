// The charts say what the report says: the exposed-communication lane draws exactly the reported exposed time
// (PP, TP, CP and EP plans), bars narrower than a pixel are drawn at their share rather than widened, the
// memory charts reach the reported peak (pipeline plans over their whole step), and every Pareto point of
// the plan page is a listed plan or labelled.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <regex>

#include "planner/report/svg.hpp"
#include "report_helpers.hpp"

using namespace shardplan;
using namespace shardplan::test;

namespace {

double attr_of(const std::string& s, const std::string& name) {
  const std::regex re(name + "=\"([-0-9.eE+]+)\"");
  std::smatch m;
  REQUIRE(std::regex_search(s, m, re));
  return std::stod(m[1]);
}

/// The <g class="gantt-row gantt-exposed" ...>...</g> group, and the sum of its bars' widths in pixels.
double exposed_px(const std::string& html, std::string& group) {
  const auto p = html.find("<g class=\"gantt-exposed\"");
  REQUIRE(p != std::string::npos);
  group = html.substr(p, html.find("</g>", p) - p);
  const std::regex bar(
      "<rect x=\"[-0-9.]+\" y=\"[-0-9.]+\" width=\"([0-9.]+)\" height=\"[0-9.]+\" class=\"exposed\"");
  double px = 0;
  for (auto it = std::sregex_iterator(group.begin(), group.end(), bar); it != std::sregex_iterator(); ++it)
    px += std::stod((*it)[1]);
  return px;
}

}  // namespace

TEST_CASE("share_bars draws sub-pixel intervals at their share, not widened", "[svg][truth]") {
  // 1000 intervals of 0.1 px, one every px over a 1000 px frame: 10 % of the lane, 100 px of bars in total
  // (gantt_row would widen each to its minimum and paint the lane solid).
  svg::Canvas c(1200, 100, "t");
  svg::Frame f;
  f.area = {100, 10, 1000, 50};
  f.x = {0, 1000, 100, 1100, false};
  f.y = {0, 1, 60, 10, false};
  std::vector<std::pair<double, double>> iv;
  for (int i = 0; i < 1000; ++i) iv.push_back({i + 0.45, i + 0.55});
  const double covered = svg::share_bars(c, f, 10, 50, iv, "exposed", "");
  CHECK(covered == Approx(100).epsilon(1e-9));
  const std::string s = c.str();
  double px = 0;
  const std::regex bar("width=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), bar); it != std::sregex_iterator(); ++it)
    if (std::stod((*it)[1]) < 1000) px += std::stod((*it)[1]);
  CHECK(px == Approx(100).epsilon(1e-3));
  // A fully covered stretch is one bar.
  svg::Canvas d(1200, 100, "t");
  CHECK(svg::share_bars(d, f, 10, 50, {{100, 300}}, "exposed", "") == Approx(200));
  CHECK(count_of(d.str(), "class=\"exposed\"") == 1u);
}

TEST_CASE("the exposed lane draws the reported exposed time: PP, TP, CP and EP plans", "[html][truth]") {
  struct Case {
    const char* name;
    const char* model;
    int gpus;
    Plan plan;
    std::int64_t global_batch;
  };
  std::vector<Case> cases;
  {
    Plan p;  // pipeline: 1F1B interleaved over 4 ranks with TP 8 (Llama 3 70B, 64 GPUs)
    p.tp = 8, p.pp = 4, p.pp_schedule = PpSchedule::kInterleaved1F1B, p.virtual_stages = 2, p.seq = 8192;
    cases.push_back({"pp", "llama3-70b", 64, p, 64});
  }
  {
    Plan p;  // tensor parallel 2: many sub-pixel TP collectives on the compute stream
    p.tp = 2, p.seq = 8192;
    cases.push_back({"tp", "llama3-8b", 8, p, 16});
  }
  {
    Plan p;  // context parallel 2 at 32k tokens
    p.cp = 2, p.seq = 32768, p.ac = AcMode::kFull;
    cases.push_back({"cp", "llama3-8b", 16, p, 8});
  }
  {
    Plan p;  // expert parallel 8 (Mixtral)
    p.ep = 8, p.seq = 4096, p.ac = AcMode::kFull;
    cases.push_back({"ep", "mixtral-8x7b", 16, p, 16});
  }
  for (const Case& k : cases) {
    INFO(k.name);
    Bench b(k.model, "dgx-h100", k.gpus);
    Simulator sim(b.model, *b.cluster, *b.costs);
    const Result r = sim.run(b.resolve(k.plan, k.global_batch), true);
    REQUIRE(r.exposed_comm_s > 0);
    const std::string html = html_simulate_report(r, b.inputs());
    std::string group;
    const double px = exposed_px(html, group);
    // The lane's own account, and the bars measured in pixels, against the report's exposed time.
    CHECK(attr_of(group, "data-exposed-s") == Approx(r.exposed_comm_s).epsilon(1e-6));
    CHECK(attr_of(group, "data-report-exposed-s") == Approx(r.exposed_comm_s).epsilon(1e-6));
    CHECK(px / attr_of(group, "data-px-per-s") == Approx(r.exposed_comm_s).epsilon(0.01).margin(1e-4));
    // The memory charts reach the reported peak allocated memory.
    for (auto p = html.find("data-drawn-peak-bytes"); p != std::string::npos;
         p = html.find("data-drawn-peak-bytes", p + 1)) {
      const std::string tag = html.substr(p, 120);
      CHECK(attr_of(tag, "data-drawn-peak-bytes") == Approx(static_cast<double>(r.peak_bytes)).epsilon(1e-9));
    }
    if (r.pipeline) {
      // Drawn whole: the pipeline timeline spans the step, not one micro-batch.
      REQUIRE(!r.pipeline->spans.empty());
      double last = 0;
      for (const auto& sp : r.pipeline->spans) last = std::max(last, sp.end_s);
      CHECK(last > 0.8 * r.step_s);
      CHECK(html.find("Timeline of the whole step") != std::string::npos);
      CHECK(html.find("chart gantt pipeline") != std::string::npos);
      CHECK(html.find("chart memory pipeline") != std::string::npos);
    }
  }
}

TEST_CASE("plan page: every Pareto point is a listed plan or labelled and described", "[html][truth]") {
  Bench b("llama3-8b", "dgx-h100", 8);
  SearchOutcome o = sample_outcome(b);
  REQUIRE(o.plans.size() >= 2);
  // A front point that beats #1 on both axes but is not listed (a tie the rules decided).
  Result better = o.plans.back();
  better.tokens_per_s_per_gpu = o.plans[0].tokens_per_s_per_gpu * 1.01;
  better.peak_reserved_bytes = o.plans[0].peak_reserved_bytes - kGiB;
  better.plan.mbs = 3;
  o.tie_tolerance = kThroughputTieTolerance;
  o.pareto = {better, o.plans.front()};
  const std::string html = html_plan_report(o, b.model, *b.cluster);
  CHECK(count_of(html, "class=\"pareto-point\" data-label=\"P1\"") == 1u);
  CHECK(html.find("<td>P1</td>") != std::string::npos);
  CHECK(html.find("faster and more headroom than #1") != std::string::npos);
}

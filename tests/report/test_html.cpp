// The HTML reports' structure: self-contained, one memory series per category, the capacity line and the
// peak, one Gantt row per lane plus the exposed-communication row, the tables, the embedded report JSON; the
// size cap on a large step; and the plan and validation pages.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "report_helpers.hpp"

using namespace shardplan;
using namespace shardplan::test;

namespace {

/// The <svg ...>...</svg> element whose class list contains `cls`.
std::string svg_of(const std::string& html, const std::string& cls) {
  const auto p = html.find("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart " + cls + "\"");
  if (p == std::string::npos) return {};
  return html.substr(p, html.find("</svg>", p) + 6 - p);
}

void check_self_contained(const std::string& html) {
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("@media print") != std::string::npos);
  // Nothing from the network: the only URL is the SVG namespace identifier.
  std::string rest = html;
  for (const std::string ns : {"http://www.w3.org/2000/svg"}) {
    for (auto p = rest.find(ns); p != std::string::npos; p = rest.find(ns)) rest.erase(p, ns.size());
  }
  CHECK(rest.find("http://") == std::string::npos);
  CHECK(rest.find("https://") == std::string::npos);
  CHECK(rest.find("<script src") == std::string::npos);
  CHECK(rest.find("<link") == std::string::npos);
  CHECK(rest.find("@import") == std::string::npos);
  CHECK(count_of(html, "<svg ") == count_of(html, "</svg>"));
  CHECK(count_of(html, "<g ") == count_of(html, "</g>"));
}

}  // namespace

TEST_CASE("simulate report: memory stacked by category, capacity, peak, Gantt lanes, tables", "[html]") {
  Bench b("llama3-8b", "dgx-h100", 8);
  Simulator sim(b.model, *b.cluster, *b.costs);
  const Result& r = sim.run(b.resolve(example_plan()), true);
  const std::string html = html_simulate_report(r, b.inputs());
  check_self_contained(html);
  // docs/json.md: the breakdown at the peak sums to the peak.
  Bytes sum = 0;
  for (Bytes x : r.breakdown) sum += x;
  CHECK(sum == r.peak_bytes);

  const std::string mem = svg_of(html, "memory");
  REQUIRE(!mem.empty());
  CHECK(count_of(mem, "<g class=\"axis x\"") == 1);
  CHECK(count_of(mem, "<g class=\"axis y\"") == 1);
  CHECK(mem.find("time in the step (") != std::string::npos);
  CHECK(mem.find("allocated memory (GiB)") != std::string::npos);
  CHECK(count_of(mem, "class=\"series\"") == kMemCategories);
  for (int c = 0; c < kMemCategories; ++c)
    CHECK(count_of(mem, std::string("data-series=\"") + to_string(static_cast<MemCategory>(c)) + "\"") == 1);
  CHECK(count_of(mem, "<g class=\"capacity\"") == 1);
  CHECK(mem.find("GPU capacity " + fmt::format("{:.2f} GiB", static_cast<double>(r.capacity_bytes) /
                                                                 static_cast<double>(kGiB))) !=
        std::string::npos);
  CHECK(count_of(mem, "class=\"peak-marker\"") == 1);
  CHECK(mem.find(fmt::format("peak {:.2f} GiB", static_cast<double>(r.peak_bytes) /
                                                    static_cast<double>(kGiB))) != std::string::npos);

  const std::string gantt = svg_of(html, "gantt");
  REQUIRE(!gantt.empty());
  // One row per lane the step uses (the compute lane always): lanes with no task of positive duration are
  // left out.
  std::vector<char> used(static_cast<std::size_t>(sim.lanes()), 0);
  used[0] = 1;
  for (std::size_t i = 0; i < sim.program().tasks.size(); ++i)
    if (sim.timeline().timing[i].end_s > sim.timeline().timing[i].start_s)
      used[sim.program().tasks[i].lane] = 1;
  CHECK(count_of(gantt, "<g class=\"gantt-row\"") ==
        static_cast<std::size_t>(std::count(used.begin(), used.end(), 1)));
  for (std::size_t l = 0; l < used.size(); ++l)
    CHECK((gantt.find("data-lane=\"" + sim.program().lane_names[l] + "\"") != std::string::npos) ==
          static_cast<bool>(used[l]));
  CHECK(count_of(gantt, "<g class=\"gantt-exposed\"") == 1);
  // The memory band under the lanes: one step line on the GPU's time axis and the peak marked with its phase.
  CHECK(count_of(gantt, "<g class=\"gantt-memory\"") == 1);
  CHECK(count_of(gantt, "class=\"mem-gpu\"") == 1);
  CHECK(count_of(gantt, "class=\"mem-peak\"") == 1);
  CHECK(gantt.find(r.peak_phase) != std::string::npos);
  CHECK(count_of(gantt, "<g class=\"axis x\"") == 1);
  // The GPU-time view (Gantt with its memory band) comes first; the CPU-issue-time memory charts follow it.
  const auto gantt_at = html.find("<h2>Timeline</h2>");
  const auto cpu_mem_at = html.find("<h2>Memory as the CPU issues the step</h2>");
  REQUIRE(gantt_at != std::string::npos);
  REQUIRE(cpu_mem_at != std::string::npos);
  CHECK(gantt_at < cpu_mem_at);
  CHECK(html.find("class=\"chart memory") > gantt_at);

  for (int c = 0; c < kMemCategories; ++c)
    CHECK(html.find(std::string(">") + to_string(static_cast<MemCategory>(c)) + "</td>") !=
          std::string::npos);
  CHECK(html.find("<table class=\"plan\">") != std::string::npos);
  CHECK(html.find("<table class=\"inputs\">") != std::string::npos);
  // The embedded machine-readable copy is report_json itself.
  const std::string tag = "<script type=\"application/json\" id=\"shardplan-report\">";
  const auto p = html.find(tag);
  REQUIRE(p != std::string::npos);
  const auto q = html.find("</script>", p);
  CHECK(Json::parse(html.substr(p + tag.size(), q - p - tag.size())) == report_json(r, b.inputs()));
}

TEST_CASE("simulate report of a 405B step with 16 micro-batches stays under 2 MB", "[html][size]") {
  Bench b("llama3.1-405b", "dgx-h100", 64);
  Plan p;
  p.seq = 8192;
  p.ac = AcMode::kFull;
  p.grad_accum = 16;
  Simulator sim(b.model, *b.cluster, *b.costs);
  const Result& r = sim.run(b.resolve(p), true);
  REQUIRE(sim.program().tasks.size() > 5000);  // a big program: the merging is exercised
  const std::string html = html_simulate_report(r, b.inputs());
  CHECK(html.size() < 2'000'000);
  CHECK(count_of(html, "<rect ") + count_of(html, "<path ") + count_of(html, "<line ") +
            count_of(html, "<text ") <
        2 * kHtmlMaxSvgElements);
  CHECK(count_of(svg_of(html, "memory"), "class=\"series\"") == kMemCategories);
  // Rows for the lanes this plan uses: compute and the shard-group communicator (no HSDP, TP or offload).
  CHECK(count_of(svg_of(html, "gantt"), "<g class=\"gantt-row\"") == 2);
}

TEST_CASE("plan report: bars of the top plans with memory and binding constraint, then the recommendation",
          "[html]") {
  Bench b("llama3-8b", "dgx-h100", 8);
  SearchOutcome o = sample_outcome(b);
  o.pareto = {o.plans.back(), o.plans.front()};  // two front points (the chart draws what the search found)
  const std::string html = html_plan_report(o, b.model, *b.cluster);
  check_self_contained(html);
  const std::string bars = svg_of(html, "plans");
  REQUIRE(!bars.empty());
  CHECK(count_of(bars, "<g class=\"plan-bar\"") == o.plans.size());
  CHECK(bars.find("tokens/s per GPU") != std::string::npos);
  for (const auto& r : o.plans) CHECK(html.find(binding_constraint(r)) != std::string::npos);
  CHECK(count_of(svg_of(html, "memory"), "class=\"series\"") == kMemCategories);
  // Rows for the lanes the recommended plan uses: compute, the shard-group communicator, and the replicate or
  // TP communicator when it has one.
  const Plan& rec = o.plans[0].plan;
  CHECK(count_of(svg_of(html, "gantt"), "<g class=\"gantt-row\"") ==
        2u + (rec.replicas > 1 ? 1u : 0u) + (rec.tp > 1 ? 1u : 0u));
  CHECK(html.find("Recommended plan") != std::string::npos);
  CHECK(html.find("refused by resolve_plan") != std::string::npos);
  CHECK(html.find("tp 16 does not divide the heads") != std::string::npos);
  // The Pareto chart: one grey point per front plan, the recommendation and each alternative marked once.
  const std::string pareto = svg_of(html, "pareto");
  REQUIRE(!pareto.empty());
  CHECK(count_of(pareto, "class=\"point\"") == o.pareto.size());
  CHECK(count_of(pareto, "class=\"recommended\"") == 1u);
  CHECK(count_of(pareto, "class=\"alternative\"") == o.plans.size() - 1);
  CHECK(pareto.find("memory headroom (GiB)") != std::string::npos);

  SearchOutcome none;
  none.explanation = "nothing fits: 64 GiB over at best";
  const std::string empty = html_plan_report(none, b.model, *b.cluster);
  check_self_contained(empty);
  CHECK(empty.find("No plan fits") != std::string::npos);
}

TEST_CASE("validate report: one scatter per term, y = x with ±10 % bands, log-log for wide ranges",
          "[html]") {
  const ValidationReport v = sample_validation();
  const std::string html = html_validate_report(v);
  check_self_contained(html);
  CHECK(count_of(html, "class=\"chart scatter\"") == 4);
  CHECK(count_of(html, "class=\"identity\"") == 4);
  CHECK(count_of(html, "class=\"band\"") == 4);
  CHECK(count_of(html, "class=\"point\"") == v.rows.size());
  // tokens/s spans 300 .. 36 600 (> 20x): log-log; MFU 0.31 .. 0.42: linear.
  CHECK(html.find(">tokens_per_s_per_gpu (log-log)</text>") != std::string::npos);
  CHECK(html.find(">mfu</text>") != std::string::npos);
  CHECK(html.find("measured (GiB)") != std::string::npos);
  CHECK(html.find("predicted (s)") != std::string::npos);
  CHECK(html.find("fp8 compute not modelled") != std::string::npos);
  for (const auto& s : v.summary()) CHECK(html.find("<tr><td>" + s.term + "</td>") != std::string::npos);
}

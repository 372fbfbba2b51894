// Shared pieces of the report tests: a model + cluster + cost model bundle, small file helpers, and the
// sample search outcome and validation report the plan and validate pages are drawn from.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "planner/report/html.hpp"
#include "simulator/model/presets.hpp"
#include "tests/common/fixture.hpp"

namespace shardplan::test {

inline std::size_t count_of(const std::string& s, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

using fixture::read_text;
using fixture::write_text;

/// The shared fixture plus the report inputs it describes.
struct Bench : fixture::Setup {
  using Setup::Setup;
  ReportInputs inputs() const { return {&model, cluster.get(), ""}; }
};

/// llama3-8b on one DGX H100, seq 8192, full activation checkpointing (the README's example).
inline Plan example_plan() {
  Plan p;
  p.seq = 8192;
  p.ac = AcMode::kFull;
  return p;
}

/// A small search outcome over a few hand-picked plans, ranked by tokens/s per GPU as the search ranks them.
inline SearchOutcome sample_outcome(const Bench& b) {
  SearchOutcome o;
  std::vector<Plan> plans;
  for (int mbs : {1, 2})
    for (AcMode ac : {AcMode::kFull, AcMode::kSelective})
      for (int zero : {2, 3}) {
        Plan p = example_plan();
        p.mbs = mbs, p.ac = ac, p.zero = zero;
        plans.push_back(b.resolve(p, 16));
      }
  Simulator sim(b.model, *b.cluster, *b.costs);
  for (const Plan& p : plans) {
    const Result& r = sim.run(p);
    if (r.fits) o.plans.push_back(r);  // the search returns fitting plans only
  }
  std::stable_sort(o.plans.begin(), o.plans.end(), [](const Result& x, const Result& y) {
    return x.tokens_per_s_per_gpu > y.tokens_per_s_per_gpu;
  });
  // As search_plans does: the recommendation comes from a detail run, which the report draws.
  if (!o.plans.empty()) o.plans[0] = sim.run(o.plans[0].plan, true);
  o.stats.considered = 96;
  o.stats.evaluated = static_cast<std::int64_t>(plans.size());
  o.stats.fitting = static_cast<std::int64_t>(o.plans.size());
  o.stats.seconds = 0.25;
  o.stats.rejections.count[Rejection::kInvalidPlan] = 3;
  o.stats.rejections.example[Rejection::kInvalidPlan] = "tp=16  (--tp: tp 16 does not divide the heads)";
  o.explanation = "#1 beats #2 on tokens/s per GPU (sample outcome built by the test).";
  o.headroom = 0.05;
  return o;
}

/// Predicted vs measured rows shaped like a validation of published runs: memory (bytes, wide range), step
/// time, throughput and MFU, from two sources, errors within and outside ±10 %.
inline ValidationReport sample_validation() {
  ValidationReport v;
  const char* src[] = {"mosaicml/llm-foundry; README", "pytorch/torchtitan; benchmarks"};
  for (int i = 0; i < 12; ++i) {
    const double f = 1.0 + 0.04 * (i % 5) - 0.08;  // -8 % .. +8 %
    const double g = i % 4 == 0 ? 1.25 : f;        // a few outliers
    const std::string id = "run-" + std::to_string(i);
    const double mem = (4.0 + 7.5 * i) * static_cast<double>(kGiB);
    v.rows.push_back({id, src[i % 2], "peak_reserved_bytes", mem * f, mem, ""});
    const double step = 0.4 * (1 + i);
    v.rows.push_back({id, src[i % 2], "step_s", step * g, step, ""});
    const double tps = 300.0 * (1 + i * i);
    v.rows.push_back({id, src[i % 2], "tokens_per_s_per_gpu", tps / g, tps, ""});
    v.rows.push_back({id, src[i % 2], "mfu", 0.42 / g, 0.42 - 0.01 * i, ""});
  }
  v.skipped.push_back({"fp8-run", "fp8 compute not modelled"});
  return v;
}

}  // namespace shardplan::test

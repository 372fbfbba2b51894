// OOM-risk margin: headroom compared with the measured error distribution of the memory prediction.
#include "planner/report/margin.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/report/evidence.hpp"
#include "planner/validate.hpp"

namespace shardplan {

static double headroom_fraction(const Result& r) {
  return r.capacity_bytes > 0
             ? static_cast<double>(r.headroom_bytes()) / static_cast<double>(r.capacity_bytes)
             : 0;
}

// The relative error applies to the predicted reserved bytes; the plan survives an error e when
// reserved · (1 + e) + overhead <= capacity.
static const char* risk(const Result& r) {
  const double reserved = static_cast<double>(r.peak_reserved_bytes);
  const double room = static_cast<double>(r.capacity_bytes - r.overhead.total());
  if (reserved * (1 + kReservedMemoryError.worst_abs) <= room) return "low";
  if (reserved * (1 + kReservedMemoryError.median_abs) <= room) return "moderate";
  return "high";
}

int memory_risk_level(const Result& r) {
  const std::string level = risk(r);
  return level == "low" ? 0 : level == "moderate" ? 1 : 2;
}

double default_headroom(const ValidationReport& v) {
  double worst_under = 0;  // (measured - predicted) / measured, over the in-scope reserved-memory rows
  for (const auto& r : v.rows)
    if (r.term == "peak_reserved_bytes" && r.out_of_scope.empty() && r.measured > 0)
      worst_under = std::max(worst_under, -r.rel_error());
  // Round up to a whole percent; the epsilon keeps an exact percent (0.15 computed as 0.1500000001) where it
  // is.
  return std::ceil(100 * worst_under - 1e-9) / 100;
}

std::string format_probability(double p) {
  if (p < 0.0001) return "< 0.01 %";
  if (p > 0.9999) return "> 99.99 %";
  return p < 0.01 ? fmt::format("{:.2f} %", 100 * p) : fmt::format("{:.1f} %", 100 * p);
}

std::string margin_statement(const Result& r) {
  const auto& e = kReservedMemoryError;
  return fmt::format(
      "{} with {:.1f} % headroom ({:.2f} GiB); the reserved-memory prediction's error has been <= {:.1f} % "
      "(median {:.1f} %) in {} measured runs: {} risk of running out of memory (probability {})",
      r.fits ? "fits" : "does not fit", 100 * headroom_fraction(r),
      static_cast<double>(r.headroom_bytes()) / static_cast<double>(kGiB), 100 * e.worst_abs,
      100 * e.median_abs, e.runs, risk(r), format_probability(oom_probability(r)));
}

Json oom_model_json(const Result& r) {
  const OomModel m = oom_model(builtin_evidence(), r.plan);
  return {{"runs", m.runs},
          {"regime", m.regime},
          {"regime_runs", m.regime_runs},
          {"regime_weight", m.regime_runs / (m.regime_runs + kRegimePoolingRuns)},
          {"bandwidth", m.bandwidth},
          {"method",
           "P(reserved > capacity - runtime overhead): kernel-smoothed CDF of the measured reserved-memory "
           "errors at predicted / room - 1, the plan's regime weighted in (docs/model.md)"}};
}

Json margin_json(const Result& r) {
  const auto& e = kReservedMemoryError;
  return {{"headroom_fraction", headroom_fraction(r)},
          {"headroom_bytes", r.headroom_bytes()},
          {"error",
           {{"term", e.term}, {"runs", e.runs}, {"median_abs", e.median_abs}, {"worst_abs", e.worst_abs}}},
          {"risk", risk(r)},
          {"oom_probability", oom_probability(r)},
          {"oom_model", oom_model_json(r)},
          {"statement", margin_statement(r)}};
}

}  // namespace shardplan

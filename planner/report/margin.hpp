// The OOM-risk margin of a plan: its memory headroom set against how wrong the memory prediction has been on
// measured runs. The statistics are those of docs/accuracy.md (`shardplan validate` on the committed
// records), generated into planner/report/margin_stats.json; a test fails when that file is stale.
#pragma once
#include <string>

#include "core/json_reader.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

struct ValidationReport;

struct MemoryErrorStats {
  const char* term;
  int runs;
  double median_abs;  ///< median |relative error|
  double worst_abs;   ///< largest |relative error|
};

/// Reserved-memory prediction error on the development set (tests/data/runs/published_dev.json, in-scope
/// records): generated data, not hand-edited. planner/report/margin_stats.json holds what `shardplan
/// validate` gives on the committed records (bash tools/margin_stats.sh regenerates it), read at build time
/// (cmake/EmbedMarginStats.cmake); the test "planner/report/margin_stats.json is what validate gives on the
/// committed records" fails when it is stale. docs/accuracy.md has the rows behind it, git log the history.
/// Defined in the generated source (constant-initialised, like every value below that is read from the JSON).
extern const MemoryErrorStats kReservedMemoryError;

/// Default planner headroom (fraction of GPU memory `plan` keeps free). Rule: the largest under-prediction of
/// peak reserved memory over the in-scope records of tests/data/runs/published_dev.json, (measured -
/// predicted) / measured, rounded up to the next whole percent; a plan the planner accepts then stays under
/// the device's memory for every measured run the prediction has missed. default_headroom() computes the
/// rule; the value, the under-prediction and its record are in planner/report/margin_stats.json (generated,
/// see kReservedMemoryError).
extern const double kDefaultHeadroom;
inline constexpr const char* kDefaultHeadroomRule =
    "the largest under-prediction of reserved memory on the committed runs, rounded up to a whole percent";
/// The rule above applied to a validation report's peak_reserved_bytes rows (in scope only).
double default_headroom(const ValidationReport& v);

/// Throughput prediction error on the development set: median and mean |relative error| of tokens/s per GPU
/// over the in-scope records of tests/data/runs/published_dev.json (docs/accuracy.md, `bash
/// tools/accuracy.sh`).
struct ThroughputErrorStats {
  const char* term;
  int runs;
  double median_abs;  ///< median |relative error|
  double mape;        ///< mean |relative error|
};
/// Generated data (planner/report/margin_stats.json, see kReservedMemoryError).
extern const ThroughputErrorStats kThroughputError;
/// The planner's tie tolerance. Rule: two plans whose predicted tokens/s per GPU differ by less than the
/// median |error| of the tokens/s prediction over the in-scope validation records, |a - b| / max(a, b) <
/// this, are a tie (the model cannot tell them apart). A test recomputes it with the real simulator and fails
/// when stale.
extern const double kThroughputTieTolerance;  ///< = kThroughputError.median_abs
inline constexpr const char* kThroughputTieRule =
    "predicted tokens/s within the median |error| of the tokens/s prediction on the committed runs";

namespace margin_stats {
/// The largest under-prediction of reserved memory behind kDefaultHeadroom, and its record's id.
extern const double kLargestUnderPrediction;
extern const char* const kLargestUnderPredictionRecord;
}  // namespace margin_stats

/// How the plan's headroom compares with the measured reserved-memory error: 0 low (survives the worst
/// error), 1 moderate (survives the median error), 2 high.
int memory_risk_level(const Result& r);

/// "fits with 12.4 % headroom (9.80 GiB); reserved-memory error has been <= 31.5 % (median 16.4 %) in 12
/// runs: low risk"
std::string margin_statement(const Result& r);
/// {headroom_fraction, headroom_bytes, error: {term, runs, median_abs, worst_abs}, risk: low|moderate|high,
/// oom_probability, oom_model: {runs, regime, regime_runs, regime_weight, bandwidth, method}, statement}
Json margin_json(const Result& r);
/// The regime and distribution behind a result's OOM probability (planner/report/evidence.hpp).
Json oom_model_json(const Result& r);
/// "0.35 %", "< 0.01 %", "12.0 %"
std::string format_probability(double p);

}  // namespace shardplan

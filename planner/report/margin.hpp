// The OOM-risk margin of a plan: its memory headroom set against how wrong the memory prediction has been on
// measured runs. The statistics are those of docs/accuracy.md (`shardplan validate` on the committed records);
// a test recomputes them so they cannot drift from the data.
#pragma once
#include <string>

#include "core/json_reader.hpp"
#include "simulator/simulate.hpp"

namespace shardplan {

struct MemoryErrorStats {
  const char* term;
  int runs;
  double median_abs;  ///< median |relative error|
  double worst_abs;   ///< largest |relative error|
};

/// Reserved-memory prediction error on the development set (tests/data/runs/published_dev.json).
inline constexpr MemoryErrorStats kReservedMemoryError{"peak_reserved_bytes", 19, 0.048, 0.391};

/// "fits with 12.4 % headroom (9.80 GiB); reserved-memory error has been <= 31.5 % (median 16.4 %) in 12 runs: low risk"
std::string margin_statement(const Result& r);
/// {headroom_fraction, headroom_bytes, error: {term, runs, median_abs, worst_abs}, risk: low|moderate|high}
Json margin_json(const Result& r);

}  // namespace shardplan

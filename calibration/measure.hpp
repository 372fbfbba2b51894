// google-benchmark style timing of one benchmark point: warm-up, iteration count grown until one repetition
// takes at least min_time_s, then `repetitions` timed repetitions summarised as median, min and max per
// iteration.
#pragma once
#include <cstdint>
#include <functional>

namespace shardplan::calibration {

struct MeasureOptions {
  double min_time_s = 0.05;  ///< target duration of one repetition
  int warmup = 2;            ///< untimed runs of one iteration before tuning
  int repetitions = 5;
  std::int64_t max_iterations = 1 << 20;
};

struct Measurement {
  double median_s = 0, min_s = 0, max_s = 0;  ///< per iteration
  int repetitions = 0;
  std::int64_t iterations = 0;  ///< per repetition
};

/// `run(iterations)` executes the operation `iterations` times back to back and returns the elapsed seconds
/// (measured by the caller, e.g. with CUDA events). It may throw; the exception propagates.
Measurement measure(const std::function<double(std::int64_t)>& run, const MeasureOptions& options);

}  // namespace shardplan::calibration

// Iteration tuning and repetition statistics (see measure.hpp).
#include "calibration/measure.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace shardplan::calibration {

Measurement measure(const std::function<double(std::int64_t)>& run, const MeasureOptions& o) {
  if (o.repetitions < 1 || o.max_iterations < 1)
    throw std::invalid_argument("measure: repetitions and iterations >= 1");
  for (int i = 0; i < o.warmup; ++i) run(1);
  // Grow like google-benchmark: predict the count that reaches min_time (x1.4 margin), at most 10x per round.
  std::int64_t iters = 1;
  for (;;) {
    const double t = run(iters);
    if (t >= o.min_time_s || iters >= o.max_iterations) break;
    const double predicted = t > 0 ? 1.4 * o.min_time_s / t * static_cast<double>(iters) : 10.0 * iters;
    const double next =
        std::clamp(predicted, static_cast<double>(iters) + 1, 10.0 * static_cast<double>(iters));
    iters = std::min<std::int64_t>(o.max_iterations, static_cast<std::int64_t>(std::ceil(next)));
  }
  std::vector<double> per_iter;
  for (int r = 0; r < o.repetitions; ++r) per_iter.push_back(run(iters) / static_cast<double>(iters));
  std::sort(per_iter.begin(), per_iter.end());
  const std::size_t h = per_iter.size() / 2;
  Measurement m;
  m.median_s = per_iter.size() % 2 ? per_iter[h] : 0.5 * (per_iter[h - 1] + per_iter[h]);
  m.min_s = per_iter.front();
  m.max_s = per_iter.back();
  m.repetitions = o.repetitions;
  m.iterations = iters;
  return m;
}

}  // namespace shardplan::calibration

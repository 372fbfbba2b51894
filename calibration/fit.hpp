// Curve fitting for calibration data: the alpha-beta model t = alpha + S * per_byte (least squares on
// relative error) and a piecewise-linear curve in log(bytes)-log(time) space whose knots are measured points.
#pragma once
#include <optional>
#include <vector>

namespace shardplan::calibration {

/// One measured point: S bytes (the nccl-tests size column, whole buffer) took time_s seconds.
struct SizeTime {
  double bytes = 0;
  double time_s = 0;
};

/// t(S) = alpha_s + S * per_byte_s. For a collective on n ranks, per_byte_s = busbw_factor(kind, n) /
/// busbw_Bps.
struct AlphaBetaFit {
  double alpha_s = 0;
  double per_byte_s = 0;
  double max_rel_error = 0;          ///< max |model/measured - 1| over all points
  double max_rel_error_ge_1mib = 0;  ///< the same over points with S >= 1 MiB (0 when there are none)
  int points = 0;

  double time_s(double bytes) const { return alpha_s + bytes * per_byte_s; }
};

/// Sorted by size, zero/negative sizes and non-positive times dropped, repeated sizes replaced by their
/// median time.
std::vector<SizeTime> clean_points(std::vector<SizeTime> points);

/// Weighted least squares minimising the sum of squared relative errors, with alpha >= 0 and per_byte >= 0.
/// Expects cleaned points (see clean_points); returns a zero fit for an empty input.
AlphaBetaFit fit_alpha_beta(const std::vector<SizeTime>& points);

/// Piecewise log-log interpolant through a subset of the measured points (the knots), chosen greedily until
/// every measured point with S >= 1 MiB is within `tol_large` and every smaller one within `tol_small`
/// (relative).
class LogLogCurve {
 public:
  static LogLogCurve fit(const std::vector<SizeTime>& cleaned_points, double tol_large = 0.01,
                         double tol_small = 0.05);

  /// Interpolated time for S within [min_bytes, max_bytes]; nullopt outside (or for an empty curve).
  std::optional<double> time_s(double bytes) const;
  bool empty() const { return knots_.empty(); }
  double min_bytes() const { return knots_.empty() ? 0 : knots_.front().bytes; }
  double max_bytes() const { return knots_.empty() ? 0 : knots_.back().bytes; }
  const std::vector<SizeTime>& knots() const { return knots_; }
  double max_rel_error() const { return max_rel_error_; }
  double max_rel_error_ge_1mib() const { return max_rel_error_ge_1mib_; }

 private:
  std::vector<SizeTime> knots_;
  double max_rel_error_ = 0, max_rel_error_ge_1mib_ = 0;
};

/// Relative error of `model` against `measured`: |model / measured - 1|.
double rel_error(double model, double measured);

}  // namespace shardplan::calibration

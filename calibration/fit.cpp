// Alpha-beta least squares and greedy log-log knot selection (see fit.hpp).
#include "calibration/fit.hpp"

#include <algorithm>
#include <cmath>

#include "core/units.hpp"

namespace shardplan::calibration {

double rel_error(double model, double measured) {
  return std::fabs(model / measured - 1.0);
}

std::vector<SizeTime> clean_points(std::vector<SizeTime> points) {
  std::erase_if(points, [](const SizeTime& p) {
    return !(p.bytes > 0) || !(p.time_s > 0) || !std::isfinite(p.bytes) || !std::isfinite(p.time_s);
  });
  std::stable_sort(points.begin(), points.end(),
                   [](const SizeTime& a, const SizeTime& b) { return a.bytes < b.bytes; });
  std::vector<SizeTime> out;
  for (std::size_t i = 0; i < points.size();) {
    std::size_t j = i;
    std::vector<double> times;
    while (j < points.size() && points[j].bytes == points[i].bytes) times.push_back(points[j++].time_s);
    std::sort(times.begin(), times.end());
    const std::size_t h = times.size() / 2;
    const double median = times.size() % 2 ? times[h] : 0.5 * (times[h - 1] + times[h]);
    out.push_back({points[i].bytes, median});
    i = j;
  }
  return out;
}

static void fill_errors(AlphaBetaFit& f, const std::vector<SizeTime>& pts) {
  f.points = static_cast<int>(pts.size());
  for (const auto& p : pts) {
    const double e = rel_error(f.time_s(p.bytes), p.time_s);
    f.max_rel_error = std::max(f.max_rel_error, e);
    if (p.bytes >= static_cast<double>(kMiB)) f.max_rel_error_ge_1mib = std::max(f.max_rel_error_ge_1mib, e);
  }
}

AlphaBetaFit fit_alpha_beta(const std::vector<SizeTime>& pts) {
  AlphaBetaFit f;
  if (pts.empty()) return f;
  // Minimise sum((alpha + beta*S_i - t_i)^2 / t_i^2): with a_i = 1/t_i, b_i = S_i/t_i the residual is
  // alpha*a_i + beta*b_i - 1, so the normal equations are [Saa Sab; Sab Sbb][alpha; beta] = [Sa; Sb].
  double saa = 0, sab = 0, sbb = 0, sa = 0, sb = 0;
  for (const auto& p : pts) {
    const double a = 1.0 / p.time_s, b = p.bytes / p.time_s;
    saa += a * a, sab += a * b, sbb += b * b, sa += a, sb += b;
  }
  const double det = saa * sbb - sab * sab;
  double alpha = -1, beta = -1;
  if (pts.size() >= 2 && det > 1e-12 * saa * sbb) {
    alpha = (sa * sbb - sb * sab) / det;
    beta = (saa * sb - sab * sa) / det;
  }
  if (alpha < 0 || beta < 0) {
    // Constrained optimum lies on a boundary: try both and keep the better one.
    const double beta_only = sb / sbb;   // alpha = 0
    const double alpha_only = sa / saa;  // beta = 0
    auto cost = [&](double al, double be) {
      double c = 0;
      for (const auto& p : pts) c += std::pow((al + be * p.bytes) / p.time_s - 1.0, 2);
      return c;
    };
    if (pts.size() >= 2 && cost(alpha_only, 0) < cost(0, beta_only))
      alpha = alpha_only, beta = 0;
    else
      alpha = 0, beta = beta_only;
  }
  f.alpha_s = alpha;
  f.per_byte_s = beta;
  fill_errors(f, pts);
  return f;
}

static double interp(const std::vector<SizeTime>& knots, double bytes) {
  if (knots.size() == 1) return knots.front().time_s;
  auto it = std::upper_bound(knots.begin(), knots.end(), bytes,
                             [](double b, const SizeTime& k) { return b < k.bytes; });
  if (it == knots.begin()) ++it;
  if (it == knots.end()) --it;
  const SizeTime& hi = *it;
  const SizeTime& lo = *(it - 1);
  if (bytes == hi.bytes) return hi.time_s;
  if (bytes == lo.bytes) return lo.time_s;
  const double x = (std::log(bytes) - std::log(lo.bytes)) / (std::log(hi.bytes) - std::log(lo.bytes));
  return std::exp(std::log(lo.time_s) + x * (std::log(hi.time_s) - std::log(lo.time_s)));
}

LogLogCurve LogLogCurve::fit(const std::vector<SizeTime>& pts, double tol_large, double tol_small) {
  LogLogCurve c;
  if (pts.empty()) return c;
  std::vector<bool> is_knot(pts.size(), false);
  is_knot.front() = is_knot.back() = true;
  auto knots_of = [&] {
    std::vector<SizeTime> k;
    for (std::size_t i = 0; i < pts.size(); ++i)
      if (is_knot[i]) k.push_back(pts[i]);
    return k;
  };
  // Insert the worst offender (relative to its tolerance) until every point is within tolerance. Each round
  // adds one measured point as a knot, so this ends after at most pts.size() rounds with an exact
  // interpolant.
  for (;;) {
    const auto knots = knots_of();
    double worst = 1.0;
    std::size_t worst_i = pts.size();
    for (std::size_t i = 0; i < pts.size(); ++i) {
      if (is_knot[i]) continue;
      const double tol = pts[i].bytes >= static_cast<double>(kMiB) ? tol_large : tol_small;
      const double score = rel_error(interp(knots, pts[i].bytes), pts[i].time_s) / tol;
      if (score > worst) worst = score, worst_i = i;
    }
    if (worst_i == pts.size()) break;
    is_knot[worst_i] = true;
  }
  c.knots_ = knots_of();
  for (const auto& p : pts) {
    const double e = rel_error(interp(c.knots_, p.bytes), p.time_s);
    c.max_rel_error_ = std::max(c.max_rel_error_, e);
    if (p.bytes >= static_cast<double>(kMiB))
      c.max_rel_error_ge_1mib_ = std::max(c.max_rel_error_ge_1mib_, e);
  }
  return c;
}

std::optional<double> LogLogCurve::time_s(double bytes) const {
  if (knots_.empty() || !(bytes >= min_bytes()) || !(bytes <= max_bytes())) return std::nullopt;
  return interp(knots_, bytes);
}

}  // namespace shardplan::calibration

// Fitting: the alpha-beta least squares recovers a model it was given, and the log-log curve reproduces every
// measured point >= 1 MiB of the real nccl-tests logs within 3 %.
#include <catch2/catch.hpp>
#include <cmath>

#include "calibration/fit.hpp"
#include "calibration/nccl_tests_import.hpp"
#include "core/units.hpp"
#include "helpers.hpp"

using namespace shardplan;
using namespace shardplan::calibration;

TEST_CASE("alpha-beta fit recovers an exact ring all-gather model", "[fit]") {
  // ring all-gather, n = 8, alpha = 10 us, busbw = 100 GB/s: t(S) = 10e-6 + S * (7/8) / 1e11.
  const double alpha = 10e-6, per_byte = (7.0 / 8.0) / 1e11;
  std::vector<SizeTime> pts;
  for (double s = 1024; s <= double(kGiB); s *= 2) pts.push_back({s, alpha + s * per_byte});
  const auto fit = fit_alpha_beta(clean_points(pts));
  CHECK(fit.alpha_s == Approx(alpha).epsilon(1e-9));
  CHECK(fit.per_byte_s == Approx(per_byte).epsilon(1e-9));
  CHECK(busbw_factor(CollectiveKind::kAllGather, 8) / fit.per_byte_s == Approx(1e11).epsilon(1e-9));
  CHECK(fit.max_rel_error < 1e-9);
  CHECK(fit.points == 21);  // 2^10 .. 2^30
}

TEST_CASE("alpha-beta fit keeps alpha and beta non-negative", "[fit]") {
  // Times that shrink with size would give beta < 0 unconstrained; the fit falls back to a constant.
  const auto fit = fit_alpha_beta(clean_points({{1e3, 2e-5}, {1e6, 1.9e-5}, {1e9, 1.8e-5}}));
  CHECK(fit.per_byte_s >= 0);
  CHECK(fit.alpha_s >= 0);
  CHECK(fit.alpha_s == Approx(1.9e-5).epsilon(0.01));
}

TEST_CASE("clean_points sorts, drops empty sizes and takes the median of repeats", "[fit]") {
  const auto pts = clean_points({{2048, 3.0}, {0, 1.0}, {1024, 1.0}, {2048, 1.0}, {2048, 2.0}, {4096, -1}});
  REQUIRE(pts.size() == 2);
  CHECK(pts[0].bytes == 1024);
  CHECK(pts[1].bytes == 2048);
  CHECK(pts[1].time_s == 2.0);  // median of {3, 1, 2}
}

TEST_CASE("log-log curve interpolates between knots and refuses to extrapolate", "[fit]") {
  // Two points on t = c * S^0.5: the log-log line through them is exact in between.
  const auto curve = LogLogCurve::fit({{1e6, 1e-3}, {1e8, 1e-2}});
  CHECK(*curve.time_s(1e7) == Approx(std::sqrt(10.0) * 1e-3).epsilon(1e-12));
  CHECK_FALSE(curve.time_s(1e5));
  CHECK_FALSE(curve.time_s(1e9));
}

TEST_CASE("curves of the real logs reproduce every measured point >= 1 MiB within 3 %", "[fit][real]") {
  for (const char* log : {"h100_2node_16rank_all_reduce.txt",
                          "rtx2080ti_1node_2gpu_all_reduce_all_gather.txt", "gb10_2node_all_gather.txt"}) {
    const auto profile = import_nccl_tests({test::nccl_log(log)}, {});
    REQUIRE_FALSE(profile.collectives().empty());
    for (const auto& s : profile.collectives()) {
      INFO(log << " " << collective_name(s.kind) << " " << s.placement);
      CHECK(s.curve.max_rel_error_ge_1mib() <= 0.03);
      for (const auto& x : s.samples) {
        if (x.bytes < kMiB) continue;
        CHECK(rel_error(*s.curve.time_s(double(x.bytes)), x.time_s) <= 0.03);
      }
      // The curve is a compression: fewer knots than points wherever the data allow it.
      CHECK(s.curve.knots().size() <= s.samples.size());
    }
  }
}

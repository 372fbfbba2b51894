// CalibrationProfile: round trip, strict loading, and the queries the simulator uses.
#include <catch2/catch.hpp>
#include <cmath>

#include "calibration/nccl_tests_import.hpp"
#include "calibration/profile.hpp"
#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "core/units.hpp"
#include "helpers.hpp"

using namespace shardplan;
using namespace shardplan::calibration;
using Source = CollectiveEstimate::Source;

namespace {
CalibrationProfile h100() {
  return import_nccl_tests({test::nccl_log("h100_2node_16rank_all_reduce.txt")}, {});
}
}  // namespace

TEST_CASE("collective_time reproduces the measured points of the real log", "[profile][real]") {
  const auto p = h100();
  // Out-of-place column of h100_2node_16rank_all_reduce.txt: 1 GiB took 6759.0 us, 2 MiB 254.0 us, 8 GiB
  // 47535 us.
  for (auto [bytes, us] :
       {std::pair<std::int64_t, double>{kGiB, 6759.0}, {2 * kMiB, 254.0}, {8 * kGiB, 47535.0}}) {
    const auto est = p.collective_time(CollectiveKind::kAllReduce, bytes, 16, 2);
    REQUIRE(est);
    CHECK(est->source == Source::kMeasuredCurve);
    CHECK(est->time_s == Approx(us * 1e-6).epsilon(0.03));
  }
  // Every out-of-place point >= 1 MiB within 3 %.
  for (const auto& s : p.collectives()) {
    if (s.placement != "out_of_place") continue;
    for (const auto& x : s.samples)
      if (x.bytes >= kMiB)
        CHECK(p.collective_time(s.kind, x.bytes, 16, 2)->time_s == Approx(x.time_s).epsilon(0.03));
  }
}

TEST_CASE("collective_time falls back to the alpha-beta model and says so", "[profile]") {
  const auto p = h100();
  const CollectiveSeries* s = nullptr;
  for (const auto& x : p.collectives())
    if (x.placement == "out_of_place") s = &x;
  REQUIRE(s);
  SECTION("beyond the measured range") {
    // 16 GiB > the largest measured 8 GiB: t = alpha + S * per_byte of this series' fit.
    const auto est = p.collective_time(CollectiveKind::kAllReduce, 16 * kGiB, 16, 2);
    REQUIRE(est);
    CHECK(est->source == Source::kFittedAlphaBeta);
    CHECK(est->time_s == Approx(s->alpha_beta.alpha_s + 16.0 * kGiB * s->alpha_beta.per_byte_s));
    CHECK(est->time_s > 47535e-6);
  }
  SECTION("another rank count across nodes") {
    // 32 ranks on 4 nodes: alpha scaled by ring steps 2*31 / 2*15, busbw from the 16-rank fit,
    // t = alpha * 31/15 + S * (2*31/32) / busbw.
    const double busbw = *s->busbw_Bps();
    const double expect = s->alpha_beta.alpha_s * 31.0 / 15.0 + double(kGiB) * (2.0 * 31 / 32) / busbw;
    const auto est = p.collective_time(CollectiveKind::kAllReduce, kGiB, 32, 4);
    REQUIRE(est);
    CHECK(est->source == Source::kFittedAlphaBeta);
    CHECK(est->time_s == Approx(expect));
  }
  SECTION("nothing calibrated for that kind or span") {
    CHECK_FALSE(p.collective_time(CollectiveKind::kAllGather, kGiB, 16, 2));
    CHECK_FALSE(p.collective_time(CollectiveKind::kAllReduce, kGiB, 8, 1));  // single node: other span
    CHECK_FALSE(p.collective_time(CollectiveKind::kAllReduce, -1, 16, 2));
  }
}

TEST_CASE("profile round trip keeps every sample and query", "[profile]") {
  auto p = h100();
  p.set_gemm_peak(989e12, "sm90 4096 FLOP/clk/SM x 132 SMs x 1830 MHz");
  p.add_gemm_sample(
      {4096, 4096, 4096, "bf16", 0.2e-3, 2.0 * 4096 * 4096 * 4096 / 0.2e-3, 0.19e-3, 0.21e-3, 5, 100});
  p.add_hbm_sample({2 * kGiB, 1e-3, std::nullopt, std::nullopt, 3, 10});
  p.add_adamw_sample("fp32", {1 << 20, 28 << 20, 20e-6, std::nullopt, std::nullopt, 5, 50});
  p.record_failure({"nccl/all_gather/n8/bfloat16", "unhandled cuda error", 1 << 30, "2025-01-01T00:00:00Z"});
  p.mark_completed("gemm/grid");
  const auto path = test::temp_path("roundtrip.json");
  p.save(path);
  const auto q = CalibrationProfile::load(path);
  CHECK(q.to_json() == p.to_json());
  CHECK(q.collective_time(CollectiveKind::kAllReduce, kGiB, 16, 2)->time_s ==
        p.collective_time(CollectiveKind::kAllReduce, kGiB, 16, 2)->time_s);
  CHECK(q.is_completed("gemm/grid"));
  REQUIRE(q.failures().size() == 1);
  CHECK(*q.failures()[0].bytes == 1 << 30);
  // GEMM: 2 * 4096^3 FLOP in 0.2 ms = 687.2 TFLOP/s over a 989 TFLOP/s peak = 69.5 %.
  CHECK(*q.gemm_efficiency(4096, 4096, 4096) == Approx(2.0 * 4096 * 4096 * 4096 / 0.2e-3 / 989e12));
  CHECK(*q.gemm_efficiency(4000, 4200, 4096) == *q.gemm_efficiency(4096, 4096, 4096));  // nearest shape
  CHECK(*q.gemm_peak_flops() == 989e12);
  CHECK(*q.hbm_Bps() == Approx(2.0 * kGiB / 1e-3));                 // 2 GiB read + write in 1 ms
  CHECK(*q.adamw_Bps("fp32") == Approx(28.0 * (1 << 20) / 20e-6));  // 28 bytes/param, 2^20 params in 20 us
  CHECK_FALSE(q.adamw_Bps("bf16"));
}

TEST_CASE("a profile with the same series twice is refused naming the second", "[profile]") {
  nlohmann::json j = h100().to_json();
  REQUIRE(!j["collectives"].empty());
  j["collectives"].push_back(j["collectives"][0]);
  const std::string at = "/collectives/" + std::to_string(j["collectives"].size() - 1);
  CHECK_THROWS_WITH(CalibrationProfile::from_json(j, "p.json"),
                    Catch::Contains("p.json") && Catch::Contains(at) && Catch::Contains("duplicate series"));
  // A sample that is not an object: its pointer.
  j = h100().to_json();
  j["collectives"][0]["samples"][1] = 3;
  CHECK_THROWS_WITH(CalibrationProfile::from_json(j, "p.json"), Catch::Contains("/collectives/0/samples/1"));
}

TEST_CASE("an empty profile answers nullopt everywhere", "[profile]") {
  const CalibrationProfile p;
  CHECK_FALSE(p.collective_time(CollectiveKind::kAllGather, kMiB, 8, 1));
  CHECK_FALSE(p.gemm_efficiency(1024, 1024, 1024));
  CHECK_FALSE(p.gemm_peak_flops());
  CHECK_FALSE(p.hbm_Bps());
  CHECK_FALSE(p.adamw_Bps("fp32"));
}

TEST_CASE("single-node series answer other single-node rank counts", "[profile]") {
  // all_reduce on 2 ranks (RTX 2080 Ti): busbw from the 2-rank fit, alpha scaled by steps 2*(4-1) / 2*(2-1)
  // = 3.
  const auto p = import_nccl_tests({test::nccl_log("rtx2080ti_1node_2gpu_all_reduce_all_gather.txt")}, {});
  const auto est = p.collective_time(CollectiveKind::kAllReduce, 256 * kMiB, 4, 1);
  REQUIRE(est);
  CHECK(est->source == Source::kFittedAlphaBeta);
  const CollectiveSeries* s = nullptr;
  for (const auto& x : p.collectives())
    if (x.kind == CollectiveKind::kAllReduce && x.placement == "out_of_place") s = &x;
  REQUIRE(s);
  CHECK(est->time_s == Approx(3 * s->alpha_beta.alpha_s + 256.0 * kMiB * 1.5 / *s->busbw_Bps()));
  // Its busbw is near the log's 4.00 GB/s plateau; the relative-error fit over 8 B .. 1 GiB trades a few
  // percent of the plateau for the latency-bound sizes (3.86 GB/s here), so within 5 %.
  CHECK(*s->busbw_Bps() == Approx(4e9).epsilon(0.05));
}

TEST_CASE("corrupt profiles raise InputError naming file and JSON pointer", "[profile]") {
  const auto path = test::temp_path("corrupt.json");
  const Json good = h100().to_json();
  auto expect_error = [&](const Json& j, const std::string& where) {
    test::write_text(path, j.dump(1));
    CHECK_THROWS_AS(CalibrationProfile::load(path), InputError);
    CHECK_THROWS_WITH(CalibrationProfile::load(path), Catch::Contains(path + ": " + where));
  };
  SECTION("unknown key") {
    Json j = good;
    j["collectives"][0]["sampels"] = Json::array();
    expect_error(j, "/collectives/0");
  }
  SECTION("misspelt collective") {
    Json j = good;
    j["collectives"][0]["kind"] = "all_reduse";
    expect_error(j, "/collectives/0/kind");
    test::write_text(path, j.dump());
    CHECK_THROWS_WITH(CalibrationProfile::load(path), Catch::Contains("did you mean \"all_reduce\""));
  }
  SECTION("negative time") {
    Json j = good;
    j["collectives"][0]["samples"][3]["time_s"] = -1.0;
    expect_error(j, "/collectives/0/samples/3/time_s");
  }
  SECTION("wrong schema") {
    Json j = good;
    j["schema"] = "shardplan.calibration/2";
    expect_error(j, "/schema");
  }
  SECTION("more nodes than ranks") {
    Json j = good;
    j["collectives"][0]["nodes"] = 17;
    expect_error(j, "/collectives/0/nodes");
  }
  SECTION("truncated file") {
    const std::string text = good.dump(1);
    test::write_text(path, text.substr(0, text.size() / 3));
    CHECK_THROWS_WITH(CalibrationProfile::load(path), Catch::Contains(path + ": line "));
  }
}

TEST_CASE("describe names every curve with its fit residuals", "[profile]") {
  const std::string d = h100().describe();
  CHECK_THAT(d, Catch::Contains("all_reduce"));
  CHECK_THAT(d, Catch::Contains("ranks   16 nodes   2"));
  CHECK_THAT(d, Catch::Contains("alpha-beta residual"));
  CHECK_THAT(d, Catch::Contains("curve"));
  CHECK_THAT(d, Catch::Contains("NVIDIA H100 80GB HBM3"));
}

TEST_CASE("placement-aware query: NVLink domains that span hosts, and model-shape scaling",
          "[profile][placement]") {
  // A GB200 NVL72 all-reduce log: 72 ranks on 18 trays (hosts) of 4 GPUs, one NVLink domain. The cluster
  // queried has 18 hosts per domain (72 / 4), so the series is 1 domain of 72 ranks: the query for 72 ranks
  // on 18 hosts in 1 domain is the same placement and answers from the measured curve.
  CalibrationProfile p;
  CollectiveSeries s;
  s.kind = CollectiveKind::kAllReduce;
  s.ranks = 72;
  s.nodes = 18;
  s.dtype = "float";
  s.source = "synthetic";
  // t = 50 us + S / 400e9 (algbw), sizes 1 MiB .. 1 GiB.
  for (std::int64_t b = kMiB; b <= kGiB; b *= 4)
    s.samples.push_back({b, 50e-6 + double(b) / 400e9, std::nullopt, std::nullopt, 1, 0});
  p.add_collective_samples(s);
  // Model shape: 10 us per rank + S / 300e9 (any positive shape works; the answer is scaled to the
  // measurement).
  auto shape = [](int ranks, double bytes) { return 10e-6 * ranks + bytes / 300e9; };
  std::string why;
  auto e = p.collective_time(CollectiveKind::kAllReduce, 16 * kMiB, {72, 18, 1, 72, 18}, shape, &why);
  REQUIRE(e);
  CHECK(e->source == CollectiveEstimate::Source::kMeasuredCurve);
  CHECK(e->time_s == Approx(50e-6 + 16.0 * kMiB / 400e9).epsilon(0.01));
  // 36 ranks on 9 trays, same domain and 4 per host: the model's shape scaled by measured / model of the
  // 72-rank series at the same size: shape(36, S) · t72(S) / shape(72, S).
  const double S = 64.0 * kMiB;
  e = p.collective_time(CollectiveKind::kAllReduce, 64 * kMiB, {36, 9, 1, 36, 18}, shape, &why);
  REQUIRE(e);
  CHECK(e->source == CollectiveEstimate::Source::kScaledCurve);
  CHECK(e->time_s == Approx(shape(36, S) * (50e-6 + S / 400e9) / shape(72, S)).epsilon(0.01));
  // Beyond the measured sizes on the same placement: the shape scaled at the largest measured size.
  e = p.collective_time(CollectiveKind::kAllReduce, 4 * kGiB, {72, 18, 1, 72, 18}, shape, &why);
  REQUIRE(e);
  CHECK(e->source == CollectiveEstimate::Source::kScaledCurve);
  CHECK(e->time_s == Approx(shape(72, 4.0 * kGiB) * (50e-6 + kGiB / 400e9) / shape(72, kGiB)).epsilon(0.01));
  // 144 ranks over two domains: no series spans several domains, so the profile says it cannot answer.
  CHECK_FALSE(p.collective_time(CollectiveKind::kAllReduce, kGiB, {144, 36, 2, 72, 18}, shape, &why));
  CHECK(why.find("72 ranks on 18 hosts (1 NVLink domain); none spans several NVLink domains") !=
        std::string::npos);
  // 18 ranks, one per tray (stride 4): 1 rank per host, not the series' 4, so not the same shape either.
  CHECK_FALSE(p.collective_time(CollectiveKind::kAllReduce, kGiB, {18, 18, 1, 18, 18}, shape, &why));
  // Host count alone would have matched a DGX-style reading of the same log (18 hosts = 18 domains of 4):
  // with 1 host per domain the series is 18 domains of 4 ranks, not the single-domain query.
  CHECK_FALSE(p.collective_time(CollectiveKind::kAllReduce, kGiB, {72, 18, 1, 72, 1}, shape, &why));
}

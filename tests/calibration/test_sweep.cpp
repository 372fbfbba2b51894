// The sweep driver with a communicator double that errors, hangs or returns wrong results mid-sweep: the
// profile on disk keeps every finished benchmark, records each failure with the size, and --resume reruns
// only those.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "calibration/measure.hpp"
#include "calibration/sweep.hpp"
#include "helpers.hpp"

using namespace shardplan;
using namespace shardplan::calibration;

namespace {

/// Time advances only when the driver sleeps, so a hang reaches its deadline instantly.
class FakeClock final : public SweepClock {
 public:
  double now_s() override { return t_; }
  void sleep_s(double s) override { t_ += s; }

 private:
  double t_ = 0;
};

/// What goes wrong, per (kind, ranks): at which whole-buffer size.
struct Script {
  std::map<std::pair<CollectiveKind, int>, std::int64_t> error_at, hang_at, wrong_at;
};

struct Counters {
  int created = 0, aborted = 0;
  std::set<std::string> timed;  // "kind/ranks" that ran timed ops
};

class FakeComm final : public CollectiveComm {
 public:
  FakeComm(int ranks, const Script& s, Counters& c) : ranks_(ranks), script_(s), counters_(c) {}
  int ranks() const override { return ranks_; }
  int nodes() const override { return 1; }
  std::int64_t max_buffer_bytes(CollectiveKind, CommDType) const override { return std::int64_t{1} << 30; }
  void start(const CommOp& op) override {
    REQUIRE_FALSE(aborted_);
    op_ = op;
    counters_.timed.insert(std::string(collective_name(op.kind)) + "/" + std::to_string(ranks_));
  }
  CommPoll poll() override {
    const auto key = std::make_pair(op_.kind, ranks_);
    if (hit(script_.error_at, key))
      return {CommPoll::State::kError, 0, "unhandled cuda error (ncclCommGetAsyncError)"};
    if (hit(script_.hang_at, key)) return {CommPoll::State::kPending, 0, ""};
    // Modelled time: 5 us + S / 1e11 per iteration.
    return {CommPoll::State::kDone, double(op_.iterations) * (5e-6 + double(op_.buffer_bytes) / 1e11), ""};
  }
  std::string verify() override {
    return hit(script_.wrong_at, {op_.kind, ranks_}) ? "rank 1 element 0: expected 3, got 0" : "";
  }
  void abort() override {
    aborted_ = true;
    ++counters_.aborted;
  }

 private:
  bool hit(const std::map<std::pair<CollectiveKind, int>, std::int64_t>& m,
           std::pair<CollectiveKind, int> k) const {
    auto it = m.find(k);
    return it != m.end() && op_.buffer_bytes >= it->second;
  }
  int ranks_;
  const Script& script_;
  Counters& counters_;
  CommOp op_;
  bool aborted_ = false;
};

NcclSweepOptions small_sweep() {
  NcclSweepOptions o;
  o.kinds = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter};
  o.dtypes = {CommDType::kBf16};
  o.min_bytes = 1024;
  o.max_bytes = 64 * 1024;  // 1, 2, 4, ..., 64 KiB: 7 sizes
  o.measure.min_time_s = 1e-4;
  o.measure.repetitions = 3;
  o.measure.warmup = 1;
  o.deadline_s = 5;
  o.poll_interval_s = 0.5;
  return o;
}

const CollectiveSeries* find(const CalibrationProfile& p, CollectiveKind k, int ranks) {
  for (const auto& s : p.collectives())
    if (s.kind == k && s.ranks == ranks) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("sweep keeps finished benchmarks on disk and records failures", "[sweep]") {
  Script script;
  script.hang_at[{CollectiveKind::kAllGather, 2}] = 32 * 1024;       // times out at 32 KiB
  script.error_at[{CollectiveKind::kReduceScatter, 4}] = 16 * 1024;  // async NCCL error at 16 KiB
  Counters counters;
  CommFactory factory = [&](int ranks) {
    ++counters.created;
    return std::make_unique<FakeComm>(ranks, script, counters);
  };
  FakeClock clock;
  const auto path = test::temp_path("sweep.json");
  std::remove(path.c_str());
  CalibrationProfile profile;
  int saves = 0;
  RunnerHooks hooks{[&](const CalibrationProfile& p) { p.save(path), ++saves; }, {}};
  const auto entries = nccl_sweep_entries(factory, 4, small_sweep(), clock);  // groups of 2 and 4 GPUs
  REQUIRE(entries.size() == 4);
  CHECK(run_benchmarks(profile, entries, false, hooks) == 2);
  CHECK(saves == 4);  // after every entry

  const auto disk = CalibrationProfile::load(path);
  CHECK(disk.is_completed("nccl/reduce_scatter/n2/bfloat16"));
  CHECK(disk.is_completed("nccl/all_gather/n4/bfloat16"));
  CHECK_FALSE(disk.is_completed("nccl/all_gather/n2/bfloat16"));
  CHECK_FALSE(disk.is_completed("nccl/reduce_scatter/n4/bfloat16"));
  REQUIRE(disk.failures().size() == 2);
  CHECK(disk.failures()[0].benchmark == "nccl/all_gather/n2/bfloat16");
  CHECK(*disk.failures()[0].bytes == 32 * 1024);
  CHECK_THAT(disk.failures()[0].error, Catch::Contains("deadline"));
  CHECK(disk.failures()[1].benchmark == "nccl/reduce_scatter/n4/bfloat16");
  CHECK(*disk.failures()[1].bytes == 16 * 1024);
  CHECK_THAT(disk.failures()[1].error, Catch::Contains("unhandled cuda error"));
  // Finished series have all 7 sizes; failed ones keep the sizes measured before the failure (1..16 KiB, 1..8
  // KiB).
  CHECK(find(disk, CollectiveKind::kAllGather, 4)->samples.size() == 7);
  CHECK(find(disk, CollectiveKind::kReduceScatter, 2)->samples.size() == 7);
  CHECK(find(disk, CollectiveKind::kAllGather, 2)->samples.size() == 5);
  CHECK(find(disk, CollectiveKind::kReduceScatter, 4)->samples.size() == 4);
  // Each failure aborted its communicator; the next entry of the group got a fresh one: 2 + 1 + 0 creations.
  CHECK(counters.aborted == 2);
  CHECK(counters.created == 3);
  // Measured times are the modelled ones: 64 KiB -> 5 us + 65536 / 1e11 s.
  const auto& last = find(disk, CollectiveKind::kAllGather, 4)->samples.back();
  CHECK(last.bytes == 65536);
  CHECK(last.time_s == Approx(5e-6 + 65536 / 1e11));

  SECTION("resume reruns only what failed") {
    Script healthy;
    Counters c2;
    CommFactory ok = [&](int ranks) {
      ++c2.created;
      return std::make_unique<FakeComm>(ranks, healthy, c2);
    };
    auto resumed = CalibrationProfile::load(path);
    CHECK(run_benchmarks(resumed, nccl_sweep_entries(ok, 4, small_sweep(), clock), true, hooks) == 0);
    CHECK(c2.timed == std::set<std::string>{"all_gather/2", "reduce_scatter/4"});
    const auto again = CalibrationProfile::load(path);
    CHECK(again.completed().size() == 4);
    CHECK(again.failures().size() == 2);  // the history of what failed stays
    CHECK(find(again, CollectiveKind::kAllGather, 2)->samples.size() == 7);  // replaced, not appended
  }
}

TEST_CASE("sweep records wrong results and communicators that cannot be created", "[sweep]") {
  Script script;
  script.wrong_at[{CollectiveKind::kAllGather, 2}] = 4096;
  Counters counters;
  CommFactory factory = [&](int ranks) -> std::unique_ptr<CollectiveComm> {
    if (ranks == 4) throw std::runtime_error("ncclCommInitAll: invalid usage");
    return std::make_unique<FakeComm>(ranks, script, counters);
  };
  FakeClock clock;
  CalibrationProfile profile;
  CHECK(run_benchmarks(profile, nccl_sweep_entries(factory, 4, small_sweep(), clock), false, {}) == 3);
  REQUIRE(profile.failures().size() == 3);
  CHECK_THAT(profile.failures()[0].error, Catch::Contains("wrong result"));
  CHECK(*profile.failures()[0].bytes == 4096);
  CHECK_THAT(profile.failures()[1].error, Catch::Contains("ncclCommInitAll"));
  CHECK(profile.is_completed("nccl/reduce_scatter/n2/bfloat16"));
}

TEST_CASE("group sizes follow the GPUs present, one GPU still records single-rank numbers", "[sweep]") {
  NcclSweepOptions o;
  CHECK(nccl_group_sizes(o, 8) == std::vector<int>{2, 4, 8});
  CHECK(nccl_group_sizes(o, 4) == std::vector<int>{2, 4});
  CHECK(nccl_group_sizes(o, 1) == std::vector<int>{1});
}

TEST_CASE("measure grows iterations to the minimum time and reports median and spread", "[sweep]") {
  // Each iteration takes 1e-4 s. Growth: 1 (1e-4 s) -> x10 cap -> 10 -> 100 -> predicted 1.4*0.05/0.01*100 =
  // 700 (0.07 s >= 0.05 s): 700 iterations per repetition.
  std::vector<std::int64_t> calls;
  const auto m = measure(
      [&](std::int64_t iters) {
        calls.push_back(iters);
        return double(iters) * 1e-4;
      },
      {0.05, 2, 5, 1 << 20});
  CHECK(m.iterations == 700);
  CHECK(m.repetitions == 5);
  CHECK(m.median_s == Approx(1e-4));
  CHECK(m.min_s == Approx(1e-4));
  CHECK(calls == std::vector<std::int64_t>{1, 1, 1, 10, 100, 700, 700, 700, 700, 700, 700});
}

// Benchmark runner and NCCL sweep (see sweep.hpp).
#include "calibration/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

namespace shardplan::calibration {

std::string_view comm_dtype_name(CommDType d) {
  return d == CommDType::kBf16 ? "bfloat16" : "float";
}
std::int64_t comm_dtype_bytes(CommDType d) {
  return d == CommDType::kBf16 ? 2 : 4;
}

double SteadyClock::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void SteadyClock::sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

int run_benchmarks(CalibrationProfile& profile, const std::vector<BenchmarkEntry>& entries, bool resume,
                   const RunnerHooks& hooks) {
  auto say = [&](const std::string& s) {
    if (hooks.progress) hooks.progress(s);
  };
  int failed = 0;
  for (const auto& e : entries) {
    if (resume && profile.is_completed(e.id)) {
      say(e.id + ": already in the profile, skipped (--resume)");
      continue;
    }
    say(e.id + ": running");
    try {
      e.run(profile);
      profile.mark_completed(e.id);
      say(e.id + ": done");
    } catch (const BenchmarkFailure& f) {
      ++failed;
      profile.record_failure({e.id, f.what(), f.bytes, utc_now_iso8601()});
      say(e.id + ": FAILED: " + f.what());
    } catch (const std::exception& ex) {
      ++failed;
      profile.record_failure({e.id, ex.what(), std::nullopt, utc_now_iso8601()});
      say(e.id + ": FAILED: " + ex.what());
    }
    if (hooks.save) hooks.save(profile);
  }
  return failed;
}

std::vector<int> nccl_group_sizes(const NcclSweepOptions& o, int gpus) {
  if (gpus == 1) return {1};
  std::vector<int> out;
  for (int g : o.group_sizes)
    if (g >= 1 && g <= gpus) out.push_back(g);
  return out;
}

std::string nccl_benchmark_id(CollectiveKind kind, int ranks, CommDType dtype) {
  return "nccl/" + std::string(collective_name(kind)) + "/n" + std::to_string(ranks) + "/" +
         std::string(comm_dtype_name(dtype));
}

namespace {

/// Communicator of one group size, shared by that group's entries.
struct Group {
  int ranks = 0;
  std::unique_ptr<CollectiveComm> comm;
};

/// Starts `op` and polls until done; on error or missed deadline aborts the group and throws
/// BenchmarkFailure.
double run_op(Group& g, const CommOp& op, const NcclSweepOptions& o, SweepClock& clock) {
  auto fail = [&](const std::string& why) {
    g.comm->abort();
    g.comm.reset();
    throw BenchmarkFailure(why, op.buffer_bytes);
  };
  try {
    g.comm->start(op);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  const double t0 = clock.now_s();
  for (;;) {
    const CommPoll p = g.comm->poll();
    if (p.state == CommPoll::State::kDone) return p.elapsed_s;
    if (p.state == CommPoll::State::kError) fail(p.error);
    if (clock.now_s() - t0 > o.deadline_s)
      fail("no completion within the " + std::to_string(o.deadline_s) + " s deadline (aborted)");
    clock.sleep_s(o.poll_interval_s);
  }
}

void run_collective(Group& g, const CommFactory& factory, CollectiveKind kind, CommDType dtype,
                    const NcclSweepOptions& o, SweepClock& clock, CalibrationProfile& profile) {
  if (!g.comm) {
    g.comm = factory(g.ranks);
    if (!g.comm)
      throw BenchmarkFailure("could not create a communicator of " + std::to_string(g.ranks) + " ranks",
                             std::nullopt);
  }
  CollectiveSeries series;
  series.kind = kind;
  series.ranks = g.comm->ranks();
  series.nodes = g.comm->nodes();
  series.dtype = std::string(comm_dtype_name(dtype));
  series.source = "shardplan-calibrate " + std::string(shardplan_version());
  const std::int64_t unit = static_cast<std::int64_t>(g.ranks) * comm_dtype_bytes(dtype);
  std::int64_t max_bytes = g.comm->max_buffer_bytes(kind, dtype);
  if (o.max_bytes > 0) max_bytes = std::min(max_bytes, o.max_bytes);
  for (std::int64_t S = std::max(o.min_bytes, unit); S <= max_bytes; S *= 2) {
    const std::int64_t bytes = S / unit * unit;  // whole elements on every rank
    Measurement m;
    try {
      run_op(g, CommOp{kind, bytes, dtype, 1, true}, o, clock);  // correctness, outside the timed loop
      if (std::string bad = g.comm->verify(); !bad.empty())
        throw BenchmarkFailure("wrong result: " + bad, bytes);
      m = measure(
          [&](std::int64_t iters) {
            return run_op(g, {kind, bytes, dtype, iters, false}, o, clock);
          },
          o.measure);
    } catch (...) {
      if (!series.samples.empty())
        profile.replace_collective_series(series);  // keep the sizes already measured
      throw;
    }
    series.samples.push_back({bytes, m.median_s, m.min_s, m.max_s, m.repetitions, m.iterations});
  }
  if (series.samples.empty())
    throw BenchmarkFailure(
        "no size in [" + std::to_string(o.min_bytes) + ", " + std::to_string(max_bytes) + "] fits",
        std::nullopt);
  profile.replace_collective_series(series);
}

}  // namespace

std::vector<BenchmarkEntry> nccl_sweep_entries(const CommFactory& factory, int gpus,
                                               const NcclSweepOptions& o, SweepClock& clock) {
  std::vector<BenchmarkEntry> entries;
  for (int ranks : nccl_group_sizes(o, gpus)) {
    auto group = std::make_shared<Group>();
    group->ranks = ranks;
    for (CollectiveKind kind : o.kinds)
      for (CommDType dtype : o.dtypes)
        entries.push_back({nccl_benchmark_id(kind, ranks, dtype),
                           [group, factory, kind, dtype, o, &clock](CalibrationProfile& p) {
                             run_collective(*group, factory, kind, dtype, o, clock, p);
                           }});
  }
  return entries;
}

}  // namespace shardplan::calibration

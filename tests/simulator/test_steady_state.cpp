// The steady-state extension of gradient accumulation (simulator/simulate/steady_state.hpp) against the full
// simulation of every micro-batch: step time, compute, exposed communication and every communication and
// memory output agree to 1e-9 relative over a sweep of runtimes, ZeRO stages, resharding, prefetch, TP, HSDP,
// offload, AC and accumulation 1..64, and the extension is actually taken where it can be.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "sim_helpers.hpp"
#include "simulator/simulate/steady_state.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

std::string describe(const Plan& p) {
  std::string s = std::string(to_string(p.runtime)) + " zero " + std::to_string(p.zero) + " tp " +
                  std::to_string(p.tp) + " shard_group " + std::to_string(p.shard_group) + " ac " +
                  to_string(p.ac) + " prefetch " + std::to_string(p.prefetch) + " reshard " +
                  std::to_string(p.reshard()) + " offload " + to_string(p.offload) + " ga " +
                  std::to_string(p.grad_accum);
  if (p.compile) s += " compile";
  if (p.async_tp) s += " async_tp";
  return s;
}

bool close(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max({std::abs(a), std::abs(b), 1e-12});
}

void require_same(const Result& ext, const Result& full) {
  CHECK(close(ext.step_s, full.step_s));
  CHECK(close(ext.compute_s, full.compute_s));
  CHECK(close(ext.exposed_comm_s, full.exposed_comm_s));
  CHECK(close(ext.tokens_per_s_per_gpu, full.tokens_per_s_per_gpu));
  CHECK(close(ext.mfu, full.mfu));
  CHECK(close(ext.optimizer_s, full.optimizer_s));
  for (int k = 0; k < kCommKinds; ++k) {
    INFO("comm kind " << to_string(static_cast<CommKind>(k)));
    const CommStats& a = ext.comm[static_cast<std::size_t>(k)];
    const CommStats& b = full.comm[static_cast<std::size_t>(k)];
    CHECK(close(a.bytes_per_rank, b.bytes_per_rank));
    CHECK(close(a.time_s, b.time_s));
    CHECK(close(a.exposed_s, b.exposed_s));
    CHECK(a.count == b.count);
  }
  // Memory: the same walk of the same effects, so exactly equal.
  CHECK(ext.persistent_bytes == full.persistent_bytes);
  CHECK(ext.peak_bytes == full.peak_bytes);
  CHECK(ext.peak_reserved_bytes == full.peak_reserved_bytes);
  CHECK(ext.first_step_peak_bytes == full.first_step_peak_bytes);
  CHECK(ext.breakdown == full.breakdown);
  CHECK(ext.peak_phase == full.peak_phase);
  CHECK(close(ext.peak_time_s, full.peak_time_s));
  CHECK(ext.fits == full.fits);
}

struct SweepCase {
  Runtime runtime;
  int zero;
  int shard_group;
  int tp;
  AcMode ac;
  int prefetch;
  std::optional<bool> reshard;
  Offload offload;
  bool async_tp;
  bool compile;
};

}  // namespace

TEST_CASE("steady-state extension equals the full simulation of every micro-batch", "[steady]") {
  // 8 blocks of a Llama-2-7B shape on 16 H100s (2 nodes): HSDP spans both, TP 2 stays in a node.
  Setup s(ModelGraph::from_spec(shardplan::test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  const std::vector<SweepCase> cases = {
      {Runtime::kFsdp2, 3, 0, 1, AcMode::kNone, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp2, 3, 0, 1, AcMode::kFull, 2, {}, Offload::kNone, false, true},
      {Runtime::kFsdp2, 3, 0, 1, AcMode::kSelective, 0, {}, Offload::kNone, false, false},
      {Runtime::kFsdp2, 3, 0, 1, AcMode::kNone, 1, false, Offload::kNone, false, false},
      {Runtime::kFsdp2, 3, 8, 1, AcMode::kFull, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp2, 2, 0, 1, AcMode::kNone, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp2, 0, 0, 1, AcMode::kFull, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp2, 3, 0, 2, AcMode::kSelective, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp2, 3, 0, 2, AcMode::kFull, 1, {}, Offload::kNone, true, true},
      {Runtime::kFsdp2, 3, 0, 1, AcMode::kFull, 1, {}, Offload::kOptimizer, false, false},
      {Runtime::kFsdp2, 3, 0, 1, AcMode::kFull, 1, {}, Offload::kParams, false, false},
      {Runtime::kFsdp1, 3, 0, 1, AcMode::kNone, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp1, 3, 8, 1, AcMode::kFull, 1, {}, Offload::kNone, false, false},
      {Runtime::kFsdp1, 2, 0, 2, AcMode::kSelective, 1, {}, Offload::kNone, false, false},
      {Runtime::kDeepSpeed, 1, 0, 1, AcMode::kFull, 1, {}, Offload::kNone, false, false},
      {Runtime::kDeepSpeed, 2, 0, 1, AcMode::kNone, 1, {}, Offload::kNone, false, false},
      {Runtime::kDeepSpeed, 2, 0, 1, AcMode::kFull, 1, {}, Offload::kOptimizer, false, false},
      {Runtime::kDeepSpeed, 3, 0, 1, AcMode::kFull, 2, {}, Offload::kNone, false, false},
      {Runtime::kDeepSpeed, 3, 0, 2, AcMode::kFull, 1, {}, Offload::kOptimizer, false, false},
  };
  Simulator full(s.model, *s.cluster, *s.costs, SimulatorOptions{false});
  Simulator steady(s.model, *s.cluster, *s.costs);
  // The planner's cheap pass: no allocator replay (a replayed run needs every micro-batch's allocations and
  // is always simulated in full); reserved memory is then the per-stream bound, which the extension keeps.
  full.set_allocator_replay(false);
  steady.set_allocator_replay(false);
  int runs = 0, long_runs = 0;
  for (const SweepCase& c : cases) {
    for (int ga : {1, 2, 4, 5, 6, 7, 8, 13, 64}) {
      Plan p;
      p.runtime = c.runtime;
      p.zero = c.zero;
      p.shard_group = c.shard_group;
      p.tp = c.tp;
      p.ac = c.ac;
      p.prefetch = c.prefetch;
      p.reshard_after_forward = c.reshard;
      p.offload = c.offload;
      p.async_tp = c.async_tp;
      p.compile = c.compile;
      p.seq = 4096;
      p.grad_accum = ga;
      Plan r;
      try {
        r = s.resolve(p);
      } catch (const InputError&) {
        continue;  // a combination the runtime does not have (e.g. FSDP1 parameter offload with accumulation)
      }
      INFO(describe(r));
      const Result b = full.run(r);
      const auto fallbacks = steady.stats().fallbacks;
      const Result a = steady.run(r);
      if (steady.stats().fallbacks != fallbacks)
        WARN("fallback: " << steady.stats().last_fallback << ": " << describe(r));
      require_same(a, b);
      ++runs;
      if (ga > kSteadyPrefix + 1) ++long_runs;
    }
  }
  // The extension is taken for every plan with more micro-batches than it simulates (a check that failed
  // would fall back to the full run, and this equality would hold vacuously).
  CHECK(runs >= 150);
  CHECK(full.stats().extended == 0);
  CHECK(steady.stats().extended == long_runs);
  CHECK(steady.stats().fallbacks == 0);
}

TEST_CASE("steady-state extension simulates a fixed number of micro-batches", "[steady]") {
  // At accumulation 64 the truncated program holds micro-batches 0, 1, 2 and 63: 4 x the tasks of one
  // micro-batch plus the optimizer, against 64 x for the full run.
  Setup s(ModelGraph::from_spec(shardplan::test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  Plan p;
  p.seq = 4096;
  p.grad_accum = 64;
  const Plan r = s.resolve(p);
  Simulator full(s.model, *s.cluster, *s.costs, SimulatorOptions{false});
  Simulator steady(s.model, *s.cluster, *s.costs);
  full.set_allocator_replay(false);
  steady.set_allocator_replay(false);
  full.run(r);
  steady.run(r);
  const auto n_full = full.program().tasks.size(), n_steady = steady.program().tasks.size();
  // Tasks per micro-batch: the full program minus the truncated one is exactly 60 micro-batches.
  REQUIRE((n_full - n_steady) % 60 == 0);
  const auto per_mb = (n_full - n_steady) / 60;
  CHECK(n_steady < 5 * per_mb);
  CHECK(n_steady >= 4 * per_mb);
  // A detail run draws every task: it simulates in full.
  steady.run(r, true);
  CHECK(steady.program().tasks.size() == n_full);
  // A run that replays its allocations through the caching allocator (simulate, memory, validate) is
  // truncated too: the replay repeats the steady micro-batch (AllocatorReplay, ReplayRepeat; issue 30).
  steady.set_allocator_replay(true);
  steady.run(r);
  CHECK(steady.program().tasks.size() < 5 * per_mb);
  CHECK(steady.run(r).allocator.replayed);
}

// Steady-state extension: the checks that make the truncated run's steady micro-batch an exact period of the
// step, and the Result arithmetic that adds the skipped copies.
#include "simulator/simulate/steady_state.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace shardplan {

namespace {

bool same_task(const Task& a, const Task& b) {
  return a.type == b.type && a.lane == b.lane && a.duration_s == b.duration_s && a.cpu_s == b.cpu_s &&
         a.n_effects == b.n_effects && a.unit == b.unit && a.backward == b.backward &&
         a.comm_kind == b.comm_kind && a.collectives == b.collectives;
}

/// `x` (a task index in the copied micro-batch, or -1) refers to the same task as `y` (in the one before)
/// shifted by one micro-batch of `len` tasks, and reaches back no further than `oldest`.
bool same_ref(std::int32_t x, std::int32_t y, std::int32_t len, std::int32_t oldest) {
  if (x < 0 || y < 0) return x < 0 && y < 0;
  return x - len == y && x >= oldest;
}

/// The checks of find_steady_state on one truncated run; each returns why the run is not periodic, or
/// nullptr.
struct SteadyChecks {
  const Program& prog;
  const Timeline& tl;
  const SteadyExtension& x;
  std::int32_t len;  ///< tasks per micro-batch
  bool cpu_ahead;    ///< the CPU issues a micro-batch in less time than the GPU runs it
  double tol;        ///< timings agree to rounding

  bool shifted(double later, double earlier, double period) const {
    return std::abs(later - earlier - period) <= tol;
  }
  const Task& task(std::int32_t i) const { return prog.tasks[static_cast<std::size_t>(i)]; }
  const TaskTiming& timing(std::int32_t i) const { return tl.timing[static_cast<std::size_t>(i)]; }

  /// 1. The copied micro-batch repeats the one before: same tasks, effects, references and timings, and no
  /// net allocation per memory category.
  const char* copied_repeats() const {
    std::array<Bytes, kMemCategories> net{};
    for (std::int32_t i = x.block_lo; i < x.block_hi; ++i) {
      const Task& a = task(i);
      const Task& b = task(i - len);
      if (!same_task(a, b) || !same_ref(a.cpu_wait_for, b.cpu_wait_for, len, x.block_prev))
        return "a task or its CPU wait differs";
      for (std::size_t d = 0; d < a.deps.size(); ++d)
        if (!same_ref(a.deps[d], b.deps[d], len, x.block_prev))
          return "a dependency differs or reaches back two micro-batches";
      for (std::uint32_t e = 0; e < a.n_effects; ++e) {
        const MemEffect& ea = prog.effects[a.first_effect + e];
        const MemEffect& eb = prog.effects[b.first_effect + e];
        if (ea.category != eb.category || ea.pool != eb.pool || ea.delta_bytes != eb.delta_bytes)
          return "a memory effect differs";
        net[static_cast<std::size_t>(ea.category)] += ea.delta_bytes;
      }
      const TaskTiming& ta = timing(i);
      const TaskTiming& tb = timing(i - len);
      if (!shifted(ta.issue_s, tb.issue_s, x.cpu_period_s) || !shifted(ta.start_s, tb.start_s, x.period_s) ||
          !shifted(ta.end_s, tb.end_s, x.period_s))
        return "timings are not shifted by the period";
      if (cpu_ahead && (ta.blocked_by < 0 || a.cpu_wait_for >= 0))
        return "the CPU runs ahead but sets a start or blocks";
      // What set each start (and so how idle time is charged) repeats too.
      if (!same_ref(ta.blocked_by, tb.blocked_by, len, 0) ||
          !same_ref(ta.cpu_waited_for, tb.cpu_waited_for, len, 0))
        return "what set a start differs";
    }
    // No net allocation: every copy starts from the allocated bytes (per category) that the copied one
    // started from, so it repeats its memory curve and cannot raise a peak.
    for (Bytes b : net)
      if (b != 0) return "net allocation per micro-batch";
    return nullptr;
  }

  /// Per allocator pool, the copied micro-batch's rounded net, as the engine counts it (engine.cpp): an
  /// allocation adds count x the rounded size of each of its tensors to its group and pool, a free takes back
  /// its group's whole rounded bytes (a group may be allocated by several effects, before the micro-batch).
  const char* no_net_per_pool() const {
    std::array<Bytes, 256> pool_net{};
    std::vector<Bytes> group_rounded(static_cast<std::size_t>(std::max(prog.tensors, 0)), 0);
    std::vector<std::uint8_t> group_pool(group_rounded.size(), 0);
    for (std::int32_t i = 0; i < x.block_hi; ++i) {
      const Task& t = task(i);
      const bool copied = i >= x.block_lo;
      for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
        const MemEffect& fx = prog.effects[e];
        Bytes d = 0;
        if (fx.tensor >= 0 && static_cast<std::size_t>(fx.tensor) < group_rounded.size()) {
          const auto g = static_cast<std::size_t>(fx.tensor);
          if (fx.delta_bytes > 0) {
            d = fx.count * allocator_round(fx.delta_bytes / std::max<int>(fx.count, 1));
            group_rounded[g] += d;
            group_pool[g] = fx.pool;
          } else if (fx.delta_bytes < 0) {
            d = -group_rounded[g];
            group_rounded[g] = 0;
          }
          if (copied) pool_net[fx.delta_bytes > 0 ? fx.pool : group_pool[g]] += d;
        } else if (copied) {
          pool_net[fx.pool] += allocator_round(fx.delta_bytes);
        }
      }
    }
    for (Bytes b : pool_net)
      if (b != 0) return "net allocation in a pool";
    return nullptr;
  }

  /// 2. The last micro-batch and the optimizer refer to nothing older than the two steady micro-batches
  /// (which map to the full step's micro-batches m-3 and m-2, copies x period later).
  const char* tail_refs_recent() const {
    const auto n = static_cast<std::int32_t>(prog.tasks.size());
    for (std::int32_t i = x.tail; i < n; ++i) {
      const Task& t = task(i);
      if (t.cpu_wait_for >= 0 && t.cpu_wait_for < x.block_prev)
        return "the tail's CPU waits on an older micro-batch";
      if (cpu_ahead && (timing(i).blocked_by < 0 || t.cpu_wait_for >= 0))
        return "the CPU runs ahead but sets a start or blocks in the tail";
      for (auto d : t.deps)
        if (d >= 0 && d < x.block_prev) return "the tail depends on an older micro-batch";
    }
    // A lane the steady micro-batches do not use: its previous task (in micro-batch 0) stays where it is in
    // the full step, so it must not be what delays the tail's first task on that lane.
    std::array<std::int32_t, 256> first_on_lane;
    first_on_lane.fill(-1);
    int pending = 0;
    for (std::int32_t i = x.tail; i < n; ++i) {
      auto& f = first_on_lane[task(i).lane];
      if (f < 0) f = i, ++pending;
    }
    for (std::int32_t i = x.tail - 1; i >= 0 && pending > 0; --i) {
      auto& f = first_on_lane[task(i).lane];
      if (f < 0) continue;
      if (i < x.block_prev && !(timing(i).end_s < timing(f).start_s))
        return "an older task on the tail's lane delays it";
      f = -1;  // the previous task on this lane is found
      --pending;
    }
    return nullptr;
  }

  /// 3. The exposed-communication walks from the copied micro-batch's gaps and from the tail stay within the
  /// two steady micro-batches (older tasks are not shifted copies).
  const char* walks_recent() const {
    const auto n = static_cast<std::int32_t>(prog.tasks.size());
    if (exposed_comm(prog, tl, x.block_lo, x.block_hi).earliest_task < x.block_prev)
      return "an exposed-communication walk reaches an older micro-batch";
    if (exposed_comm(prog, tl, x.tail, n).earliest_task < x.block_prev)
      return "the tail's exposed-communication walk reaches an older micro-batch";
    return nullptr;
  }
};

}  // namespace

std::optional<SteadyExtension> find_steady_state(const Program& prog, const Timeline& tl,
                                                 const MicroBatchBlocks& blocks, int micro_batches,
                                                 const char** why) {
  auto fail = [&](const char* reason) -> std::optional<SteadyExtension> {
    if (why) *why = reason;
    return std::nullopt;
  };
  const auto nb = static_cast<int>(blocks.first_task.size());
  if (nb != kSteadyPrefix + 1 || micro_batches <= nb) return fail("not a truncated run");
  SteadyExtension x;
  x.copies = micro_batches - nb;
  x.block_prev = blocks.first_task[static_cast<std::size_t>(nb - 3)];
  x.block_lo = blocks.first_task[static_cast<std::size_t>(nb - 2)];
  x.tail = x.block_hi = blocks.first_task[static_cast<std::size_t>(nb - 1)];
  const std::int32_t len = x.block_lo - x.block_prev;
  const auto n = static_cast<std::int32_t>(prog.tasks.size());
  if (len <= 0 || x.block_hi - x.block_lo != len || n > static_cast<std::int32_t>(tl.timing.size()))
    return fail("micro-batches differ in length");
  const auto& tm = tl.timing;
  x.period_s =
      tm[static_cast<std::size_t>(x.block_lo)].start_s - tm[static_cast<std::size_t>(x.block_prev)].start_s;
  x.cpu_period_s =
      tm[static_cast<std::size_t>(x.block_lo)].issue_s - tm[static_cast<std::size_t>(x.block_prev)].issue_s;
  if (!(x.period_s > 0)) return fail("no positive period");
  // Timings agree to rounding: each is a sum of a few durations, so a few ulps of the step's length.
  const double tol = 1e-12 * std::max(1.0, tl.end_s);
  // Either the CPU keeps pace with the GPU (it blocks on GPU work: issue times repeat with the same period),
  // or it runs ahead, issuing a micro-batch in less time than the GPU runs it: then no issue may set a start
  // (the CPU only gets further ahead in the copies) and the CPU must never block (it would start to).
  const bool cpu_ahead = std::abs(x.cpu_period_s - x.period_s) > tol;
  if (cpu_ahead && !(x.cpu_period_s < x.period_s)) return fail("the CPU falls behind the GPU");
  x.cpu_period_s = cpu_ahead ? x.cpu_period_s : x.period_s;
  const SteadyChecks c{prog, tl, x, len, cpu_ahead, tol};
  for (const char* (SteadyChecks::*check)() const :
       {&SteadyChecks::copied_repeats, &SteadyChecks::no_net_per_pool, &SteadyChecks::tail_refs_recent,
        &SteadyChecks::walks_recent})
    if (const char* reason = (c.*check)()) return fail(reason);
  return x;
}

void extend_result(const SummaryInputs& in, const MicroBatchBlocks& blocks, const SteadyExtension& x,
                   Result& r) {
  const Program& prog = in.program;
  const Timeline& tl = in.timeline;
  const auto n = static_cast<std::int32_t>(prog.tasks.size());
  const double copies = x.copies;
  const double shift_s = copies * x.period_s;
  // Step end: the latest of the unshifted micro-batches, the last copy, the shifted tail and the CPU's last
  // issue (shifted with the tail).
  double end_s = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    const double e = tl.timing[static_cast<std::size_t>(i)].end_s;
    end_s = std::max(end_s, i >= x.block_lo ? e + shift_s : e);
  }
  end_s = std::max(end_s, tl.timing[static_cast<std::size_t>(n - 1)].issue_s + copies * x.cpu_period_s);
  r.step_s = end_s;
  // Each copy adds the copied micro-batch's compute, transfers, bytes and exposed time.
  const ExposedComm e = exposed_comm(prog, tl, x.block_lo, x.block_hi);
  for (std::int32_t i = x.block_lo; i < x.block_hi; ++i) {
    const Task& t = prog.tasks[static_cast<std::size_t>(i)];
    if (t.lane == kLaneCompute) r.compute_s += copies * t.duration_s;
    if (t.comm_kind == 0xff) continue;
    r.comm[t.comm_kind].time_s += copies * t.duration_s;
    r.comm[t.comm_kind].count += x.copies * t.collectives;
  }
  const auto& sent = blocks.sent_bytes[blocks.sent_bytes.size() - 2];
  for (std::size_t k = 0; k < kCommKinds; ++k) {
    r.comm[k].bytes_per_rank += copies * sent[k];
    r.comm[k].exposed_s += copies * e.by_kind[k];
  }
  r.exposed_comm_s += copies * e.total_s;
  if (tl.peak_task >= x.tail) r.peak_time_s += copies * x.cpu_period_s;  // the peak is at an issue time
  set_throughput(in, r);
}

}  // namespace shardplan

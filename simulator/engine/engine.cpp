// The event engine. The CPU issues tasks in program order (advancing by each task's cpu_s, blocking on
// cpu_wait_for); each lane runs its tasks FIFO; a task starts when it is issued, its lane is free and its
// dependencies are done. Completions come off a (time, sequence) priority queue.
#include "simulator/engine/engine.hpp"

#include <algorithm>
#include <queue>
#include <stdexcept>

namespace shardplan {

const char* to_string(MemCategory c) {
  static const char* names[] = {"params",          "grads",        "optimizer", "activations",
                                "gathered_params", "comm_buffers", "other"};
  return names[static_cast<int>(c)];
}

Bytes allocator_round(Bytes b) {
  if (b <= 0) return b == 0 ? 0 : -allocator_round(-b);
  Bytes r = allocation_bytes(b);
  if (r >= 10 * kMiB) r = (r + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
  return r;
}

namespace {

/// Memory in CPU issue order (independent of timing): totals per category, the peak and the task that reaches
/// it, the peaks before and from the optimizer step, and per pool the allocator-rounded peak.
void walk_memory(const Program& prog, int n_pools, const std::array<Bytes, kMemCategories>& initial,
                 Timeline& out) {
  const auto n = static_cast<std::int32_t>(prog.tasks.size());
  std::array<Bytes, kMemCategories> cur = initial;
  Bytes total = 0;
  for (Bytes b : initial) total += b;
  out.base_bytes = total;
  out.peak_bytes = total;
  out.at_peak = cur;
  out.peak_task = -1;
  std::vector<Bytes> pool_cur(static_cast<std::size_t>(n_pools), 0);
  // Per tensor group: its allocator-rounded bytes and pool, so that a free (which names the group) takes back
  // exactly what its allocations added to the pool.
  std::vector<Bytes> group_rounded(static_cast<std::size_t>(std::max(prog.tensors, 0)), 0);
  std::vector<std::uint8_t> group_pool(static_cast<std::size_t>(std::max(prog.tensors, 0)), 0);
  pool_cur[0] = allocator_round(total);
  out.pool_peak_bytes[0] = pool_cur[0];
  out.peak_before_optimizer_bytes = total;
  out.peak_from_optimizer_bytes = 0;
  bool optimizer_seen = false;
  for (std::int32_t i = 0; i < n; ++i) {
    const Task& t = prog.tasks[static_cast<std::size_t>(i)];
    if (t.type == TaskType::kOptimizer && !optimizer_seen) {
      optimizer_seen = true;
      out.peak_from_optimizer_bytes = total;
    }
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
      const MemEffect& fx = prog.effects[e];
      cur[static_cast<int>(fx.category)] += fx.delta_bytes;
      total += fx.delta_bytes;
      auto& phase_peak = optimizer_seen ? out.peak_from_optimizer_bytes : out.peak_before_optimizer_bytes;
      phase_peak = std::max(phase_peak, total);
      if (fx.tensor >= 0 && static_cast<std::size_t>(fx.tensor) < group_rounded.size()) {
        const auto g = static_cast<std::size_t>(fx.tensor);
        if (fx.delta_bytes > 0) {
          const Bytes r = fx.count * allocator_round(fx.delta_bytes / std::max<int>(fx.count, 1));
          group_rounded[g] += r;
          group_pool[g] = fx.pool;
          pool_cur[fx.pool] += r;
          out.pool_peak_bytes[fx.pool] = std::max(out.pool_peak_bytes[fx.pool], pool_cur[fx.pool]);
        } else {
          pool_cur[group_pool[g]] -= group_rounded[g];
          group_rounded[g] = 0;
        }
      } else {
        auto& pc = pool_cur[fx.pool];
        pc += allocator_round(fx.delta_bytes);
        out.pool_peak_bytes[fx.pool] = std::max(out.pool_peak_bytes[fx.pool], pc);
      }
      if (total > out.peak_bytes) {
        out.peak_bytes = total;
        out.at_peak = cur;
        out.peak_task = i;
      }
    }
  }
  out.current = cur;
}

/// Time: the discrete-event run. The CPU issues tasks in program order; each lane starts its next task once
/// it is issued, the lane is free and its dependencies are done; completions come off a (time, sequence)
/// priority queue.
class EventLoop {
 public:
  EventLoop(const Program& prog, int n_lanes, Timeline& out)
      : prog_(prog),
        out_(out),
        n_(static_cast<std::int32_t>(prog.tasks.size())),
        n_lanes_(n_lanes),
        dep_end_(static_cast<std::size_t>(n_), -1.0),
        lane_queue_(static_cast<std::size_t>(n_lanes)),
        lane_head_(static_cast<std::size_t>(n_lanes), 0),
        lane_free_(static_cast<std::size_t>(n_lanes), 0.0),
        running_(static_cast<std::size_t>(n_lanes), 0) {
    for (std::int32_t i = 0; i < n_; ++i)
      lane_queue_[prog.tasks[static_cast<std::size_t>(i)].lane].push_back(i);
  }

  void run() {
    issue();
    for (int l = 0; l < n_lanes_; ++l) try_start_lane(l);
    while (!events_.empty()) {
      auto [time, key] = events_.top();
      events_.pop();
      now_ = time;
      auto id = static_cast<std::int32_t>(key & 0xffffffff);
      const Task& t = prog_.tasks[static_cast<std::size_t>(id)];
      dep_end_[static_cast<std::size_t>(id)] = time;
      running_[t.lane] = 0;
      lane_free_[t.lane] = time;
      lane_head_[t.lane]++;
      out_.lane_busy_s[t.lane] += t.duration_s;
      out_.completed++;
      out_.end_s = std::max(out_.end_s, time);
      issue();
      for (int l = 0; l < n_lanes_; ++l) try_start_lane(l);
    }
    out_.end_s = std::max(out_.end_s, cpu_s_);
  }

 private:
  void try_start_lane(int lane) {
    auto& q = lane_queue_[static_cast<std::size_t>(lane)];
    auto& h = lane_head_[static_cast<std::size_t>(lane)];
    if (running_[static_cast<std::size_t>(lane)] || h >= q.size()) return;
    std::int32_t id = q[h];
    if (id >= next_issue_) return;  // not issued by the CPU yet
    const Task& t = prog_.tasks[static_cast<std::size_t>(id)];
    auto& tm = out_.timing[static_cast<std::size_t>(id)];
    double ready = tm.issue_s;
    std::int32_t blocker = -1;
    if (lane_free_[static_cast<std::size_t>(lane)] > ready) {
      ready = lane_free_[static_cast<std::size_t>(lane)];
      blocker = h > 0 ? q[h - 1] : -1;
    }
    for (auto d : t.deps) {
      if (d < 0) continue;
      const double e = dep_end_[static_cast<std::size_t>(d)];
      if (e < 0) return;  // a dependency has not finished
      if (e > ready) ready = e, blocker = d;
    }
    tm.blocked_by = blocker;
    ready = std::max(ready, now_);
    tm.start_s = ready;
    tm.end_s = ready + t.duration_s;
    running_[static_cast<std::size_t>(lane)] = 1;
    events_.push({tm.end_s, (seq_++ << 32) | id});
  }
  /// The CPU issues as far as it can: it stops at a task whose cpu_wait_for has not finished yet.
  void issue() {
    while (next_issue_ < n_) {
      const Task& t = prog_.tasks[static_cast<std::size_t>(next_issue_)];
      if (t.cpu_wait_for >= 0) {
        double e = dep_end_[static_cast<std::size_t>(t.cpu_wait_for)];
        if (e < 0) return;
        if (e > cpu_s_) {
          cpu_s_ = e;
          out_.timing[static_cast<std::size_t>(next_issue_)].cpu_waited_for = t.cpu_wait_for;
        }
      }
      cpu_s_ += t.cpu_s;
      out_.timing[static_cast<std::size_t>(next_issue_)].issue_s = cpu_s_;
      ++next_issue_;
      try_start_lane(t.lane);
    }
  }

  using Event = std::pair<double, std::int64_t>;  // (time, sequence) -> task = sequence's low bits
  const Program& prog_;
  Timeline& out_;
  const std::int32_t n_;
  const int n_lanes_;
  std::vector<double> dep_end_;  // end time once finished, -1 before
  std::vector<std::vector<std::int32_t>> lane_queue_;
  std::vector<std::size_t> lane_head_;
  std::vector<double> lane_free_;
  std::vector<char> running_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::int64_t seq_ = 0;
  std::int32_t next_issue_ = 0;
  double cpu_s_ = 0, now_ = 0;
};

/// Appends the memory of the task's effects from `tot` to `samples` at `at`: the high point, then the settled
/// value when the task allocates and frees.
Bytes sample_task(const Program& prog, std::int32_t i, double at, Bytes tot,
                  std::vector<MemSample>& samples) {
  const Task& t = prog.tasks[static_cast<std::size_t>(i)];
  Bytes hi = tot;
  for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
    tot += prog.effects[e].delta_bytes;
    hi = std::max(hi, tot);
  }
  samples.push_back({at, i, hi});
  if (hi != tot) samples.push_back({at, i, tot});
  return tot;
}

/// Memory over time for plots: in CPU issue time, and in GPU time (the tasks with effects in order of kernel
/// start, ties in issue order).
void record_samples(const Program& prog, Timeline& out) {
  const auto n = static_cast<std::int32_t>(prog.tasks.size());
  Bytes tot = out.base_bytes;
  out.samples.push_back({0.0, -1, tot});
  for (std::int32_t i = 0; i < n; ++i)
    if (prog.tasks[static_cast<std::size_t>(i)].n_effects > 0)
      tot = sample_task(prog, i, out.timing[static_cast<std::size_t>(i)].issue_s, tot, out.samples);
  std::vector<std::int32_t> order;
  for (std::int32_t i = 0; i < n; ++i)
    if (prog.tasks[static_cast<std::size_t>(i)].n_effects > 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return out.timing[static_cast<std::size_t>(a)].start_s < out.timing[static_cast<std::size_t>(b)].start_s;
  });
  tot = out.base_bytes;
  out.gpu_samples.push_back({0.0, -1, tot});
  for (std::int32_t i : order)
    tot = sample_task(prog, i, out.timing[static_cast<std::size_t>(i)].start_s, tot, out.gpu_samples);
}

}  // namespace

void run_engine(const Program& prog, int n_lanes, int n_pools,
                const std::array<Bytes, kMemCategories>& initial, Timeline& out) {
  out.timing.assign(prog.tasks.size(), TaskTiming{});
  out.lane_busy_s.assign(static_cast<std::size_t>(n_lanes), 0.0);
  out.pool_peak_bytes.assign(static_cast<std::size_t>(n_pools), 0);
  out.samples.clear();
  out.completed = 0;
  out.end_s = 0;
  walk_memory(prog, n_pools, initial, out);
  EventLoop(prog, n_lanes, out).run();
  if (out.peak_task >= 0) out.peak_time_s = out.timing[static_cast<std::size_t>(out.peak_task)].issue_s;
  if (out.record_samples) record_samples(prog, out);
}

void verify_timeline(const Program& prog, const Timeline& t, const std::array<Bytes, kMemCategories>& initial,
                     const std::array<bool, kMemCategories>& may_persist) {
  if (t.completed != static_cast<std::int32_t>(prog.tasks.size()))
    throw std::logic_error(
        "engine: " + std::to_string(prog.tasks.size() - static_cast<std::size_t>(t.completed)) +
        " tasks never ran (a dependency on a later task, or a CPU wait that never ends)");
  for (int c = 0; c < kMemCategories; ++c)
    if (!may_persist[static_cast<std::size_t>(c)] &&
        t.current[static_cast<std::size_t>(c)] != initial[static_cast<std::size_t>(c)])
      throw std::logic_error(
          std::string("engine: memory of category ") + to_string(static_cast<MemCategory>(c)) +
          " not released at the end of the step (" +
          std::to_string(t.current[static_cast<std::size_t>(c)] - initial[static_cast<std::size_t>(c)]) +
          " bytes)");
}

}  // namespace shardplan

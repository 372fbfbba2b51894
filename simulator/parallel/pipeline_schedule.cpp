// The pipeline schedules' action orders as torch 2.15 builds them (torch/distributed/pipelining/schedules.py)
// and the pipeline's discrete-event run (docs/model.md "Pipeline parallelism").
#include "simulator/parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace shardplan {

// ---- schedules ----

namespace {

using Order = std::vector<PipeAction>;

// Schedule1F1B._step_microbatches: warmup min(m, num_stages - stage) forwards, then B, F alternating
// ("1B1F") until every forward ran, then the remaining backwards.
Order order_1f1b(int pp, int rank, int m) {
  Order o;
  const int warmup = std::min(m, pp - rank);
  int f = 0, b = 0;
  for (; f < warmup; ++f) o.push_back({PipeOp::kForward, rank, f});
  while (true) {
    o.push_back({PipeOp::kBackward, rank, b++});
    if (f == m) break;
    o.push_back({PipeOp::kForward, rank, f++});
  }
  while (b < m) o.push_back({PipeOp::kBackward, rank, b++});
  return o;
}

// ScheduleGPipe: every forward, then every backward, micro-batch order.
Order order_gpipe(int rank, int m) {
  Order o;
  for (int f = 0; f < m; ++f) o.push_back({PipeOp::kForward, rank, f});
  for (int b = 0; b < m; ++b) o.push_back({PipeOp::kBackward, rank, b});
  return o;
}

// ScheduleInterleaved1F1B._calculate_single_rank_operations + _get_1f1b_rank_ops (enable_zero_bubble
// False), the None slots dropped.
Order order_interleaved(int pp, int V, int rank, int m) {
  const int rounds = std::max(1, m / pp);
  const int per_round = m / rounds;
  const int warmup = std::min((V - 1) * per_round + 2 * (pp - 1 - rank), m * V);
  const int fwd_bwd = m * V - warmup;
  const int cooldown = m * V - fwd_bwd;
  auto fwd_stage = [&](int step) { return ((step / per_round) % V) * pp + rank; };
  auto bwd_stage = [&](int step) { return (V - 1 - ((step - warmup) / per_round) % V) * pp + rank; };
  std::vector<int> fmb(static_cast<std::size_t>(V * pp), 0), bmb(static_cast<std::size_t>(V * pp), 0);
  Order o;
  for (int op = 0; op < warmup + fwd_bwd + cooldown; ++op) {
    if (op < warmup + fwd_bwd) {
      const int s = fwd_stage(op);
      o.push_back({PipeOp::kForward, s, fmb[static_cast<std::size_t>(s)]++});
    }
    if (op >= warmup) {
      const int s = bwd_stage(op);
      o.push_back({PipeOp::kBackward, s, bmb[static_cast<std::size_t>(s)]++});
    }
  }
  return o;
}

// ScheduleZBVZeroBubble._calculate_single_rank_operations (micro-batches padded to 2 pp - 1, the padding's
// actions dropped).
Order order_zbv(int pp, int rank, int m) {
  const int n_micro = std::max(2 * pp - 1, m);
  const int s0 = rank, s1 = 2 * pp - 1 - rank;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  Order o;
  auto F = [&](int s, int& c) { o.push_back({PipeOp::kForward, s, c++}); };
  for (int i = 0; i < 2 * (pp - rank) - 1; ++i) F(s0, f0);
  for (int i = 0; i < rank; ++i) F(s1, f1), F(s0, f0);
  for (int i = 0; i < pp - rank; ++i) {
    F(s1, f1);
    o.push_back({PipeOp::kBackwardInput, s1, b1});
    o.push_back({PipeOp::kBackwardWeight, s1, b1++});
  }
  while (f1 < f0 || f0 < n_micro) {
    if (f0 < n_micro) F(s0, f0);
    o.push_back({PipeOp::kBackwardInput, s0, b0});
    o.push_back({PipeOp::kBackwardWeight, s0, b0++});
    F(s1, f1);
    o.push_back({PipeOp::kBackwardInput, s1, b1});
    o.push_back({PipeOp::kBackwardWeight, s1, b1++});
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    o.push_back({PipeOp::kBackwardInput, s0, b0++});
    o.push_back({PipeOp::kBackwardInput, s1, b1++});
  }
  for (int i = 0; i < pp - rank; ++i) {
    o.push_back({PipeOp::kBackwardInput, s0, b0++});
    o.push_back({PipeOp::kBackwardWeight, s0, w0++});
  }
  while (w1 < b1) o.push_back({PipeOp::kBackwardWeight, s1, w1++});
  while (w0 < b0) o.push_back({PipeOp::kBackwardWeight, s0, w0++});
  Order kept;
  for (const PipeAction& a : o)
    if (a.micro_batch < m) kept.push_back(a);
  return kept;
}

// ScheduleDualPipeV._calculate_single_rank_operations. OVERLAP_F_B (a forward and a full backward issued as
// one action) runs its two sub-actions one after the other unless a model registers an overlapped
// implementation (torchtitan does for DeepSeek-V3 MoE only): modelled as F then B.
Order order_dualpipev(int pp, int rank, int m) {
  const int s0 = rank, s1 = 2 * pp - 1 - rank;
  std::vector<int> fc(static_cast<std::size_t>(2 * pp), 0), ic(fc), wc(fc);
  std::vector<std::pair<int, int>> weight_queue;
  Order o;
  auto S = [](int s) { return static_cast<std::size_t>(s); };
  auto add = [&](int s, PipeOp op) {
    if (op == PipeOp::kForward) {
      o.push_back({op, s, fc[S(s)]++});
    } else if (op == PipeOp::kBackward) {  // FULL_BACKWARD: the I counter's index; I and W both advance
      o.push_back({op, s, ic[S(s)]});
      ++ic[S(s)], ++wc[S(s)];
    } else {  // BACKWARD_INPUT: its W queued
      weight_queue.push_back({s, ic[S(s)]});
      o.push_back({op, s, ic[S(s)]++});
    }
  };
  auto add_weight = [&] {
    if (weight_queue.empty()) return;
    const auto [s, mb] = weight_queue.front();
    weight_queue.erase(weight_queue.begin());
    o.push_back({PipeOp::kBackwardWeight, s, mb});
    ++wc[S(s)];
  };
  auto overlap = [&](int fs, int bs) { add(fs, PipeOp::kForward), add(bs, PipeOp::kBackward); };
  for (int i = 0; i < (pp - rank - 1) * 2; ++i) add(s0, PipeOp::kForward);
  for (int i = 0; i < rank + 1; ++i) add(s0, PipeOp::kForward), add(s1, PipeOp::kForward);
  for (int i = 0; i < pp - rank - 1; ++i) {
    add(s1, PipeOp::kBackwardInput);
    add_weight();
    add(s1, PipeOp::kForward);
  }
  const int step4 = m - pp * 2 + rank + 1;
  for (int i = 0; i < step4; ++i) {
    if (i == 0 && rank == pp - 1) {
      add(s0, PipeOp::kForward);
      add(s1, PipeOp::kBackward);
    } else {
      overlap(s0, s1);
    }
    overlap(s1, s0);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    add(s1, PipeOp::kBackward);
    overlap(s1, s0);
  }
  bool zb = false;
  const int step6 = rank + 1;
  for (int i = 0; i < step6; ++i) {
    if (i == step6 / 2 && rank % 2 == 1) zb = true;
    add(s1, zb ? PipeOp::kBackwardInput : PipeOp::kBackward);
    if (i == step6 / 2 && rank % 2 == 0) zb = true;
    add(s0, zb ? PipeOp::kBackwardInput : PipeOp::kBackward);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    add_weight();
    add(s0, zb ? PipeOp::kBackwardInput : PipeOp::kBackward);
  }
  for (int i = 0; i < rank + 1; ++i) add_weight();
  return o;
}

}  // namespace

std::vector<std::vector<PipeAction>> pipeline_order(PpSchedule s, int pp, int virtual_stages,
                                                    int micro_batches) {
  std::vector<Order> out(static_cast<std::size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    Order& o = out[static_cast<std::size_t>(r)];
    switch (s) {
      case PpSchedule::kGpipe:
        o = order_gpipe(r, micro_batches);
        break;
      case PpSchedule::k1F1B:
        o = order_1f1b(pp, r, micro_batches);
        break;
      case PpSchedule::kInterleaved1F1B:
        o = order_interleaved(pp, virtual_stages, r, micro_batches);
        break;
      case PpSchedule::kZbv:
        o = order_zbv(pp, r, micro_batches);
        break;
      case PpSchedule::kDualPipeV:
        o = order_dualpipev(pp, r, micro_batches);
        break;
    }
  }
  return out;
}

Residency fsdp_residency(const std::vector<PipeAction>& order, int max_active_stages) {
  Residency r;
  r.unshard.resize(order.size());
  r.reshard.resize(order.size());
  std::vector<int> active;  // insertion order, as torch's dict
  for (std::size_t i = 0; i < order.size(); ++i) {
    // next_stage_indices(max_active_stages, compute_actions[i:]): the next distinct stages, in order.
    std::vector<int> window;
    for (std::size_t j = i; j < order.size() && static_cast<int>(window.size()) < max_active_stages; ++j)
      if (std::find(window.begin(), window.end(), order[j].stage) == window.end())
        window.push_back(order[j].stage);
    for (auto it = active.begin(); it != active.end();) {
      if (std::find(window.begin(), window.end(), *it) == window.end()) {
        r.reshard[i].push_back(*it);
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    for (int s : window)
      if (std::find(active.begin(), active.end(), s) == active.end()) {
        r.unshard[i].push_back(s);
        active.push_back(s);
      }
  }
  return r;
}

double pipeline_send_bytes(const Plan& p, std::int64_t hidden) {
  return static_cast<double>(p.mbs) * static_cast<double>(p.seq) * static_cast<double>(hidden) *
         p.compute_bytes() / p.tp / p.cp;
}

}  // namespace shardplan

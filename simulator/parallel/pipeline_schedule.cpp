// The pipeline schedules' action orders as torch 2.15 builds them (torch/distributed/pipelining/schedules.py)
// and the pipeline's discrete-event run (docs/model.md "Pipeline parallelism").
#include "simulator/parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace shardplan {

namespace {

std::string str(std::int64_t v) {
  return std::to_string(v);
}

}  // namespace

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

// ---- the pipeline's timeline ----

PipelineRun run_pipeline(const PipelineInputs& in) {
  const int pp = in.pp, S = static_cast<int>(in.stages.size()), m = in.micro_batches;
  Plan shape;
  shape.pp = pp;
  shape.pp_schedule = in.schedule;
  shape.virtual_stages = in.virtual_stages;
  std::vector<int> rank_of(static_cast<std::size_t>(S), 0);
  for (int r = 0; r < pp; ++r)
    for (int s : rank_stages(shape, r)) rank_of[static_cast<std::size_t>(s)] = r;
  const auto orders = pipeline_order(in.schedule, pp, in.virtual_stages, m);
  auto idx = [m](int s, int mb) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(m) + mb; };
  auto sidx = [](int s) { return static_cast<std::size_t>(s); };
  constexpr double kNotYet = -1;
  std::vector<double> fwd_end(static_cast<std::size_t>(S) * m, kNotYet), grad_end(fwd_end);
  std::vector<char> first_fwd_done(static_cast<std::size_t>(S), 0);
  PipelineRun out;
  out.rank_busy_s.assign(static_cast<std::size_t>(pp), 0);
  out.rank_end_s.assign(static_cast<std::size_t>(pp), 0);
  out.rank_gather_wait_s.assign(static_cast<std::size_t>(pp), 0);
  out.stage_last_backward_end_s.assign(static_cast<std::size_t>(S), 0);
  out.stage_max_in_flight.assign(static_cast<std::size_t>(S), 0);
  out.rank_peak_activation_bytes.assign(static_cast<std::size_t>(pp), 0);
  out.rank_peak.assign(static_cast<std::size_t>(pp), RankPeak{});
  out.rank_sends.assign(static_cast<std::size_t>(pp), 0);
  out.rank_actions.assign(static_cast<std::size_t>(pp), {});
  std::vector<int> in_flight(static_cast<std::size_t>(S), 0);
  std::vector<int> grads_done(static_cast<std::size_t>(S), 0);  // B or W actions run (weight gradients made)
  std::vector<Bytes> act_now(static_cast<std::size_t>(pp), 0), accum_now(act_now), held(act_now);
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  // Each rank's parameter all-gathers run back to back on its data-parallel stream from the step's start, in
  // the order of its stages' first forwards.
  std::vector<double> gather_start(static_cast<std::size_t>(S), 0);
  for (int r = 0; r < pp; ++r) {
    double t = 0;
    std::vector<char> seen(static_cast<std::size_t>(S), 0);
    for (const PipeAction& a : orders[static_cast<std::size_t>(r)])
      if (a.op == PipeOp::kForward && !seen[sidx(a.stage)]) {
        seen[sidx(a.stage)] = 1;
        gather_start[sidx(a.stage)] = t;
        t += in.stages[sidx(a.stage)].gather_s;
      }
    for (int s : rank_stages(shape, r)) held[static_cast<std::size_t>(r)] += in.stages[sidx(s)].held_bytes;
  }
  auto hop = [&](int a, int b) {
    return rank_of[static_cast<std::size_t>(a)] == rank_of[static_cast<std::size_t>(b)] ? 0.0 : in.p2p_s;
  };
  bool progress = true;
  std::size_t remaining = 0;
  for (const auto& o : orders) remaining += o.size();
  while (remaining > 0 && progress) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const auto R = static_cast<std::size_t>(r);
      while (next[R] < orders[R].size()) {
        const PipeAction& a = orders[R][next[R]];
        const auto s = static_cast<std::size_t>(a.stage);
        const StageCost& c = in.stages[s];
        double ready = 0, dur = 0, busy = 0;
        if (a.op == PipeOp::kForward) {
          if (a.stage > 0) {
            const double prev = fwd_end[idx(a.stage - 1, a.micro_batch)];
            if (prev < 0) break;
            ready = prev + hop(a.stage - 1, a.stage);
          }
          busy = dur = c.fwd_s;
          if (!first_fwd_done[s]) {
            // The first forward ends when its compute does and no earlier than its gathers allow.
            const double start = std::max(ready, out.rank_end_s[R]);
            const double gated = gather_start[s] + c.fwd_s + c.first_fwd_extra_s;
            dur = std::max(c.fwd_s, gated - start);
            out.rank_gather_wait_s[R] += dur - c.fwd_s;
          }
          first_fwd_done[s] = 1;
        } else if (a.op == PipeOp::kBackwardWeight) {
          const double ig = grad_end[idx(a.stage, a.micro_batch)];
          if (ig < 0) break;
          ready = ig;
          busy = dur = c.bwd_weight_s;
        } else {
          const double f = fwd_end[idx(a.stage, a.micro_batch)];
          if (f < 0) break;
          ready = f;
          if (a.stage + 1 < S) {
            const double g = grad_end[idx(a.stage + 1, a.micro_batch)];
            if (g < 0) break;
            ready = std::max(ready, g + hop(a.stage + 1, a.stage));
          }
          busy = dur = a.op == PipeOp::kBackward ? c.bwd_s : c.bwd_input_s;
        }
        const double start = std::max(ready, out.rank_end_s[R]);
        const double end = start + dur;
        out.rank_end_s[R] = end;
        out.rank_busy_s[R] += busy;

        // Memory while the action runs: the rank's held state, the unsharded gradients of stages between
        // their first and last backward, the other micro-batches' saved activations, and the action's
        // working set (a forward's or backward's own activations included).
        const bool makes_grads = a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight;
        const bool growing = a.op == PipeOp::kBackward && grads_done[s] == 0 && c.bwd_first_work.total() > 0;
        if (makes_grads && grads_done[s] == 0 && !growing) accum_now[R] += c.accum_grad_bytes;
        RankPeak now;
        now.held_bytes = held[R];
        now.accum_grad_bytes = accum_now[R];
        now.saved_act_bytes = act_now[R];
        if (a.op == PipeOp::kForward) {
          now.work = c.fwd_work;
        } else if (a.op != PipeOp::kBackwardWeight) {
          now.saved_act_bytes -= c.act_bytes;  // its own activations are part of the backward's working set
          now.work = growing ? c.bwd_first_work : c.bwd_work;
        }
        now.peak_bytes = now.held_bytes + now.accum_grad_bytes + now.saved_act_bytes + now.work.total();
        now.stage = a.stage;
        now.micro_batch = a.micro_batch;
        now.op = a.op;
        if (now.peak_bytes > out.rank_peak[R].peak_bytes) out.rank_peak[R] = now;
        out.rank_actions[R].push_back({a, start, end, now});

        if (a.op == PipeOp::kForward) {
          fwd_end[idx(a.stage, a.micro_batch)] = end;
          if (a.stage + 1 < S && rank_of[s + 1] != static_cast<int>(R)) ++out.rank_sends[R];
          act_now[R] += c.act_bytes;
          out.stage_max_in_flight[s] = std::max(out.stage_max_in_flight[s], ++in_flight[s]);
          out.rank_peak_activation_bytes[R] = std::max(out.rank_peak_activation_bytes[R], act_now[R]);
        } else {
          if (a.op != PipeOp::kBackwardWeight) {
            grad_end[idx(a.stage, a.micro_batch)] = end;
            if (a.stage > 0 && rank_of[s - 1] != static_cast<int>(R)) ++out.rank_sends[R];
          }
          if (growing) accum_now[R] += c.accum_grad_bytes;
          if (makes_grads) {  // the saved activations die with the weight gradient
            act_now[R] -= c.act_bytes;
            --in_flight[s];
            // After the stage's last one its gradients are reduced and the unsharded ones freed.
            if (++grads_done[s] == m) accum_now[R] -= c.accum_grad_bytes;
          }
          out.stage_last_backward_end_s[s] = std::max(out.stage_last_backward_end_s[s], end);
        }
        ++next[R];
        --remaining;
        progress = true;
      }
    }
  }
  if (remaining > 0)
    throw std::logic_error("pipeline schedule deadlocked (" + str(remaining) + " actions left)");
  double busy = 0;
  for (int r = 0; r < pp; ++r) {
    out.makespan_s = std::max(out.makespan_s, out.rank_end_s[static_cast<std::size_t>(r)]);
    busy += out.rank_busy_s[static_cast<std::size_t>(r)];
  }
  out.bubble_fraction = out.makespan_s > 0 ? 1.0 - busy / (pp * out.makespan_s) : 0.0;
  return out;
}

}  // namespace shardplan

// Pipeline parallelism (docs/model.md "Pipeline parallelism"): plan checks, torchtitan's stage split, the
// schedules' action orders as torch 2.15 builds them (torch/distributed/pipelining/schedules.py), the
// pipeline's discrete-event run, and one step composed from per-stage simulations.
#include "simulator/pipeline.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "simulator/knobs.hpp"
#include "simulator/memory.hpp"
#include "simulator/simulate.hpp"
#include "simulator/summary.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

namespace {

void need(bool ok, const char* flag, const std::string& why) {
  if (!ok) throw InputError::flag(flag, why);
}
std::string str(std::int64_t v) {
  return std::to_string(v);
}
bool v_style(PpSchedule s) {
  return s == PpSchedule::kZbv || s == PpSchedule::kDualPipeV;
}

}  // namespace

// ---- plan checks ----

void check_pipeline_mesh(const Plan& p, int gpus) {
  need(p.pp >= 1, "--pp", "must be >= 1");
  // The mesh is [pp, dp, tp] (torchtitan ParallelDims: pp, dp_replicate, dp_shard, cp, tp; tp innermost).
  need(gpus % (p.tp * p.pp) == 0, "--pp",
       "tp x pp = " + str(p.tp) + " x " + str(p.pp) + " does not divide " + str(gpus) + " GPUs");
  if (p.pp == 1) return;
  // torch.distributed.pipelining drives FSDP2 (stage.py backward_maybe_with_nosync: FSDPModule) or DDP;
  // FSDP1 has no pipeline integration there and torchtitan builds FSDP2 only.
  need(p.runtime != Runtime::kFsdp1, "--pp",
       "pipeline parallelism is modelled for fsdp2 (torch.distributed.pipelining) and deepspeed "
       "(PipelineEngine); use --runtime fsdp2");
  // deepspeed 0.19.8 deepspeed/runtime/pipe/engine.py: assert zero stage < gradients, "ZeRO-2 and ZeRO-3
  // are incompatible with pipeline parallelism".
  need(
      p.runtime != Runtime::kDeepSpeed || p.zero <= 1, "--pp",
      "deepspeed's PipelineEngine supports ZeRO stage 0 or 1 only (\"ZeRO-2 and ZeRO-3 are incompatible with "
      "pipeline parallelism\"); use --zero 1");
  // Megatron-core's schedules (megatron/core/pipeline_parallel/schedules.py, core_r0.8.0):
  // forward_backward_pipelining_without_interleaving (1F1B) and ..._with_interleaving (interleaved 1F1B).
  need(p.runtime != Runtime::kMegatron || p.pp_schedule == PpSchedule::k1F1B ||
           p.pp_schedule == PpSchedule::kInterleaved1F1B,
       "--pp-schedule", "megatron runs 1f1b or interleaved-1f1b (virtual pipeline stages)");
  need(p.runtime != Runtime::kDeepSpeed || p.pp_schedule == PpSchedule::k1F1B, "--pp-schedule",
       "deepspeed's PipelineEngine runs its own 1F1B schedule (TrainSchedule); use --pp-schedule 1f1b");
}

void resolve_pipeline(Plan& p, const ModelGraph& model) {
  if (p.virtual_stages == 0)
    p.virtual_stages = p.pp_schedule == PpSchedule::kGpipe || p.pp_schedule == PpSchedule::k1F1B ? 1 : 2;
  const std::string sched = to_string(p.pp_schedule);
  // torchtitan 0.3.0 pipeline_parallel.py _get_pipeline_metadata: single-stage schedules (GPipe, 1F1B) need
  // exactly one stage per rank, multi-stage ones at least two; zbv / dualpipev raise "ZBV requires exactly 2
  // stages per rank" (torch schedules.py).
  if (p.pp_schedule == PpSchedule::kGpipe || p.pp_schedule == PpSchedule::k1F1B)
    need(p.virtual_stages == 1, "--virtual-stages",
         sched + " runs one stage per rank; use --virtual-stages 1");
  else if (v_style(p.pp_schedule))
    need(p.virtual_stages == 2, "--virtual-stages", sched + " needs exactly 2 stages per rank");
  else
    need(p.virtual_stages >= 2, "--virtual-stages", sched + " needs at least 2 stages per rank");
  if (p.pp == 1) {
    need(p.pp_layers.empty(), "--pp-layers", "layers per stage need --pp > 1");
    return;
  }
  (void)stage_blocks(p, model.blocks());  // the split must exist
  const int m = p.grad_accum, S = p.stages();
  // Micro-batch counts each schedule accepts (torch 2.15 schedules.py): Schedule1F1B raises when
  // n_microbatches < num_stages; ScheduleDualPipeV when n_microbatches < num_stages (= 2 pp);
  // ScheduleInterleaved1F1B when n_microbatches is not a multiple of its rounds max(1, m // pp); GPipe and
  // ZBV (which pads to 2 pp - 1 and drops the padding) accept any count.
  if (p.pp_schedule == PpSchedule::k1F1B)
    need(m >= p.pp, "--grad-accum",
         "1f1b needs at least as many micro-batches (" + str(m) + ") as stages (" + str(p.pp) + ")");
  if (p.pp_schedule == PpSchedule::kDualPipeV)
    need(m >= S, "--grad-accum",
         "dualpipev needs at least as many micro-batches (" + str(m) + ") as stages (" + str(S) + ")");
  if (p.pp_schedule == PpSchedule::kInterleaved1F1B) {
    const int rounds = std::max(1, m / p.pp);
    need(m % rounds == 0, "--grad-accum",
         "interleaved-1f1b needs the micro-batches (" + str(m) +
             ") to be a multiple of its rounds max(1, m / pp) = " + str(rounds));
  }
}

// ---- stages ----

std::vector<int> stage_blocks(const Plan& p, int blocks) {
  const int S = p.stages();
  if (!p.pp_layers.empty()) {
    need(static_cast<int>(p.pp_layers.size()) == S, "--pp-layers",
         "expected " + str(S) + " entries (pp x virtual stages), got " + str(p.pp_layers.size()));
    const int sum = std::accumulate(p.pp_layers.begin(), p.pp_layers.end(), 0);
    need(sum == blocks, "--pp-layers",
         "the entries sum to " + str(sum) + ", the model has " + str(blocks) + " blocks");
    for (int s = 1; s + 1 < S; ++s)
      need(p.pp_layers[static_cast<std::size_t>(s)] >= 1, "--pp-layers",
           "stage " + str(s) +
               " would be empty (only the first stage, with the embedding, and the last, with the "
               "head, may hold no block)");
    return p.pp_layers;
  }
  if (S == 1) return {blocks};
  // torchtitan 0.3.0 _generate_llm_fqn_per_model_part(num_stages, num_layers, input_weight=1,
  // output_weight=1): effective layers = blocks + 2; each stage gets effective // S, the first
  // effective % S one more; the first stage's share includes the embedding, the last's the norm + head.
  const int effective = blocks + 2;
  need(S <= effective, "--pp",
       "pp x virtual stages = " + str(S) + " exceeds the model's " + str(blocks) +
           " blocks + embedding + head (torchtitan's split leaves a stage empty)");
  const int per = effective / S, extra = effective % S;
  std::vector<int> out(static_cast<std::size_t>(S));
  int left = blocks;
  for (int s = 0; s < S; ++s) {
    int n = per + (s < extra ? 1 : 0);
    if (s == 0 || s == S - 1) n -= 1;
    n = std::min(std::max(n, 0), left);
    out[static_cast<std::size_t>(s)] = n;
    left -= n;
  }
  // torchtitan's loop stops adding blocks when they run out; blocks left over cannot happen (effective
  // layers count every block once).
  return out;
}

std::vector<int> rank_stages(const Plan& p, int rank) {
  const int V = std::max(p.virtual_stages, 1);
  if (v_style(p.pp_schedule)) return {rank, 2 * p.pp - 1 - rank};
  std::vector<int> out;
  for (int v = 0; v < V; ++v) out.push_back(rank + v * p.pp);
  return out;
}

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

// ---- one simulated step ----

namespace {

/// Per stage: its slice of the model, simulated for one micro-batch.
struct StageSim {
  ModelGraph graph;
  Result res;
  StageCost cost;
  Bytes gathered_bytes = 0;      ///< unsharded parameters held through the step (FSDP under PP)
  Bytes accum_grad_bytes = 0;    ///< unsharded gradients accumulated over the micro-batches (FSDP under PP)
  Bytes recv_bytes = 0;          ///< point-to-point receive buffers held through the step
  Bytes sharded_grad_bytes = 0;  ///< sharded gradients made by the reduction after the last micro-batch
  double tp_ag_block_s = 0, tp_rs_block_s = 0;  ///< TP collectives on the compute stream, one micro-batch
  WorkingSet tail_work;                         ///< the optimizer's transients
  double reduce_s = 0;                          ///< gradient reduction after the stage's last backward
  double post_step_s = 0;  ///< after the optimizer (DeepSpeed ZeRO-1: updated parameters all-gathered)
  double fwd_compute_s = 0, bwd_compute_s = 0;  ///< compute-stream time of one micro-batch
  int blocks = 0;
  bool embedding = false, head = false;
};

/// The forward's and the backward's working sets of a one-micro-batch stage simulation: the largest sum of
/// its transient categories (activations, communication buffers, other) over the tasks before its first
/// backward task and over its backward tasks, walked in CPU issue order as the engine applies the effects,
/// and the same sum over the step's tail (the optimizer, from the first non-backward compute task after the
/// backward). The unsharded parameters and gradients are not transients under PP (held through the step, or
/// from the first backward on).
///
/// `no_sync` (FSDP2 stages of torch.distributed.pipelining): the micro-batches' backwards run without
/// gradient sync (stage.py backward_maybe_with_nosync), so the stage simulation's reduce-scatter buffers do
/// not exist then; what the backward holds besides activations is the unsharded gradient autograd has just
/// produced, in the compute dtype, until the post-backward casts it into (first micro-batch) or
/// AccumulateGrad adds it to (later ones) the accumulated one: the simulation's unsharded gradients (kGrads
/// on the default stream's pool; the sharded ones come from the reduce-scatter stream's), counted as
/// communication buffers as FSDPMemTracker counts FSDP2's unsharded gradients.
///
/// `accum_per_grad_byte` (no_sync): bytes of accumulated gradient per byte of the simulation's unsharded
/// gradient. `bwd_first` is the first micro-batch's backward, where each unit's post-backward casts its
/// gradients into the accumulation dtype (param.grad = grad.to(dtype), the two alive at once): the walk adds
/// a unit's accumulated gradients where the simulation frees its unsharded ones for the reduce-scatter.
/// In the later micro-batches a block unit's op-level backward holds no weight gradients either
/// (AccumulateGrad adds each into the accumulated one as it is written): its workspace is
/// SimUnit::workspace_accum_bytes, not the simulation's workspace_bytes.
///
/// `recv_grad`: the stage's received output gradient, alive through each backward (torch stages). While the
/// stage's last block computes its backward that buffer is the gradient flowing into it, which the block's
/// workspace already holds (units.cpp `flowing`; reference lane, ref-llama2-7b-...-gpipe-...-pp-rank-0: the
/// 32 MiB receive buffer is the only output gradient at the block's peak), so it is added outside that
/// workspace only.
void working_sets(const Program& prog, const std::vector<SimUnit>& units, bool no_sync,
                  double accum_per_grad_byte, Bytes recv_grad, WorkingSet& fwd, WorkingSet& bwd,
                  WorkingSet& bwd_first, WorkingSet& tail) {
  std::array<Bytes, kMemCategories> cur{};
  Bytes unsharded_grads = 0, accum = 0;
  Bytes largest_grad = 0;  // the largest single unsharded gradient tensor so far
  std::unordered_set<std::int32_t> unsharded_ids;
  // Block units' backward workspaces alive (kOther groups of their backward compute tasks), and by how much
  // the later micro-batches' are smaller.
  std::unordered_map<std::int32_t, Bytes> workspace_cut;
  Bytes live_cut = 0;
  std::int32_t last_block_unit = -1, last_block_ws = -1;  // the stage's last block; its workspace group
  bool last_block_ws_live = false;
  int phase = 0;  // forward, backward, tail
  for (const Task& t : prog.tasks) {
    if (t.backward && phase == 0) phase = 1;
    if (!t.backward && phase == 1 && t.type == TaskType::kCompute) phase = 2;
    const bool sync_free = no_sync && phase == 1;
    WorkingSet& into = phase == 0 ? fwd : phase == 1 ? bwd : tail;
    // Sampled after every effect, as the engine finds a task's high point (simulator/engine.cpp): a task may
    // allocate and free within itself (the loss's backward, a block's op-level backward).
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e) {
      const MemEffect& fx = prog.effects[e];
      // Unsharded gradients: kGrads groups allocated on the default stream's pool (the sharded ones come from
      // the reduce-scatter stream's; a group's free may name another pool, so frees are matched by group).
      if (fx.category == MemCategory::kGrads && fx.pool == kPoolDefault && fx.delta_bytes > 0)
        unsharded_ids.insert(fx.tensor), largest_grad = std::max(largest_grad, fx.delta_bytes / fx.count);
      const bool ugrad = fx.category == MemCategory::kGrads && unsharded_ids.count(fx.tensor) > 0;
      if (sync_free && ugrad && fx.delta_bytes < 0) {  // the cast: both copies alive, then the old one freed
        accum += static_cast<Bytes>(static_cast<double>(-fx.delta_bytes) * accum_per_grad_byte);
        const WorkingSet w{cur[static_cast<int>(MemCategory::kActivations)],
                           unsharded_grads + accum + (last_block_ws_live ? 0 : recv_grad),
                           cur[static_cast<int>(MemCategory::kOther)]};
        if (w.total() > bwd_first.total()) bwd_first = w;
      }
      cur[static_cast<std::size_t>(fx.category)] += fx.delta_bytes;
      if (ugrad) unsharded_grads += fx.delta_bytes;
      if (fx.category == MemCategory::kOther && t.backward && t.type == TaskType::kCompute && t.unit >= 0) {
        const SimUnit& u = units[static_cast<std::size_t>(t.unit)];
        if (fx.delta_bytes > 0 && u.blocks > 0 && !workspace_cut.count(fx.tensor)) {
          const Bytes cut = u.workspace_bytes - u.workspace_accum_bytes;
          workspace_cut.emplace(fx.tensor, cut);
          live_cut += cut;
          if (last_block_unit < 0) last_block_unit = t.unit, last_block_ws = fx.tensor;
          if (fx.tensor == last_block_ws) last_block_ws_live = true;
        }
      }
      if (fx.category == MemCategory::kOther && fx.delta_bytes < 0) {
        const auto it = workspace_cut.find(fx.tensor);
        if (it != workspace_cut.end()) live_cut -= it->second, workspace_cut.erase(it);
        if (fx.tensor == last_block_ws) last_block_ws_live = false;
      }
      const Bytes recv = phase == 1 && !last_block_ws_live ? recv_grad : 0;
      // Later micro-batches: the parameters' gradients already have their accumulation dtype (grad_dtype set
      // by the first post-backward), so AccumulateGrad adds each one into the accumulated gradient as
      // autograd produces it (torch/csrc/autograd/functions/accumulate_grad.h): one parameter's gradient at a
      // time, at most the largest, not the unit's together as in the first micro-batch.
      const Bytes other = cur[static_cast<int>(MemCategory::kOther)];
      const WorkingSet w{cur[static_cast<int>(MemCategory::kActivations)],
                         (sync_free ? std::min(unsharded_grads, largest_grad)
                                    : cur[static_cast<int>(MemCategory::kCommBuffers)]) +
                             recv,
                         sync_free ? other - live_cut : other};
      if (w.total() > into.total()) into = w;
      if (sync_free) {
        const WorkingSet f{w.act_bytes, unsharded_grads + accum + recv, other};
        if (f.total() > bwd_first.total()) bwd_first = f;
      }
    }
  }
}

}  // namespace

void simulate_pipeline_step(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                            const Plan& p, Result& r, bool detail, bool allocator_replay) {
  const int S = p.stages(), m = p.grad_accum;
  const std::vector<int> per_stage = stage_blocks(p, model.blocks());
  // Which stage each layer of the execution order belongs to: blocks by the split, layers before the first
  // block (embeddings) to stage 0, layers after the last block (norm, head, loss) to the last stage.
  const auto& order = model.order();
  std::vector<std::size_t> first(static_cast<std::size_t>(S) + 1, order.size());
  {
    std::vector<int> stage_of_block;
    for (int s = 0; s < S; ++s)
      for (int b = 0; b < per_stage[static_cast<std::size_t>(s)]; ++b) stage_of_block.push_back(s);
    int block_seen = -1, block_count = -1, cur = 0;
    first[0] = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Layer* l = order[i];
      int st = cur;
      if (l->block >= 0) {
        if (l->block != block_seen) block_seen = l->block, ++block_count;
        st = stage_of_block[static_cast<std::size_t>(block_count)];
      } else if (block_count >= 0) {
        st = S - 1;
      }
      while (cur < st) first[static_cast<std::size_t>(++cur)] = i;
    }
    while (cur < S - 1) first[static_cast<std::size_t>(++cur)] = order.size();
  }

  // The stage's plan: one micro-batch, no pipeline; dp, shard group and replicas as resolved for the mesh.
  Plan sp = p;
  sp.pp = 1;
  sp.grad_accum = 1;
  sp.virtual_stages = 1;
  sp.pp_layers.clear();
  const RuntimeTraits rt = runtime_traits(sp);
  const double bc = p.precision == Precision::kFp32 ? 4.0 : 2.0;
  const double grad_acc_bytes = p.precision == Precision::kFp32 || p.reduce() == Dtype::kFp32 ? 4.0 : 2.0;
  // One micro-batch's hidden states between stages (the sequence-parallel shard with TP).
  // (and with context parallelism the rank's seq / cp share of each sequence)
  const double send_bytes = static_cast<double>(p.mbs) * static_cast<double>(p.seq) *
                            static_cast<double>(model.spec().hidden) * bc / p.tp / p.cp;
  const auto send = static_cast<Bytes>(send_bytes);
  // Megatron's schedules receive into transient buffers and keep each in-flight micro-batch's input and
  // output (schedules.py input_tensors / output_tensors), as DeepSpeed's PipelineEngine does.
  const bool torch_stages = p.runtime != Runtime::kDeepSpeed && p.runtime != Runtime::kMegatron;
  std::vector<StageSim> st(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    StageSim& x = st[static_cast<std::size_t>(s)];
    x.graph = model.slice(first[static_cast<std::size_t>(s)], first[static_cast<std::size_t>(s) + 1]);
    x.blocks = per_stage[static_cast<std::size_t>(s)];
    x.embedding = s == 0;
    x.head = s == S - 1;
    Simulator sim(x.graph, cluster, costs);
    sim.set_allocator_replay(allocator_replay);
    x.res = sim.run(sp, detail);
    const Program& prog = sim.program();
    const Timeline& tl = sim.timeline();
    double fwd_compute = 0, fwd_end = 0, bwd_compute = 0, bwd_end = 0;
    for (std::size_t i = 0; i < prog.tasks.size(); ++i) {
      const Task& t = prog.tasks[i];
      if (t.type != TaskType::kCompute || t.lane != kLaneCompute) continue;
      if (t.backward) {
        bwd_compute += t.duration_s;
        bwd_end = std::max(bwd_end, tl.timing[i].end_s);
      } else {
        fwd_compute += t.duration_s;
        fwd_end = std::max(fwd_end, tl.timing[i].end_s);
      }
    }
    // Tensor-parallel collectives recur every micro-batch: the blocking share waits on the compute stream
    // (all of it without async TP, the all-gathers with it), as the lowering's tp_collectives charges them.
    // The share is Lowering::tp_collectives' own: all of it without async TP, async_tp_exposed with it.
    const double tp_share = p.async_tp ? costs.constants().async_tp_exposed : 1.0;
    double tp_fwd = 0, tp_bwd = 0, weight_grad = 0;
    for (const SimUnit& u : sim.units()) {
      // Full activation checkpointing recomputes the forward's collectives in the backward (as the lowering).
      const double re = p.ac == AcMode::kFull && u.blocks > 0 ? 1.0 : 0.0;
      tp_fwd += tp_share * u.tp_fwd_s;
      tp_bwd += tp_share * (u.tp_bwd_s + re * u.tp_fwd_s);
      x.tp_ag_block_s += tp_share * ((1 + re) * u.tp_fwd_ag_s + u.tp_bwd_ag_s);
      x.tp_rs_block_s += tp_share * ((1 + re) * (u.tp_fwd_s - u.tp_fwd_ag_s) + u.tp_bwd_s - u.tp_bwd_ag_s);
      // Weight gradients: dW = X^T dY costs what dX = dY W^T does for every linear layer, so half of the
      // backward compute without recomputation (attention-core and elementwise backward, input-side, are
      // split the same way: an approximation, docs/model.md "Pipeline parallelism").
      weight_grad += 0.5 * u.bwd_s;
      x.gathered_bytes +=
          rt.gathers_params ? static_cast<Bytes>(static_cast<double>(u.gathered_elems) * bc) : 0;
      // torch 2.15 stage.py backward_maybe_with_nosync: FSDP stages run every backward with
      // set_requires_gradient_sync(False) and set_reshard_after_backward(False); the unsharded gradients
      // accumulate until the reduction after the last micro-batch, in FSDPParam.unsharded_grad_dtype: the
      // reduce dtype (fp32 under bf16-mixed), as _fsdp_param_group.py post_backward's no-sync path casts
      // them (_set_unsharded_grad_dtypes(defer_upcast=False): param.grad = grad.to(dtype), grad_dtype set
      // so AccumulateGrad adds the next micro-batches into it). Reference lane: the trace of
      // ref-llama3-8b-...-pp-2 holds the head's unsharded gradient as 2,004 MiB fp32 (128,256 x 4,096 x 4).
      if (rt.reduce_scatter && !rt.grads_persistent)
        x.accum_grad_bytes += static_cast<Bytes>(static_cast<double>(u.elems) * grad_acc_bytes);
      x.cost.act_bytes += u.act_bytes;
    }
    if (x.head) {
      // The last stage computes the loss right after each forward and keeps its saved log-softmax until that
      // micro-batch's backward (schedules.py _maybe_compute_loss), as Lowering::loss_forward_effects.
      const double TV = static_cast<double>(p.mbs) * static_cast<double>(p.seq) *
                        static_cast<double>(model.spec().vocab) / p.tp;
      const bool f32_saved = (p.loss_dtype == Dtype::kFp32 && p.loss() == LossImpl::kEager) ||
                             (p.loss() == LossImpl::kCompiled && p.tp > 1);
      x.cost.act_bytes += static_cast<Bytes>(TV * (f32_saved ? 4.0 : bc));  // compiled: the logits saved
    }
    x.fwd_compute_s = fwd_compute;
    x.bwd_compute_s = bwd_compute;
    x.cost.fwd_s = fwd_compute + tp_fwd;
    x.cost.bwd_s = bwd_compute + tp_bwd;
    x.cost.bwd_weight_s = std::min(weight_grad, x.cost.bwd_s);
    x.cost.bwd_input_s = x.cost.bwd_s - x.cost.bwd_weight_s;
    // The first forward of the step waits on the parameter all-gathers (reshard_after_forward=False: later
    // micro-batches reuse the unsharded parameters).
    x.cost.first_fwd_extra_s = std::max(0.0, fwd_end - x.cost.fwd_s);
    const auto& c = x.res.comm;
    if (rt.gathers_params || rt.param_gather_before_forward)
      x.cost.gather_s = c[static_cast<int>(CommKind::kAllGather)].time_s;

    // Memory as the pipeline holds it. Receive buffers: torch 2.15 _recv_buffers.py _RecvInfo allocates each
    // buffer just before its receive (stage.py _get_recv_ops, allocate_buffer) and hands it to the compute
    // (take_buffer). A received gradient is the output gradient of one backward and dies with it (reference
    // lane, ref-llama3-8b-...-1f1b-grad-accum-8-pp-rank-0: each 32 MiB gradient buffer is freed at the end of
    // its backward; a model that held m of them for the step over-predicted that row by 3.4 %). A received
    // activation is the stage's input, which its first block saves (the same storage: not counted twice); the
    // lane's traces keep every micro-batch's activation buffer to the end of the step, referenced from
    // outside Python (gc.get_referrers finds no owner after the step; the fake process group's receive work
    // objects are the likely holder, so a GPU run may free them after each backward): held for the step here,
    // as measured. DeepSpeed's PipelineEngine (deepspeed/runtime/pipe/engine.py) receives activations into
    // its per-buffer 'inputs' (the saved input again) and gradients into one reused grad_layer buffer. Both
    // keep each micro-batch's stage output until its backward (torch fwd_cache, DeepSpeed
    // pipe_buffers['outputs']).
    const bool first_stage = s == 0, last_stage = s == S - 1;
    Bytes recv = 0, act_adjust = 0, bwd_recv = 0;
    if (torch_stages) {
      recv += first_stage ? 0 : m * send;
      act_adjust -= first_stage ? 0 : send;
      bwd_recv = last_stage ? 0 : send;
    } else {
      recv += last_stage ? 0 : send;
    }
    act_adjust += last_stage ? 0 : send;
    x.recv_bytes = recv;
    // FSDP2 under PP with gradients created in backward (zero_grad(set_to_none)): the sharded gradients are
    // made by the reduction after the stage's last backward (perform_reduce_grad), so they are not held while
    // the micro-batches run; they join the optimizer's tail.
    const bool no_sync = torch_stages && rt.reduce_scatter && !rt.grads_persistent;
    x.sharded_grad_bytes = no_sync ? x.res.persistent_split[1] : 0;
    x.cost.held_bytes = x.res.persistent_bytes - x.sharded_grad_bytes + x.gathered_bytes + recv;
    x.cost.accum_grad_bytes = x.accum_grad_bytes;
    working_sets(prog, sim.units(), no_sync, no_sync ? grad_acc_bytes / bc : 0.0, bwd_recv, x.cost.fwd_work,
                 x.cost.bwd_work, x.cost.bwd_first_work, x.tail_work);
    x.cost.act_bytes = std::max<Bytes>(0, x.cost.act_bytes + act_adjust);
    x.cost.fwd_work.act_bytes = std::max<Bytes>(0, x.cost.fwd_work.act_bytes + act_adjust);
    x.cost.bwd_work.act_bytes = std::max<Bytes>(0, x.cost.bwd_work.act_bytes + act_adjust);
    if (x.cost.bwd_first_work.total() > 0) {
      x.cost.bwd_first_work.act_bytes = std::max<Bytes>(0, x.cost.bwd_first_work.act_bytes + act_adjust);
    }
    if (torch_stages && last_stage && p.loss() == LossImpl::kEager) {
      // The last stage's output is the logits (compute dtype): stage.py forward_one_chunk keeps it in
      // fwd_cache until that micro-batch's backward_one_chunk pops it, and the popped reference lives through
      // stage_backward (the whole stage's backward), where the one-micro-batch simulation frees it at the
      // loss (torchtitan deletes `pred` before backward). Reference lane: the 501 MiB bf16 logits
      // (2,048 x 128,256 x 2) of ref-llama3-8b-...-pp-2 rank 1 are freed after the block's backward.
      const Bytes logits = static_cast<Bytes>(static_cast<double>(p.mbs) * static_cast<double>(p.seq) *
                                              static_cast<double>(model.spec().vocab) / p.tp * bc);
      x.cost.act_bytes += logits;
      x.cost.bwd_work.act_bytes += logits;
      if (x.cost.bwd_first_work.total() > 0) x.cost.bwd_first_work.act_bytes += logits;
    }
    x.reduce_s = c[static_cast<int>(CommKind::kReduceScatter)].time_s +
                 c[static_cast<int>(CommKind::kAllReduce)].time_s;
    if (rt.param_all_gather_after_step) x.post_step_s = c[static_cast<int>(CommKind::kAllGather)].time_s;
    (void)bwd_end;
  }

  // Point-to-point: the peer is gpus / pp ranks away (pp outermost in the mesh). A two-rank all-gather of
  // twice the tensor moves exactly one tensor each way over that link (NCCL's ring over two ranks is one send
  // and one receive per rank), so its time is the send's with NCCL's latency and the link's bandwidth.
  const GroupView peer = cluster.group(2, cluster.gpus() / p.pp);
  const double p2p_s = costs.collective_s(CollectiveKind::kAllGather, 2 * send_bytes, peer);

  PipelineInputs pin;
  pin.schedule = p.pp_schedule;
  pin.pp = p.pp;
  pin.virtual_stages = p.virtual_stages;
  pin.micro_batches = m;
  pin.p2p_s = p2p_s;
  for (const StageSim& x : st) pin.stages.push_back(x.cost);
  const PipelineRun run = run_pipeline(pin);

  // Each rank: the gradient reductions start after each stage's last backward, one after the other on the
  // data-parallel communicator (torch 2.15: REDUCE_GRAD after a stage's last backward in the multi-stage
  // runtime, perform_reduce_grad after the schedule in single-stage ones), then the optimizer step.
  auto sidx = [](int s) { return static_cast<std::size_t>(s); };
  int busiest = 0, slowest = 0;
  Bytes best_peak = -1;
  double step_s = 0;
  std::vector<Bytes> rank_peak(static_cast<std::size_t>(p.pp), 0);
  std::vector<std::array<Bytes, kMemCategories>> rank_bd(static_cast<std::size_t>(p.pp));
  std::vector<Bytes> rank_reserved(static_cast<std::size_t>(p.pp), 0);
  std::vector<char> rank_tail(static_cast<std::size_t>(p.pp), 0);  // the peak is the optimizer's
  std::vector<double> rank_step(static_cast<std::size_t>(p.pp), 0), rank_exposed(rank_step),
      rank_opt(rank_step);
  for (int rank = 0; rank < p.pp; ++rank) {
    const auto R = static_cast<std::size_t>(rank);
    std::vector<int> mine = rank_stages(p, rank);
    std::sort(mine.begin(), mine.end(), [&](int a, int b) {
      return run.stage_last_backward_end_s[sidx(a)] < run.stage_last_backward_end_s[sidx(b)];
    });
    double comm_free = 0, opt = 0, post = 0;
    for (int s : mine) {
      const StageSim& x = st[sidx(s)];
      comm_free = std::max(comm_free, run.stage_last_backward_end_s[sidx(s)]) + x.reduce_s;
      opt += x.res.optimizer_s;
      post += x.post_step_s;
    }
    const double compute_end = run.rank_end_s[R];
    rank_step[R] = std::max(comm_free, compute_end) + opt + post;
    rank_exposed[R] = run.rank_gather_wait_s[R] + (std::max(comm_free, compute_end) - compute_end) + post;
    rank_opt[R] = opt;

    // Memory: the peak over the rank's action sequence (run_pipeline: held state, unsharded gradients between
    // a stage's first and last backward, the micro-batches' saved activations as the schedule's order holds
    // them, and the running action's working set), or the optimizer's tail if higher.
    auto& bd = rank_bd[R];
    bd.fill(0);
    Bytes held_all = 0, tail = 0, sharded_grads = 0;
    WorkingSet tail_ws;
    for (int s : mine) {
      const StageSim& x = st[sidx(s)];
      bd[static_cast<int>(MemCategory::kParams)] += x.res.persistent_split[0];
      bd[static_cast<int>(MemCategory::kGrads)] += x.res.persistent_split[1];
      bd[static_cast<int>(MemCategory::kOptimizer)] += x.res.persistent_split[2];
      bd[static_cast<int>(MemCategory::kGathered)] += x.gathered_bytes;
      bd[static_cast<int>(MemCategory::kCommBuffers)] += x.recv_bytes;
      held_all += x.cost.held_bytes + x.sharded_grad_bytes;
      sharded_grads += x.sharded_grad_bytes;
      if (x.tail_work.total() > tail) tail = x.tail_work.total(), tail_ws = x.tail_work;
      rank_reserved[R] = std::max(rank_reserved[R], x.res.peak_reserved_bytes - x.res.peak_bytes);
    }
    const RankPeak& pk = run.rank_peak[R];
    const bool tail_peak = held_all + tail > pk.peak_bytes;
    rank_tail[R] = tail_peak;
    const WorkingSet& w = tail_peak ? tail_ws : pk.work;
    if (!tail_peak) {
      bd[static_cast<int>(MemCategory::kGrads)] += pk.accum_grad_bytes - sharded_grads;
      bd[static_cast<int>(MemCategory::kActivations)] += pk.saved_act_bytes;
    }
    bd[static_cast<int>(MemCategory::kActivations)] += w.act_bytes;
    bd[static_cast<int>(MemCategory::kCommBuffers)] += w.comm_bytes;
    bd[static_cast<int>(MemCategory::kOther)] += w.other_bytes;
    rank_reserved[R] = std::max<Bytes>(0, rank_reserved[R]);
    for (Bytes b : bd) rank_peak[R] += b;
    rank_reserved[R] += rank_peak[R];
    if (rank_peak[R] > best_peak) best_peak = rank_peak[R], busiest = rank;
    if (rank_step[R] > step_s) step_s = rank_step[R], slowest = rank;
  }

  // The Result: memory of the busiest rank, time of the slowest.
  const auto B = static_cast<std::size_t>(busiest);
  r.persistent_split = {0, 0, 0};
  double host = 0;
  for (int s : rank_stages(p, busiest)) {
    const StageSim& x = st[sidx(s)];
    for (int k = 0; k < 3; ++k)
      r.persistent_split[static_cast<std::size_t>(k)] += x.res.persistent_split[static_cast<std::size_t>(k)];
    host += static_cast<double>(x.res.host_bytes_per_node);
  }
  r.persistent_bytes = r.persistent_split[0] + r.persistent_split[1] + r.persistent_split[2];
  r.breakdown = rank_bd[B];
  r.peak_bytes = rank_peak[B];
  r.first_step_peak_bytes = r.peak_bytes - r.persistent_split[2];  // no optimizer state before the first step
  r.peak_reserved_bytes = rank_reserved[B];
  r.peak_time_s = 0;
  {
    const RankPeak& pk = run.rank_peak[B];
    const char* op = pk.op == PipeOp::kForward         ? "forward"
                     : pk.op == PipeOp::kBackward      ? "backward"
                     : pk.op == PipeOp::kBackwardInput ? "input-gradient backward"
                                                       : "weight-gradient backward";
    r.peak_phase = rank_tail[B] ? "pipeline rank " + str(busiest) + ", optimizer step"
                                : "pipeline rank " + str(busiest) + ", " + op + " of micro-batch " +
                                      str(pk.micro_batch) + " on stage " + str(pk.stage) + ", " +
                                      str(run.stage_max_in_flight[sidx(pk.stage)]) +
                                      " micro-batches in flight at most";
  }
  r.overhead = runtime_overhead(p);
  r.capacity_bytes = cluster.spec().gpu.memory_bytes;
  // Reserved memory under PP: each stage's one-micro-batch simulation was replayed through the caching
  // allocator (when allocator_replay); the rank's reserved is its composed peak plus the largest cache its
  // stages' replays held above their own allocated peak. The replay figures below are that composition, not a
  // replay of the whole pipelined step (docs/model.md "Pipeline parallelism", "Memory").
  r.allocator.mode = p.allocator;
  r.allocator.replayed = allocator_replay;
  if (allocator_replay) {
    r.allocator.peak_allocated_bytes = r.peak_bytes;
    r.allocator.peak_reserved_bytes = r.peak_reserved_bytes;
    r.allocator.fragmentation_bytes = r.peak_reserved_bytes - r.peak_bytes;
    r.allocator.reserved_peak_phase = r.peak_phase;
    for (int s : rank_stages(p, busiest)) {
      const AllocatorSummary& a = st[sidx(s)].res.allocator;
      r.allocator.segments += a.segments;
      r.allocator.device_allocs += a.device_allocs;
      r.allocator.alloc_retries += a.alloc_retries;
      r.allocator.oom = r.allocator.oom || a.oom;
    }
  }
  r.host_bytes_per_node = static_cast<Bytes>(host);
  r.host_capacity_bytes = cluster.spec().node.host_memory_bytes;
  r.fits = r.peak_reserved_bytes + r.overhead.total() <= r.capacity_bytes &&
           (r.host_capacity_bytes == 0 || r.host_bytes_per_node <= r.host_capacity_bytes);

  const auto Sl = static_cast<std::size_t>(slowest);
  r.step_s = step_s;
  r.optimizer_s = rank_opt[Sl];
  r.comm = {};
  double compute = 0, tp_exposed = 0;
  for (int s : rank_stages(p, slowest)) {
    const StageSim& x = st[sidx(s)];
    const auto& c = x.res.comm;
    compute += m * (x.fwd_compute_s + x.bwd_compute_s);
    for (int k = 0; k < kCommKinds; ++k) {
      // Tensor-parallel collectives run every micro-batch; the data-parallel ones once per step.
      const bool per_mb =
          k == static_cast<int>(CommKind::kTpAllGather) || k == static_cast<int>(CommKind::kTpReduceScatter);
      const double n = per_mb ? m : 1;
      CommStats& o = r.comm[static_cast<std::size_t>(k)];
      o.bytes_per_rank += c[static_cast<std::size_t>(k)].bytes_per_rank * n;
      o.time_s += c[static_cast<std::size_t>(k)].time_s * n;
      // The TP collectives' blocking share is part of every forward and backward on the pipeline's
      // timeline (StageCost::fwd_s, bwd_s): exposed in full.
      const double blocking = k == static_cast<int>(CommKind::kTpAllGather)       ? x.tp_ag_block_s
                              : k == static_cast<int>(CommKind::kTpReduceScatter) ? x.tp_rs_block_s
                                                                                  : 0.0;
      o.exposed_s += blocking * n;
      tp_exposed += blocking * n;
      o.count += c[static_cast<std::size_t>(k)].count * static_cast<int>(n);
    }
  }
  // The compute stream's busy time (the pipeline's idle time is the bubble, not communication); exposed:
  // the tensor-parallel waits of every micro-batch, the first forwards' all-gathers and the reductions that
  // outlast the compute.
  r.compute_s = compute + rank_opt[Sl];
  r.exposed_comm_s = tp_exposed + rank_exposed[Sl];
  {
    // Exposed: the first forwards' parameter all-gathers, then the reductions (and post-step gathers) that
    // outlast the rank's compute.
    const double ag = run.rank_gather_wait_s[Sl];
    r.comm[static_cast<int>(CommKind::kAllGather)].exposed_s = ag;
    r.comm[static_cast<int>(rt.reduce_scatter ? CommKind::kReduceScatter : CommKind::kAllReduce)].exposed_s =
        rank_exposed[Sl] - ag;
  }
  // A GPU processes mbs x seq x micro-batches tokens of its pipeline's batch, split over tp x cp x pp GPUs
  // (context parallelism gives each rank seq / cp of every sequence, as summary.cpp counts without PP).
  const double tokens_per_gpu =
      static_cast<double>(p.mbs) * static_cast<double>(p.seq) * m / (static_cast<double>(p.tp) * p.cp * p.pp);
  r.tokens_per_s_per_gpu = r.step_s > 0 ? tokens_per_gpu / r.step_s : 0;
  r.model_flops_per_token = model_flops_per_token(model, p.seq);
  const auto& gpu = cluster.spec().gpu;
  const double peak = p.precision == Precision::kFp32 ? gpu.peak_tf32_flops : gpu.peak_bf16_flops;
  r.mfu = r.tokens_per_s_per_gpu * r.model_flops_per_token / peak;

  auto sum = std::make_shared<PipelineSummary>();
  sum->schedule = p.pp_schedule;
  sum->pp = p.pp;
  sum->stages = S;
  sum->virtual_stages = p.virtual_stages;
  sum->micro_batches = m;
  sum->bubble_fraction = run.bubble_fraction;
  sum->p2p_s = p2p_s;
  sum->busiest_rank = busiest;
  int max_sends = 0;
  for (int n : run.rank_sends) max_sends = std::max(max_sends, n);
  sum->p2p_bytes_per_step = send_bytes * max_sends;
  for (int s = 0; s < S; ++s) {
    const StageSim& x = st[sidx(s)];
    PipelineStage d;
    d.stage = s;
    for (int rank = 0; rank < p.pp; ++rank)
      for (int t : rank_stages(p, rank))
        if (t == s) d.rank = rank;
    d.blocks = x.blocks;
    d.embedding = x.embedding;
    d.head = x.head;
    d.peak_bytes = rank_peak[static_cast<std::size_t>(d.rank)];
    d.persistent_bytes = x.res.persistent_bytes;
    d.activation_bytes = x.cost.act_bytes;
    d.activations_in_flight = run.stage_max_in_flight[sidx(s)];
    d.fwd_s = x.cost.fwd_s;
    d.bwd_s = x.cost.bwd_s;
    sum->stage_detail.push_back(d);
  }
  r.pipeline = std::move(sum);
  if (detail) {
    const StageSim& x = st[sidx(rank_stages(p, busiest)[0])];
    r.detail = x.res.detail;
    r.exposed_intervals = x.res.exposed_intervals;
  }
}

}  // namespace shardplan

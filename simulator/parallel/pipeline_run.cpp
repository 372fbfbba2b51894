// The pipeline's discrete-event run: every rank executes its schedule's actions in order over per-stage
// costs, each action starting when its rank is free and its input has arrived (docs/model.md "Pipeline
// parallelism").
#include <algorithm>
#include <stdexcept>
#include <string>

#include "simulator/parallel/pipeline_schedule.hpp"

namespace shardplan {

namespace {

constexpr double kNotYet = -1;

/// One run of the schedule's orders: the state of every rank and stage while the actions execute.
class PipelineExecutor {
 public:
  explicit PipelineExecutor(const PipelineInputs& in);
  /// Runs every action; throws std::logic_error if the orders deadlock.
  PipelineRun run();

 private:
  std::size_t idx(int s, int mb) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(mb);
  }
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }
  /// Time of a send from stage a to stage b: none on the same rank (the V-shape's turn).
  double hop(int a, int b) const { return rank_of_[at(a)] == rank_of_[at(b)] ? 0.0 : in_.p2p_s; }
  /// When action `a`'s input is there and how long it runs (`busy`: its compute), or false while an input
  /// is still missing.
  bool timing(int rank, const PipeAction& a, double& ready, double& dur, double& busy);
  /// The rank's memory while action `a` runs (held state, unsharded gradients, other micro-batches' saved
  /// activations, the action's working set); updates the rank's peak.
  void account_memory(int rank, const PipeAction& a);
  /// Records what action `a` produced (its end time, sends, activations in flight, last backwards).
  void finish(int rank, const PipeAction& a, double end);

  const PipelineInputs& in_;
  int pp_, S_, m_;
  std::vector<int> rank_of_;
  std::vector<std::vector<PipeAction>> orders_;
  std::vector<double> fwd_end_, grad_end_, gather_start_;
  std::vector<char> first_fwd_done_;
  std::vector<int> in_flight_, grads_done_;  // grads_done: B or W actions run (weight gradients made)
  std::vector<Bytes> act_now_, accum_now_, held_;
  PipelineRun out_;
};

PipelineExecutor::PipelineExecutor(const PipelineInputs& in)
    : in_(in), pp_(in.pp), S_(static_cast<int>(in.stages.size())), m_(in.micro_batches) {
  Plan shape;
  shape.pp = pp_;
  shape.pp_schedule = in.schedule;
  shape.virtual_stages = in.virtual_stages;
  rank_of_.assign(at(S_), 0);
  for (int r = 0; r < pp_; ++r)
    for (int s : rank_stages(shape, r)) rank_of_[at(s)] = r;
  orders_ = pipeline_order(in.schedule, pp_, in.virtual_stages, m_);
  fwd_end_.assign(at(S_) * at(m_), kNotYet);
  grad_end_ = fwd_end_;
  first_fwd_done_.assign(at(S_), 0);
  in_flight_.assign(at(S_), 0);
  grads_done_.assign(at(S_), 0);
  act_now_.assign(at(pp_), 0);
  accum_now_ = held_ = act_now_;
  out_.rank_busy_s.assign(at(pp_), 0);
  out_.rank_end_s.assign(at(pp_), 0);
  out_.rank_gather_wait_s.assign(at(pp_), 0);
  out_.stage_last_backward_end_s.assign(at(S_), 0);
  out_.stage_max_in_flight.assign(at(S_), 0);
  out_.rank_peak_activation_bytes.assign(at(pp_), 0);
  out_.rank_peak.assign(at(pp_), RankPeak{});
  out_.rank_sends.assign(at(pp_), 0);
  // Each rank's parameter all-gathers run back to back on its data-parallel stream from the step's start, in
  // the order of its stages' first forwards.
  gather_start_.assign(at(S_), 0);
  for (int r = 0; r < pp_; ++r) {
    double t = 0;
    std::vector<char> seen(at(S_), 0);
    for (const PipeAction& a : orders_[at(r)])
      if (a.op == PipeOp::kForward && !seen[at(a.stage)]) {
        seen[at(a.stage)] = 1;
        gather_start_[at(a.stage)] = t;
        t += in_.stages[at(a.stage)].gather_s;
      }
    for (int s : rank_stages(shape, r)) held_[at(r)] += in_.stages[at(s)].held_bytes;
  }
}

bool PipelineExecutor::timing(int rank, const PipeAction& a, double& ready, double& dur, double& busy) {
  const auto R = at(rank);
  const StageCost& c = in_.stages[at(a.stage)];
  ready = 0;
  if (a.op == PipeOp::kForward) {
    if (a.stage > 0) {
      const double prev = fwd_end_[idx(a.stage - 1, a.micro_batch)];
      if (prev < 0) return false;
      ready = prev + hop(a.stage - 1, a.stage);
    }
    busy = dur = c.fwd_s;
    if (!first_fwd_done_[at(a.stage)]) {
      // The first forward ends when its compute does and no earlier than its gathers allow.
      const double start = std::max(ready, out_.rank_end_s[R]);
      const double gated = gather_start_[at(a.stage)] + c.fwd_s + c.first_fwd_extra_s;
      dur = std::max(c.fwd_s, gated - start);
      out_.rank_gather_wait_s[R] += dur - c.fwd_s;
    }
    first_fwd_done_[at(a.stage)] = 1;
    return true;
  }
  if (a.op == PipeOp::kBackwardWeight) {
    ready = grad_end_[idx(a.stage, a.micro_batch)];
    busy = dur = c.bwd_weight_s;
    return ready >= 0;
  }
  const double f = fwd_end_[idx(a.stage, a.micro_batch)];
  if (f < 0) return false;
  ready = f;
  if (a.stage + 1 < S_) {
    const double g = grad_end_[idx(a.stage + 1, a.micro_batch)];
    if (g < 0) return false;
    ready = std::max(ready, g + hop(a.stage + 1, a.stage));
  }
  busy = dur = a.op == PipeOp::kBackward ? c.bwd_s : c.bwd_input_s;
  return true;
}

void PipelineExecutor::account_memory(int rank, const PipeAction& a) {
  const auto R = at(rank), s = at(a.stage);
  const StageCost& c = in_.stages[s];
  const bool makes_grads = a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight;
  const bool growing = a.op == PipeOp::kBackward && grads_done_[s] == 0 && c.bwd_first_work.total() > 0;
  if (makes_grads && grads_done_[s] == 0 && !growing) accum_now_[R] += c.accum_grad_bytes;
  RankPeak now;
  now.held_bytes = held_[R];
  now.accum_grad_bytes = accum_now_[R];
  now.saved_act_bytes = act_now_[R];
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
  if (now.peak_bytes > out_.rank_peak[R].peak_bytes) out_.rank_peak[R] = now;
  if (growing) accum_now_[R] += c.accum_grad_bytes;  // charged from the first backward's end
}

void PipelineExecutor::finish(int rank, const PipeAction& a, double end) {
  const auto R = at(rank), s = at(a.stage);
  const StageCost& c = in_.stages[s];
  if (a.op == PipeOp::kForward) {
    fwd_end_[idx(a.stage, a.micro_batch)] = end;
    if (a.stage + 1 < S_ && rank_of_[s + 1] != rank) ++out_.rank_sends[R];
    act_now_[R] += c.act_bytes;
    out_.stage_max_in_flight[s] = std::max(out_.stage_max_in_flight[s], ++in_flight_[s]);
    out_.rank_peak_activation_bytes[R] = std::max(out_.rank_peak_activation_bytes[R], act_now_[R]);
    return;
  }
  if (a.op != PipeOp::kBackwardWeight) {
    grad_end_[idx(a.stage, a.micro_batch)] = end;
    if (a.stage > 0 && rank_of_[s - 1] != rank) ++out_.rank_sends[R];
  }
  if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) {
    // The saved activations die with the weight gradient; after the stage's last one its gradients are
    // reduced and the unsharded ones freed.
    act_now_[R] -= c.act_bytes;
    --in_flight_[s];
    if (++grads_done_[s] == m_) accum_now_[R] -= c.accum_grad_bytes;
  }
  out_.stage_last_backward_end_s[s] = std::max(out_.stage_last_backward_end_s[s], end);
}

PipelineRun PipelineExecutor::run() {
  std::vector<std::size_t> next(at(pp_), 0);
  std::size_t remaining = 0;
  for (const auto& o : orders_) remaining += o.size();
  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (int r = 0; r < pp_; ++r) {
      const auto R = at(r);
      while (next[R] < orders_[R].size()) {
        const PipeAction& a = orders_[R][next[R]];
        double ready = 0, dur = 0, busy = 0;
        if (!timing(r, a, ready, dur, busy)) break;
        const double end = std::max(ready, out_.rank_end_s[R]) + dur;
        out_.rank_end_s[R] = end;
        out_.rank_busy_s[R] += busy;
        account_memory(r, a);
        finish(r, a, end);
        ++next[R];
        --remaining;
        progress = true;
      }
    }
  }
  if (remaining > 0)
    throw std::logic_error("pipeline schedule deadlocked (" + std::to_string(remaining) + " actions left)");
  double busy = 0;
  for (int r = 0; r < pp_; ++r) {
    out_.makespan_s = std::max(out_.makespan_s, out_.rank_end_s[at(r)]);
    busy += out_.rank_busy_s[at(r)];
  }
  out_.bubble_fraction = out_.makespan_s > 0 ? 1.0 - busy / (pp_ * out_.makespan_s) : 0.0;
  return out_;
}

}  // namespace

PipelineRun run_pipeline(const PipelineInputs& in) {
  return PipelineExecutor(in).run();
}

}  // namespace shardplan

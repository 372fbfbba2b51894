// The pipeline's discrete-event run: every rank executes its schedule's actions in order over per-stage
// costs, each action starting when its rank is free, its stage unsharded and its input has arrived; each
// rank's data-parallel stream runs the parameter all-gathers and the gradient reductions (docs/model.md
// "Pipeline parallelism").
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
  /// Time of a send across the boundary between stages a and a + 1: none on the same rank (the V-shape's
  /// turn).
  double edge(int a) const {
    if (rank_of_[at(a)] == rank_of_[at(a + 1)]) return 0.0;
    return in_.edge_p2p_s.empty() ? in_.p2p_s : in_.edge_p2p_s[at(a)];
  }
  /// When a received input produced at `produced` (on another rank) is there for the rank's next action.
  double arrival(int rank, double produced, double send_s) const;
  /// The initial all-gathers, the residency steps and the held memory of every rank.
  void plan_data_parallel(const Plan& shape);
  /// Before action `i` of `rank`: its stages resharded and unsharded (an all-gather on the data-parallel
  /// stream after the rank's previous action); returns when the action's stage is unsharded.
  double residency(int rank, std::size_t i, const PipeAction& a);
  /// When action `a`'s input is there and how long it runs (`busy`: its compute), or false while an input
  /// is still missing.
  bool timing(int rank, const PipeAction& a, double& ready, double& dur, double& busy);
  /// The rank's memory while action `a` runs (held state, unsharded parameters and gradients, other
  /// micro-batches' saved activations, the action's working set); updates the rank's peak.
  RankPeak account_memory(int rank, const PipeAction& a);
  /// Records what action `a` produced (its end time, sends, activations in flight); after a stage's last
  /// weight gradients, its reduction on the data-parallel stream.
  void finish(int rank, const PipeAction& a, double end);

  const PipelineInputs& in_;
  int pp_, S_, m_;
  std::vector<int> rank_of_;
  std::vector<std::vector<PipeAction>> orders_;
  std::vector<Residency> residency_;  // per rank; empty when every stage stays unsharded
  std::vector<double> fwd_end_, grad_end_, gather_start_, unsharded_at_;
  std::vector<char> first_fwd_done_, initial_gather_;
  std::vector<int> in_flight_, grads_done_;  // grads_done: B or W actions run (weight gradients made)
  std::vector<Bytes> act_now_, accum_now_, held_, gathered_now_;
  std::vector<double> dp_free_, prev_end_, prev2_end_;  // per rank; the ends of its last two actions
  std::vector<std::vector<double>> starts_, ends_;      // per rank: its actions' start and end times so far
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
  accum_now_ = held_ = gathered_now_ = act_now_;
  dp_free_.assign(at(pp_), 0);
  prev_end_ = prev2_end_ = dp_free_;
  starts_.assign(at(pp_), {});
  ends_.assign(at(pp_), {});
  out_.rank_busy_s.assign(at(pp_), 0);
  out_.rank_end_s.assign(at(pp_), 0);
  out_.rank_gather_wait_s.assign(at(pp_), 0);
  out_.rank_reduce_wait_s.assign(at(pp_), 0);
  out_.rank_dp_end_s.assign(at(pp_), 0);
  out_.rank_regather_s.assign(at(pp_), 0);
  out_.stage_last_backward_end_s.assign(at(S_), 0);
  out_.stage_max_in_flight.assign(at(S_), 0);
  out_.rank_peak_activation_bytes.assign(at(pp_), 0);
  out_.rank_peak.assign(at(pp_), RankPeak{});
  out_.rank_sends.assign(at(pp_), 0);
  out_.rank_actions.assign(at(pp_), {});
  plan_data_parallel(shape);
}

void PipelineExecutor::plan_data_parallel(const Plan& shape) {
  // Each rank's initial parameter all-gathers run back to back on its data-parallel stream from the step's
  // start, in the order of its stages' first forwards (the CPU runs ahead of the GPU): every stage, or with
  // a residency window the stages torch unshards before the first action.
  gather_start_.assign(at(S_), 0);
  unsharded_at_.assign(at(S_), 0);
  initial_gather_.assign(at(S_), 0);
  residency_.assign(at(pp_), Residency{});
  for (int r = 0; r < pp_; ++r) {
    const auto& order = orders_[at(r)];
    const std::vector<int> mine = rank_stages(shape, r);
    const bool window = in_.max_active_stages > 0 && static_cast<int>(mine.size()) > in_.max_active_stages;
    if (window) residency_[at(r)] = fsdp_residency(order, in_.max_active_stages);
    for (int s : mine) {
      held_[at(r)] += in_.stages[at(s)].held_bytes;
      const bool first = !window || order.empty() ||
                         std::find(residency_[at(r)].unshard[0].begin(), residency_[at(r)].unshard[0].end(),
                                   s) != residency_[at(r)].unshard[0].end();
      initial_gather_[at(s)] = first ? 1 : 0;
      if (first) gathered_now_[at(r)] += in_.stages[at(s)].gathered_bytes;
    }
    double t = 0;
    std::vector<char> seen(at(S_), 0);
    for (const PipeAction& a : order)
      if (a.op == PipeOp::kForward && !seen[at(a.stage)] && initial_gather_[at(a.stage)]) {
        seen[at(a.stage)] = 1;
        gather_start_[at(a.stage)] = t;
        t += in_.stages[at(a.stage)].gather_s;
      }
    dp_free_[at(r)] = t;
  }
}

double PipelineExecutor::residency(int rank, std::size_t i, const PipeAction& a) {
  const auto R = at(rank);
  const Residency& res = residency_[R];
  if (res.unshard.empty()) return 0;
  for (int s : res.reshard[i]) gathered_now_[R] -= in_.stages[at(s)].gathered_bytes;
  for (int s : res.unshard[i]) {
    if (i == 0 && initial_gather_[at(s)]) continue;  // the initial all-gathers (plan_data_parallel)
    // UNSHARD: FSDPModule.unshard(async_op=True) issues the all-gather after the rank's previous action; the
    // stage's next compute waits on it (_PipelineScheduleRuntime._assert_unsharded).
    const StageCost& c = in_.stages[at(s)];
    const double start = std::max(dp_free_[R], out_.rank_end_s[R]);
    dp_free_[R] = start + c.gather_s;
    unsharded_at_[at(s)] = dp_free_[R];
    out_.rank_regather_s[R] += c.gather_s;
    gathered_now_[R] += c.gathered_bytes;
  }
  return unsharded_at_[at(a.stage)];
}

double PipelineExecutor::arrival(int rank, double produced, double send_s) const {
  // The receive runs from when it is posted (after the rank's previous action, or the one before it) and
  // the sender's data is there.
  const auto R = at(rank);
  if (in_.recv_posting == RecvPosting::kAsap) {
    // The receiver's action in progress when the data is produced, if any, holds the receive back to its end.
    const auto& st = starts_[R];
    const auto it = std::upper_bound(st.begin(), st.end(), produced);
    const std::size_t k = static_cast<std::size_t>(it - st.begin());
    const double busy_until = k > 0 ? ends_[R][k - 1] : 0.0;
    return std::max(produced, busy_until) + send_s;
  }
  const double posted = in_.recv_posting == RecvPosting::kAtConsumer ? prev_end_[R] : prev2_end_[R];
  return std::max(produced, posted) + send_s;
}

bool PipelineExecutor::timing(int rank, const PipeAction& a, double& ready, double& dur, double& busy) {
  const auto R = at(rank);
  const StageCost& c = in_.stages[at(a.stage)];
  ready = 0;
  if (a.op == PipeOp::kForward) {
    if (a.stage > 0) {
      const double prev = fwd_end_[idx(a.stage - 1, a.micro_batch)];
      if (prev < 0) return false;
      ready = rank_of_[at(a.stage - 1)] == rank ? prev : arrival(rank, prev, edge(a.stage - 1));
    }
    busy = dur = c.fwd_s;
    if (!first_fwd_done_[at(a.stage)]) {
      // The first forward ends when its compute does and no earlier than its initial gathers allow.
      busy = c.fwd_s + c.first_fwd_s;
      dur = busy;
      if (initial_gather_[at(a.stage)]) {
        const double start = std::max(ready, out_.rank_end_s[R]);
        const double gated = gather_start_[at(a.stage)] + busy + c.first_fwd_extra_s;
        dur = std::max(busy, gated - start);
        out_.rank_gather_wait_s[R] += dur - busy;
      }
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
    ready = std::max(ready, rank_of_[at(a.stage + 1)] == rank ? g : arrival(rank, g, edge(a.stage)));
  }
  busy = dur = a.op == PipeOp::kBackward ? c.bwd_s : c.bwd_input_s;
  return true;
}

RankPeak PipelineExecutor::account_memory(int rank, const PipeAction& a) {
  const auto R = at(rank), s = at(a.stage);
  const StageCost& c = in_.stages[s];
  const bool makes_grads = a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight;
  const bool growing = a.op == PipeOp::kBackward && grads_done_[s] == 0 && c.bwd_first_work.total() > 0;
  if (makes_grads && grads_done_[s] == 0 && !growing) accum_now_[R] += c.accum_grad_bytes;
  RankPeak now;
  now.held_bytes = held_[R];
  now.gathered_bytes = gathered_now_[R];
  now.accum_grad_bytes = accum_now_[R];
  now.saved_act_bytes = act_now_[R];
  if (a.op == PipeOp::kForward) {
    now.work = c.fwd_work;
  } else if (a.op != PipeOp::kBackwardWeight) {
    now.saved_act_bytes -= c.act_bytes;  // its own activations are part of the backward's working set
    now.work = growing ? c.bwd_first_work : c.bwd_work;
  }
  now.peak_bytes =
      now.held_bytes + now.gathered_bytes + now.accum_grad_bytes + now.saved_act_bytes + now.work.total();
  now.stage = a.stage;
  now.micro_batch = a.micro_batch;
  now.op = a.op;
  if (now.peak_bytes > out_.rank_peak[R].peak_bytes) out_.rank_peak[R] = now;
  if (growing) accum_now_[R] += c.accum_grad_bytes;  // charged from the first backward's end
  return now;
}

void PipelineExecutor::finish(int rank, const PipeAction& a, double end) {
  const auto R = at(rank), s = at(a.stage);
  const StageCost& c = in_.stages[s];
  prev2_end_[R] = prev_end_[R];
  prev_end_[R] = end;
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
    // reduced on the data-parallel stream and the unsharded ones freed.
    act_now_[R] -= c.act_bytes;
    --in_flight_[s];
    if (++grads_done_[s] == m_) {
      accum_now_[R] -= c.accum_grad_bytes;
      dp_free_[R] = std::max(dp_free_[R], end) + c.reduce_s;
      if (in_.reduce_waits && dp_free_[R] > end) {
        out_.rank_reduce_wait_s[R] += dp_free_[R] - end;
        out_.rank_actions[R].back().reduce_wait_end_s = dp_free_[R];
        out_.rank_end_s[R] = dp_free_[R];
        prev_end_[R] = dp_free_[R];
      }
    }
  }
  out_.stage_last_backward_end_s[s] = std::max(out_.stage_last_backward_end_s[s], end);
}

PipelineRun PipelineExecutor::run() {
  std::vector<std::size_t> next(at(pp_), 0);
  std::vector<double> stage_ready(at(pp_), kNotYet);  // the next action's stage unsharded (residency)
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
        // The residency step runs once per action, when its inputs are known (the order's position).
        if (stage_ready[R] < 0) stage_ready[R] = residency(r, next[R], a);
        const double free = std::max(ready, out_.rank_end_s[R]);
        const double start = std::max(free, stage_ready[R]);
        out_.rank_gather_wait_s[R] += start - free;
        stage_ready[R] = kNotYet;
        const double end = start + dur;
        starts_[R].push_back(start);
        ends_[R].push_back(end);
        out_.rank_end_s[R] = end;
        out_.rank_busy_s[R] += busy;
        out_.rank_actions[R].push_back({a, free, start, end, end, account_memory(r, a)});
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
    out_.rank_dp_end_s[at(r)] = dp_free_[at(r)];
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

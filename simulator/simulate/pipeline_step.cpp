// One pipeline-parallel step composed from per-stage simulations (pipeline_stage.cpp) and the schedule's run
// (parallel/): each rank's time and memory, then the Result of the slowest and busiest ranks (docs/model.md
// "Pipeline parallelism").
#include "simulator/simulate/pipeline_step.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "simulator/memory/memory.hpp"
#include "simulator/simulate/pipeline_stage.hpp"
#include "simulator/simulate/simulate.hpp"
#include "simulator/simulate/summary.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

namespace {

std::string str(std::int64_t v) {
  return std::to_string(v);
}
std::size_t at(int i) {
  return static_cast<std::size_t>(i);
}

/// One pipeline rank's step: its time and its memory at its peak.
struct RankStep {
  double step_s = 0, exposed_s = 0, optimizer_s = 0;
  Bytes peak_bytes = 0, reserved_bytes = 0;
  std::array<Bytes, kMemCategories> breakdown{};
  bool tail_peak = false;               ///< the peak is the optimizer's
  double tail_start_s = 0, post_s = 0;  ///< when the optimizer starts; what runs after it
  Bytes tail_bytes = 0;                 ///< held state plus the optimizer's transients
};

/// Rank `rank`'s time: its compute (the schedule's run, which includes the waits on all-gathers and, for
/// torch's FSDP stages, on each stage's gradient reduction), the data-parallel stream's last reduction, then
/// the optimizer step and what follows it.
void rank_time(const Plan& p, const std::vector<StageSim>& st, const PipelineRun& run, int rank,
               RankStep& o) {
  double post = 0;
  for (int s : rank_stages(p, rank)) {
    o.optimizer_s += st[at(s)].res.optimizer_s;
    post += st[at(s)].post_step_s;
  }
  const double compute_end = run.rank_end_s[at(rank)];
  const double end = std::max(run.rank_dp_end_s[at(rank)], compute_end);
  o.step_s = end + o.optimizer_s + post;
  o.tail_start_s = end;
  o.post_s = post;
  o.exposed_s =
      run.rank_gather_wait_s[at(rank)] + run.rank_reduce_wait_s[at(rank)] + (end - compute_end) + post;
}

/// Rank `rank`'s memory: the peak over its action sequence (run_pipeline: held state, unsharded gradients
/// between a stage's first and last backward, the micro-batches' saved activations as the schedule's order
/// holds them, and the running action's working set), or the optimizer's tail if higher.
void rank_memory(const Plan& p, const std::vector<StageSim>& st, const PipelineRun& run, int rank,
                 RankStep& o) {
  auto& bd = o.breakdown;
  Bytes held_all = 0, gathered_all = 0, tail = 0, sharded_grads = 0, reserved_extra = 0;
  WorkingSet tail_ws;
  for (int s : rank_stages(p, rank)) {
    const StageSim& x = st[at(s)];
    bd[static_cast<int>(MemCategory::kParams)] += x.res.persistent_split[0];
    bd[static_cast<int>(MemCategory::kGrads)] += x.res.persistent_split[1];
    bd[static_cast<int>(MemCategory::kOptimizer)] += x.res.persistent_split[2];
    bd[static_cast<int>(MemCategory::kCommBuffers)] += x.recv_bytes;
    bd[static_cast<int>(MemCategory::kOther)] += model_buffer_bytes(*x.graph, p);  // the stage's RoPE caches
    gathered_all += x.gathered_bytes;
    held_all += x.cost.held_bytes + x.gathered_bytes + x.sharded_grad_bytes;
    sharded_grads += x.sharded_grad_bytes;
    if (x.tail_work.total() > tail) tail = x.tail_work.total(), tail_ws = x.tail_work;
    reserved_extra = std::max(reserved_extra, x.res.peak_reserved_bytes - x.res.peak_bytes);
  }
  const RankPeak& pk = run.rank_peak[at(rank)];
  o.tail_bytes = held_all + tail;
  o.tail_peak = held_all + tail > pk.peak_bytes;
  const WorkingSet& w = o.tail_peak ? tail_ws : pk.work;
  bd[static_cast<int>(MemCategory::kGathered)] += o.tail_peak ? gathered_all : pk.gathered_bytes;
  if (!o.tail_peak) {
    bd[static_cast<int>(MemCategory::kGrads)] += pk.accum_grad_bytes - sharded_grads;
    bd[static_cast<int>(MemCategory::kActivations)] += pk.saved_act_bytes;
  }
  bd[static_cast<int>(MemCategory::kActivations)] += w.act_bytes;
  bd[static_cast<int>(MemCategory::kCommBuffers)] += w.comm_bytes;
  bd[static_cast<int>(MemCategory::kOther)] += w.other_bytes;
  for (Bytes b : bd) o.peak_bytes += b;
  o.reserved_bytes = o.peak_bytes + std::max<Bytes>(0, reserved_extra);
}

/// Memory of the busiest rank into `r`: persistent state, peak, reserved, the allocator summary, fits.
void fill_memory(const ModelGraph& model, const Cluster& cluster, const Plan& p,
                 const std::vector<StageSim>& st, const PipelineRun& run, const RankStep& o, int busiest,
                 bool allocator_replay, Result& r) {
  r.persistent_split = {0, 0, 0};
  double host = 0;
  for (int s : rank_stages(p, busiest)) {
    const StageSim& x = st[at(s)];
    for (std::size_t k = 0; k < 3; ++k) r.persistent_split[k] += x.res.persistent_split[k];
    host += static_cast<double>(x.res.host_bytes_per_node);
  }
  r.persistent_bytes = r.persistent_split[0] + r.persistent_split[1] + r.persistent_split[2];
  r.breakdown = o.breakdown;
  r.peak_bytes = o.peak_bytes;
  r.first_step_peak_bytes = r.peak_bytes - r.persistent_split[2];  // no optimizer state before the first step
  r.peak_reserved_bytes = o.reserved_bytes;
  r.peak_time_s = 0;
  const RankPeak& pk = run.rank_peak[at(busiest)];
  const char* op = pk.op == PipeOp::kForward         ? "forward"
                   : pk.op == PipeOp::kBackward      ? "backward"
                   : pk.op == PipeOp::kBackwardInput ? "input-gradient backward"
                                                     : "weight-gradient backward";
  r.peak_phase = o.tail_peak
                     ? "pipeline rank " + str(busiest) + ", optimizer step"
                     : "pipeline rank " + str(busiest) + ", " + op + " of micro-batch " +
                           str(pk.micro_batch) + " on stage " + str(pk.stage) + ", " +
                           str(run.stage_max_in_flight[at(pk.stage)]) + " micro-batches in flight at most";
  r.overhead = runtime_overhead(p, model, cluster);
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
      const AllocatorSummary& a = st[at(s)].res.allocator;
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
}

/// Time of the slowest rank into `r`: step, compute, communication (tensor-parallel collectives every
/// micro-batch, data-parallel ones once per step), tokens/s and MFU.
void fill_time(const ModelGraph& model, const Cluster& cluster, const Plan& p, const RuntimeTraits& rt,
               const std::vector<StageSim>& st, const PipelineRun& run, const RankStep& o, int slowest,
               Result& r) {
  const int m = p.grad_accum;
  r.step_s = o.step_s;
  r.optimizer_s = o.optimizer_s;
  r.comm = {};
  double compute = 0, tp_exposed = 0;
  for (int s : rank_stages(p, slowest)) {
    const StageSim& x = st[at(s)];
    const auto& c = x.res.comm;
    compute += m * (x.fwd_compute_s + x.bwd_compute_s) + x.cost.first_fwd_s;
    for (int k = 0; k < kCommKinds; ++k) {
      // Tensor-parallel collectives, EP all-to-alls and CP rings run every micro-batch; the data-parallel
      // ones once per step.
      const bool per_mb = k == static_cast<int>(CommKind::kTpAllGather) ||
                          k == static_cast<int>(CommKind::kTpReduceScatter) ||
                          k == static_cast<int>(CommKind::kAllToAll) ||
                          k == static_cast<int>(CommKind::kCpRing);
      const double n = per_mb ? m : 1;
      CommStats& out = r.comm[at(k)];
      out.bytes_per_rank += c[at(k)].bytes_per_rank * n;
      out.time_s += c[at(k)].time_s * n;
      // The blocking share of the TP collectives, EP all-to-alls and CP rings is part of every forward and
      // backward on the pipeline's timeline (StageCost::fwd_s, bwd_s): exposed in full.
      const double blocking = k == static_cast<int>(CommKind::kTpAllGather)       ? x.tp_ag_block_s
                              : k == static_cast<int>(CommKind::kTpReduceScatter) ? x.tp_rs_block_s
                              : k == static_cast<int>(CommKind::kAllToAll)        ? x.ep_block_s
                              : k == static_cast<int>(CommKind::kCpRing)          ? x.cp_block_s
                                                                                  : 0.0;
      out.exposed_s += blocking * n;
      tp_exposed += blocking * n;
      out.count += c[at(k)].count * static_cast<int>(n);
    }
  }
  // The compute stream's busy time (the pipeline's idle time is the bubble, not communication); exposed:
  // the tensor-parallel waits of every micro-batch, the first forwards' all-gathers and the reductions (and
  // post-step gathers) that outlast the rank's compute.
  r.compute_s = compute + o.optimizer_s;
  r.exposed_comm_s = tp_exposed + o.exposed_s;
  const double ag = run.rank_gather_wait_s[at(slowest)];
  r.comm[static_cast<int>(CommKind::kAllGather)].exposed_s = ag;
  r.comm[static_cast<int>(rt.reduce_scatter ? CommKind::kReduceScatter : CommKind::kAllReduce)].exposed_s =
      o.exposed_s - ag;
  // A GPU processes mbs x seq x micro-batches tokens of its pipeline's batch, split over tp x cp x pp GPUs
  // (context parallelism gives each rank seq / cp of every sequence, as summary.cpp counts without PP).
  const double tokens_per_gpu =
      static_cast<double>(p.mbs) * static_cast<double>(p.seq) * m / (static_cast<double>(p.tp) * p.cp * p.pp);
  r.tokens_per_s_per_gpu = r.step_s > 0 ? tokens_per_gpu / r.step_s : 0;
  r.model_flops_per_token = model_flops_per_token(model, p.seq);
  const auto& gpu = cluster.spec().gpu;
  const double peak = p.precision == Precision::kFp32 ? gpu.peak_tf32_flops : gpu.peak_bf16_flops;
  r.mfu = r.tokens_per_s_per_gpu * r.model_flops_per_token / peak;
}

/// The pipeline summary: schedule, bubble, p2p, and each stage with its rank's peak.
std::shared_ptr<PipelineSummary> summary(const Plan& p, const std::vector<StageSim>& st,
                                         const PipelineRun& run, const std::vector<RankStep>& ranks,
                                         int busiest, double p2p_s, double send_bytes) {
  auto sum = std::make_shared<PipelineSummary>();
  sum->schedule = p.pp_schedule;
  sum->pp = p.pp;
  sum->stages = p.stages();
  sum->virtual_stages = p.virtual_stages;
  sum->micro_batches = p.grad_accum;
  sum->bubble_fraction = run.bubble_fraction;
  sum->p2p_s = p2p_s;
  sum->busiest_rank = busiest;
  int max_sends = 0;
  for (int n : run.rank_sends) max_sends = std::max(max_sends, n);
  sum->p2p_bytes_per_step = send_bytes * max_sends;
  for (int s = 0; s < p.stages(); ++s) {
    const StageSim& x = st[at(s)];
    PipelineStage d;
    d.stage = s;
    d.rank = stage_rank(p, s);
    d.blocks = x.blocks;
    d.embedding = x.embedding;
    d.head = x.head;
    d.peak_bytes = ranks[at(d.rank)].peak_bytes;
    d.persistent_bytes = x.res.persistent_bytes;
    d.activation_bytes = x.cost.act_bytes;
    d.activations_in_flight = run.stage_max_in_flight[at(s)];
    d.fwd_s = x.cost.fwd_s;
    d.bwd_s = x.cost.bwd_s;
    sum->stage_detail.push_back(d);
  }
  return sum;
}

/// The whole step for the charts (PipelineSummary::spans): every rank's actions with its memory, the busiest
/// rank's optimizer tail, and the slowest rank's exposed communication as the Result counts it
/// (exposed_comm_s): the waits on parameter all-gathers before an action, each action's blocking TP
/// collectives at its end (a backward split into I and W shares its TP time by duration), the waits on a
/// stage's gradient reduction, the reductions that outlast the compute and the post-step gathers.
void step_spans(const Plan& p, const std::vector<StageSim>& st, const PipelineRun& run,
                const std::vector<RankStep>& ranks, int busiest, int slowest, PipelineSummary& sum,
                std::vector<std::pair<double, double>>& exposed) {
  for (int rank = 0; rank < p.pp; ++rank)
    for (const PipelineRun::TimedAction& t : run.rank_actions[at(rank)]) {
      PipelineSpan sp;
      sp.rank = rank;
      sp.stage = t.action.stage;
      sp.micro_batch = t.action.micro_batch;
      sp.op = t.action.op == PipeOp::kForward         ? 'F'
              : t.action.op == PipeOp::kBackward      ? 'B'
              : t.action.op == PipeOp::kBackwardInput ? 'I'
                                                      : 'W';
      sp.start_s = t.start_s;
      sp.end_s = t.end_s;
      sp.held_bytes = t.memory.held_bytes + t.memory.gathered_bytes;
      sp.accum_grad_bytes = t.memory.accum_grad_bytes;
      sp.saved_act_bytes = t.memory.saved_act_bytes;
      sp.work_bytes = t.memory.work.total();
      sum.spans.push_back(sp);
    }
  sum.slowest_rank = slowest;
  sum.tail_start_s = ranks[at(busiest)].tail_start_s;
  sum.tail_bytes = ranks[at(busiest)].tail_bytes;
  const RankStep& o = ranks[at(slowest)];
  std::vector<char> first_seen(at(p.stages()), 0);
  for (const PipelineRun::TimedAction& t : run.rank_actions[at(slowest)]) {
    const StageSim& x = st[at(t.action.stage)];
    if (t.start_s > t.free_s) exposed.push_back({t.free_s, t.start_s});
    double tp = 0;
    if (t.action.op == PipeOp::kForward) {
      tp = x.tp_fwd_block_s + x.ep_cp_fwd_block_s;
      // A stage's first forward waits inside its span on the initial all-gathers (run_pipeline's timing).
      if (!first_seen[at(t.action.stage)]) {
        first_seen[at(t.action.stage)] = 1;
        const double wait = (t.end_s - t.start_s) - (x.cost.fwd_s + x.cost.first_fwd_s);
        if (wait > 0) exposed.push_back({t.start_s, t.start_s + wait});
      }
    } else if (t.action.op == PipeOp::kBackward) {
      tp = x.tp_bwd_block_s + x.ep_cp_bwd_block_s;
    } else if (x.cost.bwd_s > 0) {
      const double part = t.action.op == PipeOp::kBackwardInput ? x.cost.bwd_input_s : x.cost.bwd_weight_s;
      tp = (x.tp_bwd_block_s + x.ep_cp_bwd_block_s) * part / x.cost.bwd_s;
    }
    if (tp > 0) exposed.push_back({t.end_s - tp, t.end_s});
    if (t.reduce_wait_end_s > t.end_s) exposed.push_back({t.end_s, t.reduce_wait_end_s});
  }
  const double compute_end = run.rank_end_s[at(slowest)];
  if (o.tail_start_s > compute_end) exposed.push_back({compute_end, o.tail_start_s});
  if (o.post_s > 0) exposed.push_back({o.step_s - o.post_s, o.step_s});
  std::sort(exposed.begin(), exposed.end());
}

/// The schedule's inputs: the stages' costs, each boundary's send time, and how the runtime posts receives,
/// waits on reductions and keeps stages unsharded.
PipelineInputs pipeline_inputs(const Cluster& cluster, const CostModel& costs, const Plan& p,
                               const StageContext& ctx, const std::vector<StageSim>& st) {
  PipelineInputs in;
  in.schedule = p.pp_schedule;
  in.pp = p.pp;
  in.virtual_stages = p.virtual_stages;
  in.micro_batches = p.grad_accum;
  for (const StageSim& x : st) in.stages.push_back(x.cost);
  // Point-to-point: pipeline rank r's GPUs are r x gpus / pp onward (pp outermost in the mesh: torchtitan's
  // ParallelDims, Megatron's rank order tp-cp-ep-dp-pp), so a boundary's send crosses NVLink inside an NVLink
  // domain and the NIC between domains: NCCL send/recv on that pair (collectives/p2p.cpp). Each TP rank
  // sends its own shard to its peer over its own rail.
  const int G = cluster.gpus(), D = std::max(1, cluster.spec().node.nvlink_domain_gpus);
  for (int s = 0; s + 1 < p.stages(); ++s) {
    const int a = stage_rank(p, s), b = stage_rank(p, s + 1);
    const int ga = a * (G / p.pp), gb = b * (G / p.pp), stride = std::max(1, std::abs(gb - ga));
    const bool crosses = ga / D != gb / D;
    const GroupView pair = cluster.group(2, crosses ? std::max(stride, D) : stride);
    in.edge_p2p_s.push_back(a == b ? 0.0
                                   : costs.collective_s(CollectiveKind::kSendRecv, ctx.send_bytes, pair));
  }
  // Receives: torch's single-stage schedules (Schedule1F1B, ScheduleGPipe) issue each receive just before
  // the compute that waits on it; its multi-stage runtime (_add_send_recv) places them as soon as the sender
  // is scheduled (kAsap: the lowered order puts RECV_F right before the consumer in the warm-up, where the
  // rank waits anyway, and one or two actions ahead in the steady state). Megatron's interleaved schedule
  // posts the next receive ahead with overlap_p2p_comm (the NeMo recipes' setting: NeMo-Framework-Launcher
  // conf/training/*/*.yaml at 1a7171d7), its 1F1B exchanges in place (batch_p2p_comm, then
  // torch.cuda.synchronize: core_r0.8.0 p2p_communication.py _communicate); DeepSpeed's PipelineEngine
  // receives in its own instruction before the pass.
  const bool multi = p.pp_schedule != PpSchedule::k1F1B && p.pp_schedule != PpSchedule::kGpipe;
  in.recv_posting = !multi || ctx.traits.recv_in_own_instruction ? RecvPosting::kAtConsumer
                    : ctx.torch_stages                           ? RecvPosting::kAsap
                                                                 : RecvPosting::kAhead;
  // torch FSDP / DDP stages: the compute stream waits on a stage's gradient reduction right after issuing it
  // (torch 2.15 _PipelineScheduleRuntime: WAIT_REDUCE_GRAD follows REDUCE_GRAD unless defer_reduce_grad_wait,
  // stage.py wait_for_gradient_reduction -> FSDPState._end_backward_iteration: current_stream.wait_event on
  // the post-reduce events; single-stage schedules: perform_reduce_grad after the last backward; earlier
  // torch (2.5-2.8) called _root_post_backward_final_callback after the stage's last backward, the same
  // wait). Megatron reduces bucket by bucket beside the compute (overlap_grad_reduce).
  in.reduce_waits = ctx.torch_stages;
  // torch's multi-stage runtime keeps at most max_active_stages = 3 FSDP stages unsharded per rank
  // (_add_unshard_reshard); single-stage schedules hold their one stage.
  in.max_active_stages = ctx.torch_stages && multi && ctx.traits.gathers_params ? 3 : 0;
  return in;
}

}  // namespace

void simulate_pipeline_step(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                            const Plan& p, Result& r, bool detail, bool allocator_replay) {
  const int S = p.stages();
  const std::vector<int> per_stage = stage_blocks(p, model.blocks());
  const std::vector<std::size_t> first = stage_layer_starts(p, model);
  const StageContext ctx = stage_context(model, p, detail, allocator_replay);
  std::vector<StageSim> st;
  st.reserve(at(S));
  std::vector<int> simulated;  // the stages simulated so far, each unlike the others
  for (int s = 0; s < S; ++s) {
    // A stage with an earlier one's layers, block boundaries and role (first, last, or between) simulates
    // as it does (every stage runs the same stage plan): its copy. Detail runs keep each stage's labels.
    const auto twin = std::find_if(simulated.begin(), simulated.end(), [&](int q) {
      const std::size_t n = first[at(s) + 1] - first[at(s)];
      return !detail && per_stage[at(q)] == per_stage[at(s)] && (q == 0) == (s == 0) &&
             (q == S - 1) == (s == S - 1) && first[at(q) + 1] - first[at(q)] == n &&
             model.same_slices(first[at(q)], first[at(s)], n);
    });
    if (twin != simulated.end()) {
      st.push_back(st[at(*twin)]);
      continue;
    }
    st.push_back(
        simulate_stage(model, cluster, costs, p, ctx, s, first[at(s)], first[at(s) + 1], per_stage[at(s)]));
    simulated.push_back(s);
  }

  PipelineInputs pin = pipeline_inputs(cluster, costs, p, ctx, st);
  const PipelineRun run = run_pipeline(pin);

  std::vector<RankStep> ranks(at(p.pp));
  int busiest = 0, slowest = 0;
  for (int rank = 0; rank < p.pp; ++rank) {
    RankStep& o = ranks[at(rank)];
    rank_time(p, st, run, rank, o);
    rank_memory(p, st, run, rank, o);
    if (o.peak_bytes > ranks[at(busiest)].peak_bytes) busiest = rank;
    if (o.step_s > ranks[at(slowest)].step_s) slowest = rank;
  }
  // The Result: memory of the busiest rank, time of the slowest.
  fill_memory(model, cluster, p, st, run, ranks[at(busiest)], busiest, allocator_replay, r);
  fill_time(model, cluster, p, ctx.traits, st, run, ranks[at(slowest)], slowest, r);
  double p2p_s = 0;
  for (double e : pin.edge_p2p_s) p2p_s = std::max(p2p_s, e);
  auto sum = summary(p, st, run, ranks, busiest, p2p_s, ctx.send_bytes);
  sum->slowest_rank = slowest;
  if (detail) {
    auto ex = std::make_shared<std::vector<std::pair<double, double>>>();
    step_spans(p, st, run, ranks, busiest, slowest, *sum, *ex);
    const StageSim& x = st[at(rank_stages(p, busiest)[0])];
    r.detail = x.res.detail;
    r.exposed_intervals = ex;
  }
  r.pipeline = sum;
}

}  // namespace shardplan

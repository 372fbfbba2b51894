// One pipeline-parallel step composed from per-stage simulations (docs/model.md "Pipeline parallelism").
#include "simulator/simulate/pipeline_step.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "simulator/memory/memory.hpp"
#include "simulator/plan/plan.hpp"
#include "simulator/simulate/simulate.hpp"
#include "simulator/simulate/summary.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {
namespace {

std::string str(std::int64_t v) {
  return std::to_string(v);
}

}  // namespace

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
  double ep_block_s = 0,
         cp_block_s = 0;   ///< EP all-to-alls and CP ring waits on the compute stream, likewise
  WorkingSet tail_work;    ///< the optimizer's transients
  double reduce_s = 0;     ///< gradient reduction after the stage's last backward
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
    // Sampled after every effect, as the engine finds a task's high point (simulator/engine/engine.cpp): a
    // task may allocate and free within itself (the loss's backward, a block's op-level backward).
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
  const double bc = p.compute_bytes();
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
    double tp_fwd = 0, tp_bwd = 0, weight_grad = 0, ep_fwd = 0, ep_bwd = 0, cp_fwd = 0, cp_bwd = 0;
    // Selective AC without the plan's SDPA op in its save list recomputes ring attention
    // (lowering_cp_ep.cpp).
    const bool recompute_attention =
        p.ac == AcMode::kFull || (p.ac == AcMode::kSelective && !p.sac_saves_sdpa());
    for (const SimUnit& u : sim.units()) {
      // Full activation checkpointing recomputes the forward's collectives in the backward (as the lowering).
      const double re = p.ac == AcMode::kFull && u.blocks > 0 ? 1.0 : 0.0;
      // Expert parallelism's token all-to-alls recur every micro-batch and block the compute stream (the
      // experts wait for their tokens, the next layer for the combine; Lowering::cp_ep_collectives): the
      // forward's dispatch and combine, the backward's mirrored pair and, under full AC, the recomputed
      // forward's. Context parallelism's ring blocks with the share the attention does not hide.
      ep_fwd += u.a2a_s;
      ep_bwd += (1 + re) * u.a2a_s;
      cp_fwd += u.cp_fwd_exposed_s;
      cp_bwd += u.cp_bwd_exposed_s + (recompute_attention && u.blocks > 0 ? u.cp_fwd_exposed_s : 0.0);
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
    x.ep_block_s = ep_fwd + ep_bwd;
    x.cp_block_s = cp_fwd + cp_bwd;
    x.cost.fwd_s = fwd_compute + tp_fwd + ep_fwd + cp_fwd;
    x.cost.bwd_s = bwd_compute + tp_bwd + ep_bwd + cp_bwd;
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
      // Tensor-parallel collectives, EP all-to-alls and CP rings run every micro-batch; the data-parallel
      // ones once per step.
      const bool per_mb = k == static_cast<int>(CommKind::kTpAllGather) ||
                          k == static_cast<int>(CommKind::kTpReduceScatter) ||
                          k == static_cast<int>(CommKind::kAllToAll) ||
                          k == static_cast<int>(CommKind::kCpRing);
      const double n = per_mb ? m : 1;
      CommStats& o = r.comm[static_cast<std::size_t>(k)];
      o.bytes_per_rank += c[static_cast<std::size_t>(k)].bytes_per_rank * n;
      o.time_s += c[static_cast<std::size_t>(k)].time_s * n;
      // The blocking share of the TP collectives, EP all-to-alls and CP rings is part of every forward and
      // backward on the pipeline's timeline (StageCost::fwd_s, bwd_s): exposed in full.
      const double blocking = k == static_cast<int>(CommKind::kTpAllGather)       ? x.tp_ag_block_s
                              : k == static_cast<int>(CommKind::kTpReduceScatter) ? x.tp_rs_block_s
                              : k == static_cast<int>(CommKind::kAllToAll)        ? x.ep_block_s
                              : k == static_cast<int>(CommKind::kCpRing)          ? x.cp_block_s
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

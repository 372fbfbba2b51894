// One pipeline stage simulated for one micro-batch, and the pipeline's view of it: action costs, memory as
// the pipeline holds it, per-step communication (docs/model.md "Pipeline parallelism").
#include "simulator/simulate/pipeline_stage.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "simulator/simulate/simulate.hpp"

namespace shardplan {

namespace {

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

/// Compute-stream time of the stage simulation's forward and backward, and when its forward ends.
struct StageTimes {
  double fwd_compute = 0, bwd_compute = 0, fwd_end = 0;
};
StageTimes stage_times(const Program& prog, const Timeline& tl) {
  StageTimes t;
  for (std::size_t i = 0; i < prog.tasks.size(); ++i) {
    const Task& k = prog.tasks[i];
    if (k.type != TaskType::kCompute || k.lane != kLaneCompute) continue;
    if (k.backward) {
      t.bwd_compute += k.duration_s;
    } else {
      t.fwd_compute += k.duration_s;
      t.fwd_end = std::max(t.fwd_end, tl.timing[i].end_s);
    }
  }
  return t;
}

/// Per unit of the stage: tensor-parallel time per action, the weight-gradient share of backward, the
/// unsharded parameters and accumulated gradients FSDP holds under PP, and the saved activations.
void add_unit_costs(const std::vector<SimUnit>& units, const Plan& p, const CostModel& costs,
                    const RuntimeTraits& rt, StageSim& x, double& tp_fwd, double& tp_bwd,
                    double& weight_grad) {
  const double bc = p.compute_bytes();
  const double grad_acc_bytes = p.precision == Precision::kFp32 || p.reduce() == Dtype::kFp32 ? 4.0 : 2.0;
  // Tensor-parallel collectives recur every micro-batch: the blocking share waits on the compute stream
  // (all of it without async TP, the all-gathers with it), as the lowering's tp_collectives charges them.
  const double tp_share = costs.constants().tp_exposed_share(p.async_tp);
  // Selective AC without the plan's SDPA op in its save list recomputes ring attention
  // (lowering_cp_ep.cpp).
  const bool recompute_attention =
      p.ac == AcMode::kFull || (p.ac == AcMode::kSelective && !p.sac_saves_sdpa());
  double ep_fwd = 0, ep_bwd = 0, cp_fwd = 0, cp_bwd = 0;
  for (const SimUnit& u : units) {
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
  x.ep_block_s = ep_fwd + ep_bwd;
  x.cp_block_s = cp_fwd + cp_bwd;
  x.ep_cp_fwd_block_s = ep_fwd + cp_fwd;
  x.ep_cp_bwd_block_s = ep_bwd + cp_bwd;
}

/// The stage's memory as the pipeline holds it: receive buffers, what one micro-batch keeps, the working
/// sets of its actions.
void stage_memory(const Simulator& sim, const ModelGraph& model, const Plan& p, const StageContext& ctx,
                  const RuntimeTraits& rt, int s, StageSim& x) {
  const int S = p.stages(), m = p.grad_accum;
  const double bc = p.compute_bytes();
  const double grad_acc_bytes = p.precision == Precision::kFp32 || p.reduce() == Dtype::kFp32 ? 4.0 : 2.0;
  const auto send = static_cast<Bytes>(ctx.send_bytes);
  // Receive buffers: torch 2.15 _recv_buffers.py _RecvInfo allocates each
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
  // pipe_buffers['outputs']). Megatron's schedules receive into transient buffers and keep each in-flight
  // micro-batch's input and output (schedules.py input_tensors / output_tensors), as DeepSpeed's does.
  const bool first_stage = s == 0, last_stage = s == S - 1;
  Bytes recv = 0, act_adjust = 0, bwd_recv = 0;
  if (ctx.torch_stages) {
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
  const bool no_sync = ctx.torch_stages && rt.reduce_scatter && !rt.grads_persistent;
  x.sharded_grad_bytes = no_sync ? x.res.persistent_split[1] : 0;
  // The model's buffers (the stage's RoPE caches, MoE counters: model_buffer_bytes) are held from before the
  // first action to the end, as the rank's breakdown counts them (pipeline_step.cpp rank_memory).
  x.cost.held_bytes = x.res.persistent_bytes - x.sharded_grad_bytes + recv + model_buffer_bytes(*x.graph, p);
  x.cost.gathered_bytes = x.gathered_bytes;
  x.cost.accum_grad_bytes = x.accum_grad_bytes;
  working_sets(sim.program(), sim.units(), no_sync, no_sync ? grad_acc_bytes / bc : 0.0, bwd_recv,
               x.cost.fwd_work, x.cost.bwd_work, x.cost.bwd_first_work, x.tail_work);
  x.cost.act_bytes = std::max<Bytes>(0, x.cost.act_bytes + act_adjust);
  x.cost.fwd_work.act_bytes = std::max<Bytes>(0, x.cost.fwd_work.act_bytes + act_adjust);
  x.cost.bwd_work.act_bytes = std::max<Bytes>(0, x.cost.bwd_work.act_bytes + act_adjust);
  if (x.cost.bwd_first_work.total() > 0)
    x.cost.bwd_first_work.act_bytes = std::max<Bytes>(0, x.cost.bwd_first_work.act_bytes + act_adjust);
  if (ctx.torch_stages && last_stage && p.loss() == LossImpl::kEager) {
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
}

}  // namespace

StageContext stage_context(const ModelGraph& model, const Plan& p, bool detail, bool allocator_replay) {
  StageContext ctx;
  // The stage's plan: one micro-batch, no pipeline; dp, shard group and replicas as resolved for the mesh.
  ctx.stage_plan = p;
  ctx.stage_plan.pp = 1;
  ctx.stage_plan.grad_accum = 1;
  ctx.stage_plan.virtual_stages = 1;
  ctx.stage_plan.pp_layers.clear();
  ctx.traits = runtime_traits(ctx.stage_plan);
  ctx.send_bytes = pipeline_send_bytes(p, model.spec().hidden);
  ctx.torch_stages = ctx.traits.torch_pipeline_stages;
  ctx.detail = detail;
  ctx.allocator_replay = allocator_replay;
  return ctx;
}

StageSim simulate_stage(const ModelGraph& model, const Cluster& cluster, const CostModel& costs,
                        const Plan& p, const StageContext& ctx, int s, std::size_t first, std::size_t last,
                        int blocks) {
  StageSim x;
  x.graph = std::make_shared<const ModelGraph>(model.slice(first, last));
  x.blocks = blocks;
  x.embedding = s == 0;
  x.head = s == p.stages() - 1;
  const RuntimeTraits& rt = ctx.traits;
  Simulator sim(*x.graph, cluster, costs);
  sim.set_allocator_replay(ctx.allocator_replay);
  x.res = sim.run(ctx.stage_plan, ctx.detail);
  const StageTimes t = stage_times(sim.program(), sim.timeline());
  double tp_fwd = 0, tp_bwd = 0, weight_grad = 0;
  add_unit_costs(sim.units(), p, costs, rt, x, tp_fwd, tp_bwd, weight_grad);
  if (x.head) {
    // The last stage computes the loss right after each forward and keeps its saved log-softmax until that
    // micro-batch's backward (schedules.py _maybe_compute_loss), as Lowering::loss_forward_effects.
    // The saved vocabulary-sized tensors only (the per-token statistics are left out).
    const LossKernel k = loss_kernel(p, rt);
    const LossOps o = loss_ops(k);
    const LossDims dims = loss_dims(p, model.spec(), static_cast<double>(p.mbs) * static_cast<double>(p.seq));
    double saved = 0;
    for (const Layer* l : model.order())
      for (const LossTensor* lt : loss_tensors_of(l->loss_tensors, k))
        if (lt->vocab && loss_saved(*lt, o)) saved += loss_tensor_bytes(*lt, dims);
    x.cost.act_bytes += static_cast<Bytes>(saved);
  }
  // Work only the step's first micro-batch does (Transformer Engine's fp8 weight casts, cached for the later
  // micro-batches of each model chunk: Megatron's is_first_microbatch_for_model_chunk): the stage's first
  // forward only.
  double first_mb = 0;
  for (const SimUnit& u : sim.units()) first_mb += u.fwd_first_mb_s;
  x.fwd_compute_s = t.fwd_compute - first_mb;
  x.bwd_compute_s = t.bwd_compute;
  x.tp_fwd_block_s = tp_fwd;
  x.tp_bwd_block_s = tp_bwd;
  x.cost.fwd_s = x.fwd_compute_s + tp_fwd + x.ep_cp_fwd_block_s;
  x.cost.bwd_s = t.bwd_compute + tp_bwd + x.ep_cp_bwd_block_s;
  x.cost.bwd_weight_s = std::min(weight_grad, x.cost.bwd_s);
  x.cost.bwd_input_s = x.cost.bwd_s - x.cost.bwd_weight_s;
  // The first forward of the step waits on the parameter all-gathers (reshard_after_forward=False: later
  // micro-batches reuse the unsharded parameters).
  x.cost.first_fwd_s = first_mb;
  x.cost.first_fwd_extra_s = std::max(0.0, t.fwd_end - x.cost.fwd_s - first_mb);
  const auto& c = x.res.comm;
  if (rt.gathers_params || rt.param_gather_before_forward)
    x.cost.gather_s = c[static_cast<int>(CommKind::kAllGather)].time_s;
  stage_memory(sim, model, p, ctx, rt, s, x);
  x.reduce_s =
      c[static_cast<int>(CommKind::kReduceScatter)].time_s + c[static_cast<int>(CommKind::kAllReduce)].time_s;
  x.cost.reduce_s = x.reduce_s;
  if (rt.param_all_gather_after_step) x.post_step_s = c[static_cast<int>(CommKind::kAllGather)].time_s;
  return x;
}

}  // namespace shardplan

// Lowering of a plan into tasks with memory effects: the step's order. Tasks are appended in the CPU issue
// order of the runtime: forward unit by unit (all-gathers issued ahead by the prefetch depth), backward in
// reverse (the next unit's all-gather before this unit's reduce-scatter, docs/mechanics.md §3.2), then the
// optimizer step. Which buffers exist, where they live and what waits on what come from RuntimeTraits;
// nothing here branches on the runtime's name.
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan {
namespace detail {

void Lowering::run() {
  Program& prog = out_.program;
  prog.clear();
  prog.labels.clear();
  prog.labels.push_back("task");
  ut_.assign(static_cast<std::size_t>(U_), UnitTensors{});
  fwd_events_.assign(static_cast<std::size_t>(U_), {});
  fwd_pre_.assign(static_cast<std::size_t>(U_), 0);
  fwd_events_done_.assign(static_cast<std::size_t>(U_), 0);
  next_act_group_ = -1;
  groups_.clear();
  plan_activation_offload();  // lowering_offload.cpp
  if (in_.tensors) {          // without: every span is empty and each allocation is one tensor
    build_tensor_lists();
    initial_tensors();
  } else if (p_.hold_logits) {
    // The previous step's held logits are in the initial totals (initial_allocation); the loss frees them by
    // this group, which needs an id even without tensor lists, and its size: the initial activations, as
    // initial_tensors allocates them in one group (no effect here: the engine starts from the totals).
    held_logits_id_ = prog.new_tensor();
    if (in_.initial)
      groups_.allocated(held_logits_id_, (*in_.initial)[static_cast<std::size_t>(MemCategory::kActivations)],
                        kPoolDefault, prog.tensors);
  }
  prog.optimizer_state_lazy = !rt_.optimizer_flat_partitions;
  const std::int32_t held_before = held_logits_id_;
  // The micro-batches lowered: all of them, or (steady_prefix) the first few and the last, which keeps its
  // index so that labels and the peak's phase name it as in the full program.
  const int m = p_.grad_accum;
  const int prefix = in_.steady_prefix > 0 && in_.steady_prefix + 1 < m ? in_.steady_prefix : m - 1;
  MicroBatchBlocks* blocks = out_.blocks;
  if (blocks) blocks->clear();
  for (int i = 0; i <= prefix; ++i) {
    const int mb = i < prefix ? i : m - 1;
    std::array<double, kCommKinds> before{};
    if (blocks) {
      blocks->first_task.push_back(static_cast<std::int32_t>(prog.tasks.size()));
      for (int k = 0; k < kCommKinds; ++k) before[static_cast<std::size_t>(k)] = out_.comm[k].bytes_per_rank;
    }
    forward(mb);
    backward(mb, mb + 1 == m);
    if (blocks) {
      auto& sent = blocks->sent_bytes.emplace_back();
      for (int k = 0; k < kCommKinds; ++k)
        sent[static_cast<std::size_t>(k)] = out_.comm[k].bytes_per_rank - before[static_cast<std::size_t>(k)];
    }
  }
  optimizer_step();
  if (held_before >= 0 && held_logits_id_ != held_before)
    prog.carried.push_back({held_before, held_logits_id_});
}

// The loss: the loss layer's tensors of the plan's loss kernel (simulator/model/loss_tensors.cpp, one list
// per implementation with its sources), op by op.
Bytes Lowering::loss_bytes(const LossTensor& t) const {
  LossDims x = loss_dims(p_, in_.model.spec(), loss_tokens());
  x.compute_bytes = bc_;
  return B(loss_tensor_bytes(t, x));
}

void Lowering::loss_op(int op) {
  constexpr auto A = MemCategory::kActivations;
  if (loss_list_.empty()) {
    const LossKernel k = loss_kernel(p_, rt_);
    for (const Layer* l : in_.model.order())
      if (l->kind == LayerKind::kLoss) loss_list_ = loss_tensors_of(l->loss_tensors, k);
    loss_ids_.assign(loss_list_.size(), -1);
  }
  // The chunked loss's gradients of the output projection are gradients (chunked_loss_tensors.cpp).
  auto cat = [](const LossTensor& t) {
    return t.freed == kLossHeldRs ? MemCategory::kCommBuffers : loss_head_grad(t) ? MemCategory::kGrads : A;
  };
  for (std::size_t i = 0; i < loss_list_.size(); ++i) {
    const LossTensor& t = *loss_list_[i];
    if (t.made != op) continue;
    loss_ids_[i] = alloc_one(cat(t), kPoolDefault, loss_bytes(t));
    if (t.freed == kLossToHead) loss_to_head_id_ = loss_ids_[i];
  }
  loss_handoffs(op);  // the chunked loss's tensors that outlive the call (lowering_chunked_loss.cpp)
  std::int32_t held = -1;
  for (std::size_t i = 0; i < loss_list_.size(); ++i) {
    const LossTensor& t = *loss_list_[i];
    if (t.freed != op || t.made == kLossCarried) continue;
    if (t.held && p_.hold_logits) {
      held = loss_ids_[i];  // the loop's reference keeps it into the next micro-step
    } else {
      free_group(cat(t), loss_ids_[i]);
    }
    loss_ids_[i] = -1;
  }
  if (!p_.hold_logits) return;
  for (const LossTensor* t : loss_list_) {
    if (t->made != kLossCarried || t->freed != op) continue;
    // Rebinding `pred` drops the previous micro-step's model output (the step starts with one held:
    // initial_allocation).
    free_group(A, held_logits_id_);
    for (std::size_t i = 0; i < loss_list_.size(); ++i)
      if (loss_list_[i]->held && held < 0) held = loss_ids_[i];
  }
  if (held >= 0) held_logits_id_ = held;
}

void Lowering::loss_forward_effects(int mb) {
  loss_mb_ = mb;
  const LossOps o = loss_ops(loss_kernel(p_, rt_));
  loss_to_head_id_ = -1;  // the chunked loss makes the head's gradient in its forward
  for (int op = 0; op < o.forward_ops; ++op) loss_op(op);
}

std::int32_t Lowering::loss_backward_effects() {
  // Returns the group of the logits' gradient in the compute dtype that the head's backward reads (its
  // caller frees it, logits_elems() x the compute dtype's bytes).
  const LossOps o = loss_ops(loss_kernel(p_, rt_));
  for (int op = o.forward_ops; op < o.ops; ++op) loss_op(op);
  return loss_to_head_id_;
}

// ---- forward ----
void Lowering::forward(int mb) {
  limiter_queue_.clear();
  act_groups_ = 0;
  prev_fwd_ag_out_ = -1;
  // Megatron's distributed optimizer (overlap_param_gather): the previous step's updated bf16 parameters are
  // all-gathered bucket by bucket, in forward order, and each unit's first forward waits for its bucket.
  std::vector<std::int32_t> param_ag(static_cast<std::size_t>(U_), -1);
  if (rt_.param_gather_before_forward && mb == 0) {
    const std::vector<int> bucket = grad_buffer_bucket_of_unit();
    std::vector<double> bucket_elems;
    for (int u = 0; u < U_; ++u) {
      const auto b = static_cast<std::size_t>(bucket[static_cast<std::size_t>(u)]);
      if (bucket_elems.size() <= b) bucket_elems.resize(b + 1, 0.0);
      bucket_elems[b] += static_cast<double>(unit(u).elems);
    }
    std::vector<std::int32_t> ag(bucket_elems.size(), -1);
    for (std::size_t b = bucket_elems.size(); b-- > 0;) {  // the last bucket holds the first units
      const double bytes = bucket_elems[b] * bc_;
      ag[b] = add_collective(
          CollectiveKind::kAllGather, CommKind::kAllGather, kLaneShard, bytes, dp_g_, -1,
          busbw_factor(CollectiveKind::kAllGather, p_.dp_cp()) * bytes,
          [&] { return "param all_gather bucket " + std::to_string(b); }, -1, mb);
    }
    for (int u = 0; u < U_; ++u)
      param_ag[static_cast<std::size_t>(u)] =
          ag[static_cast<std::size_t>(bucket[static_cast<std::size_t>(u)])];
  }
  for (int u = 0; u < U_; ++u) {
    const SimUnit& un = unit(u);
    if (rt_.gathers_params) {
      const int ahead = std::max(p_.prefetch, 1);
      for (int j = u; j < std::min(U_, u + ahead); ++j) {
        if (gathered_[static_cast<std::size_t>(j)] || unit(j).gathered_elems == 0) continue;
        // Without prefetch the gather of unit j waits for the previous unit's compute.
        const std::int32_t after = p_.prefetch == 0 && j > 0 ? fwd_task_[static_cast<std::size_t>(j - 1)]
                                   : rt_.ag_after_prev_copy_out && j > 0
                                       ? copyout_task_[static_cast<std::size_t>(j - 1)]
                                       : -1;
        issue_ag(j, mb, false, after);
      }
    }
    std::int32_t ready = -1;
    if (rt_.gathers_params && un.tied_peer >= 0 && un.tied_peer < u) {
      ready = copyout_task_[static_cast<std::size_t>(u)];  // gathered with the embedding (below)
    } else if (rt_.gathers_params) {
      ready = copy_out(u, mb, false);
    }
    if (un.tied_peer > u && gathered_[static_cast<std::size_t>(u)]) {
      // FSDP2 tied embeddings: the group gathered for the embedding's forward is the head's too, kept until
      // the head's post-backward frees it (the embedding's backward gathers the group again).
      const auto e = static_cast<std::size_t>(u), h = static_cast<std::size_t>(un.tied_peer);
      gathered_[h] = 1;
      gathered_[e] = 0;
      unsharded_id_[h] = unsharded_id_[e];
      unsharded_id_[e] = -1;
      ag_task_[h] = ag_task_[e];
      copyout_task_[h] = copyout_task_[e];
    }
    if (un.gather_owner >= 0) {
      const auto o = static_cast<std::size_t>(un.gather_owner);
      ready = copyout_task_[o] >= 0 ? copyout_task_[o] : ag_task_[o];
    }
    const std::int32_t tp =
        cp_ep_collectives(u, mb, false, tp_collectives(u, mb, false, tp_pass(un, false, false)));
    Task t;
    t.type = TaskType::kCompute;
    t.lane = kLaneCompute;
    t.duration_s = un.fwd_s + (mb == 0 ? un.fwd_first_mb_s : 0.0);
    t.cpu_s = K_.unit_hook_cpu_s +
              K_.kernel_launch_s * fw::kForwardLaunchesPerLayer * static_cast<double>(un.layers.size());
    t.deps = {ready, tp, param_ag[static_cast<std::size_t>(u)]};
    t.label = label([&] { return "fwd " + un.name + mb_suffix(mb); });
    t.unit = u;
    t.micro_batch = mb;
    const std::int32_t id = out_.program.add(t);
    last_compute_ = id;
    // DDP with fp32 parameters under autocast: bf16 weight copies, held by the autocast cache (cached_cast
    // caches casts of fp32 leaves that require grad, with or without grad mode) until the forward's autocast
    // region exits (torch.autocast.__exit__ -> torch.clear_autocast_cache at the outermost level), after the
    // loss; only the copies autograd saved survive to the unit's backward (below).
    const UnitTensors& ut = ut_[static_cast<std::size_t>(u)];
    if (rt_.autocast_weight_copies && un.autocast_copy_elems > 0)
      autocast_id_[static_cast<std::size_t>(u)] =
          alloc_tensors(MemCategory::kGathered, kPoolDefault,
                        B(static_cast<double>(un.autocast_copy_elems) * 2), ut.params_local);
    act_id_[static_cast<std::size_t>(u)] = forward_activations(u);
    if (un.has_loss) {
      // The root's post-forward runs when the model's forward returns, before the training loop's loss: it
      // drops the last held all-gather output (torch 2.15 _fsdp_state.py _post_forward of the iteration's
      // forward root: release_all_gather_state_for_comm_reuse).
      if (rt_.hold_forward_ag_output) release_held_ag_output(prev_fwd_ag_out_);
      loss_forward_effects(mb);
      chunked_loss_after_call(u, mb);  // its reduce-scatter and lm_head.reshard() (lowering_chunked_loss.cpp)
      // The autocast region exits after the loss: a block under full AC saved only its input
      // (torch/utils/checkpoint.py), so its copies die with the cache and its recomputation casts again.
      if (rt_.autocast_weight_copies)
        for (int j = 0; j < U_; ++j) {
          const SimUnit& uj = unit(j);
          if (uj.autocast_copy_elems <= 0 || !autocast_copies_recomputed(uj)) continue;
          free_group(MemCategory::kGathered, autocast_id_[static_cast<std::size_t>(j)]);
          autocast_id_[static_cast<std::size_t>(j)] = -1;
        }
    }
    fwd_task_[static_cast<std::size_t>(u)] = id;
    offload_forward(u, mb);  // --activation-offload (lowering_offload.cpp)
    if (rt_.gather_limiter == GatherLimiter::kComputeTwoBack && rt_.gathers_params)
      limiter_queue_.push_back(id);
    if (rt_.gathers_params && un.reshard) free_unsharded(u);
  }
  if (rt_.hold_forward_ag_output) release_held_ag_output(prev_fwd_ag_out_);  // root post-forward
}

// ---- optimizer step ----
void Lowering::optimizer_step() {
  const double local_params = static_cast<double>(state_elems(in_.model, p_).optimizer);
  const std::int32_t scaler = p_.fp16() ? loss_scaler() : -1;  // lowering_loss_scaler.cpp
  Task o;
  o.type = TaskType::kOptimizer;
  o.cpu_s = optimizer_cpu_s();
  o.deps = {last_shard_comm_, last_rep_comm_, offload_.grads ? last_pcie_ : -1};
  if (offload_.optimizer) {
    // The optimizer runs on the host CPUs, which the GPUs of a host share (DeepSpeed CPUAdam; FSDP's
    // optimizer on CPU tensors is torch's AdamW, several times slower per byte: ComputeConstants).
    const auto& node = in_.cluster.spec().node;
    const double host_Bps = (node.host_memory_Bps > 0 ? node.host_memory_Bps : fw::kDefaultHostMemoryBps) /
                            std::max(1, node.host_gpus) * K_.host_optimizer_efficiency /
                            (rt_.native_cpu_adam ? 1.0 : K_.torch_cpu_adam_slowdown);
    o.lane = kLaneHost;
    o.duration_s = local_params * kHostAdamBytesPerParam / host_Bps;
  } else {
    o.lane = kLaneCompute;
    o.duration_s = optimizer_device_s();  // lowering_optimizer.cpp
  }
  o.label = label([] { return std::string("optimizer step"); });
  std::int32_t oid = out_.program.add(o);
  free_group(MemCategory::kOptimizer, scaler);
  out_.optimizer_s = o.duration_s;
  if (p_.optimizer == Optimizer::kMuon) oid = muon_orthogonalise(oid);
  // DeepSpeed offload: the updated 16-bit parameters of this rank's partition go back host -> device (FSDP's
  // offloaded parameters stay on the host until the next all-gather copies them in).
  if (offload_.optimizer && !offload_.params && rt_.native_cpu_adam)
    oid = pcie_copy(local_params * bc_, oid, -1, -1, false, "h2d updated params");
  if (!p_.fused_optimizer && (p_.optimizer == Optimizer::kAdamW || p_.optimizer == Optimizer::kAdam)) {
    // foreach AdamW: a parameter-sized sqrt temporary in the state dtype
    // torch/optim/adamw.py _multi_tensor_adamw: torch._foreach_sqrt(exp_avg_sqs) returns one tensor per
    // parameter of the group (the optimizer's parameters: this rank's shards).
    const Bytes tmp = B(local_params * 4);
    const std::int32_t g = alloc_tensors(MemCategory::kOptimizer, kPoolDefault, tmp, optimizer_params_);
    free_group(MemCategory::kOptimizer, g);
  }
  if (p_.optimizer == Optimizer::kAdafactor && !offload_.optimizer) {
    // torch 2.15's foreach Adafactor (the default on CUDA): var_estimates, one tensor like each parameter
    // (row_var @ col_var, or variance.clone()), all alive until the update (torch/optim/_adafactor.py
    // _multi_tensor_adafactor), in the state's dtype.
    const Bytes tmp = B(local_params * moment_bytes(rt_, p_));
    const std::int32_t g = alloc_tensors(MemCategory::kOptimizer, kPoolDefault, tmp, optimizer_params_);
    free_group(MemCategory::kOptimizer, g);
  }
  if (rt_.param_all_gather_after_step) {
    // DeepSpeed ZeRO-1/2: all-gather the updated 16-bit parameters after the step.
    const double bytes = static_cast<double>(in_.model.parameters()) / p_.tp * 2;
    add_collective(
        CollectiveKind::kAllGather, CommKind::kAllGather, kLaneShard, bytes, dp_g_, oid,
        busbw_factor(CollectiveKind::kAllGather, p_.dp_cp()) * bytes,
        [] { return std::string("param all_gather after step"); }, -1, -1);
  }
  if (grads_allocated_ > 0) {
    Task z;
    z.type = TaskType::kMarker;
    z.lane = kLaneCompute;
    z.label = label([] { return std::string("zero_grad"); });
    out_.program.add(z);
    for (const std::int32_t g : grad_groups_) free_group(MemCategory::kGrads, g);
    grad_groups_.clear();
  }
}

}  // namespace detail

void lower(const LoweringInputs& in, LoweringOutput& out) {
  // The group-size table is reused by the thread's next lowering, as the Simulator reuses its Program: no
  // allocation per plan once warm.
  thread_local detail::TensorGroups groups;
  detail::Lowering(in, out, groups).run();
}

}  // namespace shardplan

// Lowering, backward (docs/mechanics.md §3.2): the units in reverse, each in stages — its parameters
// gathered (and the next units prefetched), its compute task with the TP / CP / EP collectives, its memory
// (recomputation, the loss's backward, the workspace, the unsharded gradients), and its post-backward
// reduction — then the step's last bucket and held buffers.
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

void Lowering::backward(int mb, bool last_mb) {
  limiter_queue_.clear();
  BackwardStep st;
  st.mb = mb;
  st.sync = !rt_.reduce_only_at_boundary || last_mb;
  const Bytes ipg_bucket =
      B(std::min(fw::kDeepSpeedReduceBucketElems, static_cast<double>(in_.model.parameters()) / p_.tp) * 2);
  // IPG bucket allocated at the start of every backward (contiguous_gradients; DeepSpeed ZeRO-1/2).
  const std::int32_t ipg_id =
      rt_.ipg_bucket_per_backward ? alloc_one(MemCategory::kCommBuffers, kPoolDefault, ipg_bucket) : -1;
  st.grad_bytes_per_elem = bytes_per_param(rt_, p_.precision).grads;
  // Megatron's grad buffer: a bucket's reduction is issued once the backward has written its last gradient
  // (in place on the buffer, over the data-parallel x context-parallel ranks, in the reduce dtype).
  if (rt_.grad_buffer_buckets) st.bucket_of = grad_buffer_bucket_of_unit();
  for (int u = U_ - 1; u >= 0; --u) {
    UnitBackward ub;
    ub.u = u;
    const std::int32_t ready = backward_gather(ub, st);
    offload_backward(u, mb);  // --activation-offload: the saved tensors copied back (lowering_offload.cpp)
    ub.task = backward_compute(u, mb, ready);
    backward_memory(ub, st, ready);
    post_backward(ub, st);
  }
  if (st.bucket_acc > 0) reduce_bucket(st, last_compute_, st.bucket_of.empty() ? 0 : st.bucket_of[0]);
  if (held_rs_id_ >= 0) {
    free_group(MemCategory::kCommBuffers, held_rs_id_);
    held_rs_id_ = -1;
  }
  free_group(MemCategory::kCommBuffers, ipg_id);
}

void Lowering::reduce_bucket(BackwardStep& st, std::int32_t after, int b) {
  const int mb = st.mb;
  const double bytes = st.bucket_acc * br_;
  const CollectiveKind kind =
      rt_.grad_buffer_reduce_scatter ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
  last_shard_comm_ = add_collective(
      kind, rt_.grad_buffer_reduce_scatter ? CommKind::kReduceScatter : CommKind::kAllReduce, kLaneShard,
      bytes, dp_g_, after, busbw_factor(kind, p_.dp_cp()) * bytes,
      [&] {
        return std::string(rt_.grad_buffer_reduce_scatter ? "reduce_scatter" : "all_reduce") +
               " grad bucket " + std::to_string(b) + mb_suffix(mb);
      },
      -1, mb);
  st.bucket_acc = 0;
}

void Lowering::backward_prefetch(int u, int mb, std::int32_t after) {
  // A block of an FSDP2 group of several blocks targets the group itself (its post-forward order lists the
  // group once per module): it prefetches nothing; the group's first block prefetches the previous group.
  const SimUnit& un = unit(u);
  for (int j = u - 1; j >= std::max(0, u - p_.prefetch); --j) {
    if (un.group_first >= 0 && unit(j).group_first == un.group_first) break;
    if (!gathered_[static_cast<std::size_t>(j)] && unit(j).gathered_elems > 0) issue_ag(j, mb, true, after);
  }
}

std::int32_t Lowering::backward_gather(UnitBackward& ub, const BackwardStep& st) {
  const int u = ub.u, mb = st.mb;
  const SimUnit& un = unit(u);
  std::int32_t ready = -1;
  // The grouped head's first pre-backward prefetches nothing (its post-forward order lists the group once
  // per module, so the target is the group itself); the next units are prefetched when it is re-gathered.
  // (Not under the chunked loss: the head unit's backward runs only the norm's, one pre-backward.)
  ub.regather = rt_.head_group_regathered && rt_.gathers_params && un.has_loss && un.gathered_elems > 0 &&
                un.loss_reduced_elems == 0;
  if (rt_.gathers_params) {
    if (!gathered_[static_cast<std::size_t>(u)] && un.gathered_elems > 0) issue_ag(u, mb, true, -1);
    if (un.gathered_elems > 0 && (ag_out_held_[static_cast<std::size_t>(u)] || !rt_.copy_out))
      ready = copy_out(u, mb, true);
    else
      ready = copyout_task_[static_cast<std::size_t>(u)];
    if (un.gather_owner >= 0) ready = -1;
    if (!ub.regather && !(rt_.bwd_prefetch_after_loss && un.has_loss)) backward_prefetch(u, mb, ready);
  }
  return ready;
}

std::int32_t Lowering::backward_compute(int u, int mb, std::int32_t ready) {
  const SimUnit& un = unit(u);
  // Full AC re-runs the forward's collectives when it recomputes a block.
  const std::int32_t tp = cp_ep_collectives(
      u, mb, true, tp_collectives(u, mb, true, tp_pass(un, true, p_.ac == AcMode::kFull && un.blocks > 0)));
  Task t;
  t.type = TaskType::kCompute;
  t.lane = kLaneCompute;
  t.duration_s = un.bwd_s + un.recompute_s;
  t.backward = true;
  t.cpu_s = K_.unit_hook_cpu_s +
            K_.kernel_launch_s * fw::kBackwardLaunchesPerLayer * static_cast<double>(un.layers.size());
  t.deps = {ready, tp, -1};
  t.label = label([&] { return "bwd " + un.name + mb_suffix(mb); });
  t.unit = u;
  t.micro_batch = mb;
  const std::int32_t id = out_.program.add(t);
  last_compute_ = id;
  return id;
}

void Lowering::backward_memory(UnitBackward& ub, BackwardStep& st, std::int32_t ready) {
  const int u = ub.u, mb = st.mb;
  const SimUnit& un = unit(u);
  const double grad_bytes_per_elem = st.grad_bytes_per_elem;
  // TP: torch 2.15's DTensor has no vocab-sharded (Shard(0)) strategy for aten.embedding_dense_backward
  // (torch/distributed/tensor/_ops/_embedding_ops.py: Shard(1), batch-dim Partial, Partial), so the
  // row-wise-parallel embedding writes a Partial gradient of the whole V x h on every TP rank, held as
  // the unit's unsharded gradient until its reduction (reference lane, Llama 3 70B TP 8).
  double emb_full_elems = 0;
  if (p_.tp > 1 && !rt_.grads_persistent && !rt_.grad_kept_until_boundary && rt_.reduce_scatter &&
      un.gather_owner < 0)
    for (const Layer* l : un.layers)
      if (l->kind == LayerKind::kEmbedding)
        for (const auto& ten : l->tensors)
          emb_full_elems += static_cast<double>(ten.numel() - tp_local_elems(ten, p_.tp));
  // (its own tensor group, freed right after the unit's reduce-scatter has freed the other gradients)
  ub.emb_extra = B(emb_full_elems * bc_);
  // FSDP2 tied embeddings (SimUnit::tied_grad_elems; the reference lane's trace of MPT 7B): the head's
  // backward writes the tied weight's first gradient (lm_head's dW), which waits in autograd's input
  // buffer, not as a .grad, until the embedding's backward writes the second; InputBuffer::add sums them
  // into a third tensor, which becomes the .grad the embedding's post-backward reduces. (Out of place with
  // plain tensors too: a tied nn.Embedding / nn.Linear pair's backward on real CPU tensors runs aten::add,
  // not add_, under torch.profiler in torch 2.15; docs/reference-lane.md.)
  const bool tied_head = un.tied_grad_elems > 0 && un.tied_peer >= 0 && un.tied_peer < u;
  const bool tied_emb = un.tied_grad_elems > 0 && un.tied_peer > u;
  const Bytes tied_b = B(static_cast<double>(un.tied_grad_elems) * bc_);
  // autograd's unsharded gradients (.grad); the tied head's without the tied weight's
  // (nor the output projection's under the chunked loss, reduced inside the loss call: SimUnit::
  // loss_reduced_elems)
  ub.ugrad = B(static_cast<double>(un.elems - un.frozen_elems - un.loss_reduced_elems -
                                   (tied_head ? unit(un.tied_peer).elems : 0)) *
               bc_);
  const auto su = static_cast<std::size_t>(u);
  const UnitTensors& ut = ut_[su];
  recompute_id_ = alloc_tensors(MemCategory::kActivations, kPoolDefault, un.recompute_bytes, ut.recompute);
  // Full AC: the recomputation runs under the checkpoint's saved autocast state and casts the weights
  // again.
  if (rt_.autocast_weight_copies && un.autocast_copy_elems > 0 && autocast_copies_recomputed(un))
    autocast_id_[su] = alloc_tensors(MemCategory::kGathered, kPoolDefault,
                                     B(static_cast<double>(un.autocast_copy_elems) * 2), ut.params_local);
  // The loss's backward runs before the head's own ops (their input gradients come after it).
  ub.loss_grad = un.has_loss ? loss_backward_effects() : -1;
  offload_unpack_weights(u);  // save_on_cpu: the weights come back as the unit's own ops run
  // FSDP1's root pre-backward hook (on the logits) prefetches only now, after the loss's backward.
  if (rt_.gathers_params && !ub.regather && rt_.bwd_prefetch_after_loss && un.has_loss)
    backward_prefetch(u, mb, ready);
  workspace_id_ = alloc_workspace(un, ut);
  // A block unit's workspace is its op-level peak over the saved tensors (units.cpp): the saved tensors are
  // consumed before the last gradients are written, so the gradients are allocated after they are freed.
  const bool op_level = un.blocks > 0;
  if (op_level) {
    free_group(MemCategory::kOther, workspace_id_);
    free_group(MemCategory::kActivations, act_id_[su]);
    free_group(MemCategory::kActivations, recompute_id_);
    act_id_[su] = recompute_id_ = workspace_id_ = -1;
    offload_release(u);
    if (rt_.autocast_weight_copies && un.autocast_copy_elems > 0 && autocast_copies_recomputed(un)) {
      // The recomputed copies are saved tensors of the block's matmuls: consumed with them.
      free_group(MemCategory::kGathered, autocast_id_[su]);
      autocast_id_[su] = -1;
    }
  }
  if (!rt_.grads_persistent) {
    if (!rt_.grad_kept_until_boundary) {
      if (tied_head) tied_grad_id_ = alloc_one(MemCategory::kActivations, kPoolDefault, tied_b);
      // The embedding's own gradient of the tied weight (embedding_dense_backward), then the sum (the
      // unit's .grad, in ugrad), then both addends are freed.
      const std::int32_t tied_second =
          tied_emb ? alloc_one(MemCategory::kActivations, kPoolDefault, tied_b) : -1;
      ugrad_id_[su] = alloc_tensors(MemCategory::kGrads, kPoolDefault, ub.ugrad, ut.params_local);
      if (tied_emb) {
        free_group(MemCategory::kActivations, tied_grad_id_);
        free_group(MemCategory::kActivations, tied_second);
        tied_grad_id_ = -1;
      }
      ub.emb_extra_id = alloc_one(MemCategory::kGrads, kPoolDefault, ub.emb_extra);
    } else if (mb == 0) {
      // DDP, DeepSpeed ZeRO-1: the full .grad, in the gradient dtype (DDP: the parameter's, fp32 under
      // autocast), created by the unit's first backward and kept until zero_grad after the step.
      double tied_b = 0;  // DDP with tied embeddings: the tied weight's .grad moves to the head (below)
      if (p_.zero == 0 && p_.pp == 1 && in_.model.spec().tied_embeddings) {
        const auto& sp = in_.model.spec();
        const double vh =
            static_cast<double>(sp.vocab) * static_cast<double>(sp.hidden) / p_.tp * grad_bytes_per_elem;
        const bool embedding = std::any_of(un.layers.begin(), un.layers.end(),
                                           [](const Layer* l) { return l->kind == LayerKind::kEmbedding; });
        if (un.has_loss) {
          tied_b = vh;  // the head's backward runs first: its V x h gradient of the tied weight stays
        } else if (embedding) {
          // The embedding's backward writes a second V x h gradient and the two are summed into a third
          // tensor, all three live at once (the reference lane's trace of MPT 7B DDP,
          // docs/reference-lane.md); then the two addends are freed and the sum is the weight's .grad.
          const Bytes two = B(2 * vh);
          const std::int32_t tr = alloc_one(MemCategory::kGrads, kPoolDefault, two);
          free_group(MemCategory::kGrads, tr);
          tied_b = -vh;
        }
      }
      // LoRA's frozen parameters get no .grad (SimUnit::frozen_elems).
      const Bytes kept = B(static_cast<double>(un.elems - un.frozen_elems) * grad_bytes_per_elem + tied_b);
      ugrad_id_[su] = alloc_tensors(MemCategory::kGrads, kPoolDefault, kept, ut.params_local);
      grad_groups_.push_back(ugrad_id_[su]);
      grads_allocated_ += kept;
    }
  }
  // The head's matmul backward reads the logits' gradient while it writes its weight gradient.
  if (ub.loss_grad >= 0) free_group(MemCategory::kActivations, ub.loss_grad);
  free_group(MemCategory::kActivations, act_id_[su]);
  free_group(MemCategory::kActivations, recompute_id_);
  free_group(MemCategory::kOther, workspace_id_);
  act_id_[su] = recompute_id_ = workspace_id_ = -1;
  offload_release(u);
  if (rt_.autocast_weight_copies && un.autocast_copy_elems > 0)
    free_group(MemCategory::kGathered, autocast_id_[su]);
  if (rt_.gather_limiter == GatherLimiter::kComputeTwoBack && rt_.gathers_params)
    limiter_queue_.push_back(ub.task);
}

void Lowering::post_backward(UnitBackward& ub, BackwardStep& st) {
  const int u = ub.u, mb = st.mb;
  const SimUnit& un = unit(u);
  const auto su = static_cast<std::size_t>(u);
  const UnitTensors& ut = ut_[su];
  // FSDP2 with TP: the post-backward reads each gradient through FSDPParam._get_grad_inner_tensor (torch
  // 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_param.py), which redistributes a gradient whose
  // placement differs from the parameter's to it: the embedding's Partial full-vocabulary gradient becomes
  // a new vocab-sharded (Shard(0)) local tensor, the TP reduce-scatter's output, before the group reshards;
  // the Partial gradient stays alive until the FSDP reduce-scatter is issued (reference lane, Llama 3 70B
  // TP 8: the 250.5 MiB `clone` beside the 2,004 MiB gradient at the embedding's post-backward). The unit's
  // reduce-scatter then reads (and frees) the redistributed tensor; the Partial one is freed after it.
  std::int32_t partial_local_id = -1;
  if (ub.emb_extra > 0 && rt_.redistributes_partial_grads) {
    partial_local_id = ugrad_id_[su];
    ugrad_id_[su] = alloc_tensors(MemCategory::kGrads, kPoolDefault, ub.ugrad, ut.params_local);
  }
  // Post-backward: reshard (whether or not resharded in forward), then reduce gradients.
  if (rt_.gathers_params && un.gather_owner < 0) free_unsharded(u);
  if (un.elems == 0 && un.gather_owner < 0) return;
  if (rt_.reduce_scatter) {
    if (un.gather_owner >= 0) return;  // FSDP1 root head part: reduced with the root at the end
    reduce_scatter(u, mb, st.grad_bytes_per_elem);
    free_group(MemCategory::kGrads, partial_local_id);
    free_group(MemCategory::kGrads, ub.emb_extra_id);
    if (ub.regather) {
      // The norm's backward needs the group again: all-gather and copy-out, prefetch the next unit, then
      // the second post-backward reshards and releases the first reduce-scatter's input (the norm's own
      // gradient, reduced next, is a few KiB).
      issue_ag(u, mb, true, -1);
      backward_prefetch(u, mb, copy_out(u, mb, true));
      free_unsharded(u);
      if (held_rs_id_ >= 0) {
        free_group(MemCategory::kCommBuffers, held_rs_id_);
        held_rs_id_ = -1;
      }
    }
  } else if (st.sync && rt_.grad_buffer_buckets) {
    st.bucket_acc += static_cast<double>(un.elems);
    const int b = st.bucket_of[su];
    if (u == 0 || st.bucket_of[su - 1] != b) reduce_bucket(st, ub.task, b);
  } else if (st.sync) {
    // All-reduce of the unit's gradients (DDP buckets; DeepSpeed ZeRO-1/2 bucket all-reduce).
    const double bytes = static_cast<double>(un.elems) * (rt_.allreduce_in_compute_dtype ? bc_ : br_);
    last_shard_comm_ = add_collective(
        CollectiveKind::kAllReduce, CommKind::kAllReduce, kLaneShard, bytes, dp_g_, ub.task,
        busbw_factor(CollectiveKind::kAllReduce, p_.dp_cp()) * bytes,
        [&] { return "all_reduce " + un.name + mb_suffix(mb); }, u, mb);
    // DeepSpeed ZeRO-1 offload: this rank's partition of the reduced bucket goes to the host.
    if (offload_.grads)
      pcie_copy(static_cast<double>(un.elems) / p_.dp_cp() * host_grad_bytes_, last_shard_comm_, u, mb, true,
                "d2h grads");
  }
}

std::vector<int> Lowering::grad_buffer_bucket_of_unit() const {
  std::vector<std::int64_t> elems;
  for (int u = U_ - 1; u >= 0; --u) elems.push_back(unit(u).elems);
  const std::vector<int> rev = grad_buffer_bucket_index(elems, rt_.grad_bucket_elems);
  std::vector<int> out(static_cast<std::size_t>(U_));
  for (int u = 0; u < U_; ++u) out[static_cast<std::size_t>(u)] = rev[static_cast<std::size_t>(U_ - 1 - u)];
  return out;
}

}  // namespace shardplan::detail

// Lowering, the communication of one unit: parameter all-gathers (with their copy-out and reshard), gradient
// reduce-scatters (and the HSDP all-reduce), tensor-parallel collectives and CPU-offload copies, each a task
// on its lane with the memory it takes and frees (docs/mechanics.md §1.4-§1.6, §1.11, §3.1-§3.5).
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

// ---- parameters: all-gather, copy-out, reshard ----
/// A host<->device copy of CPU offload on the PCIe lane, after `dep`.
std::int32_t Lowering::pcie_copy(double bytes, std::int32_t dep, int u, int mb, bool backward,
                                 const char* what) {
  Task t;
  t.type = TaskType::kCopy;
  t.lane = kLanePcie;
  t.duration_s = bytes / pcie_Bps_;
  t.cpu_s = K_.kernel_launch_s;
  t.deps[0] = dep;
  t.backward = backward;
  t.comm_kind = static_cast<std::uint8_t>(CommKind::kOffloadCopy);
  t.unit = u;
  t.micro_batch = mb;
  t.label = label(
      [&] { return std::string(what) + (u >= 0 ? " " + unit(u).name : std::string()) + mb_suffix(mb); });
  out_.comm[static_cast<int>(CommKind::kOffloadCopy)].bytes_per_rank += bytes;
  const std::int32_t id = out_.program.add(t);
  last_pcie_ = id;
  return id;
}

void Lowering::issue_ag(int u, int mb, bool backward, std::int32_t after) {
  const SimUnit& un = unit(u);
  if (un.gathered_elems == 0) return;
  if (offload_.params) {
    // Offloaded parameters: the shard is copied host -> device before its all-gather (FSDP2
    // all_gather_inputs, FSDP1 pre_unshard, DeepSpeed ZeRO-Infinity fetch), into a shard-sized staging
    // tensor.
    const double shard_bytes = ag_shard_elems(u) * host_param_bytes_;
    after = pcie_copy(shard_bytes, after, u, mb, backward, "h2d params");
  }
  Task t;
  t.type = TaskType::kCollective;
  t.lane = kLaneShard;
  const double bytes = ag_out_bytes(u, backward, mb), expert_bytes = ag_expert_bytes(u);
  t.backward = backward;
  // ZeRO++ hpZ: after the step's first forward the gather runs within the hpZ group.
  const bool hpz = hpz_gather(backward, mb);
  // Mixed precision: the fp32 shard is cast to the compute dtype before the gather (read 4, write bc).
  t.duration_s = coll_(CollectiveKind::kAllGather, bytes - expert_bytes, hpz ? hpz_g_ : shard_g_) +
                 (mixed_cast_ ? in_.costs.memory_s(ag_shard_elems(u) * (4 + bc_)) : 0);
  // Expert parallelism: this rank's experts are gathered over the efsdp group (their own FSDP module).
  if (expert_bytes > 0) t.duration_s += coll_(CollectiveKind::kAllGather, expert_bytes, efsdp_g_);
  t.cpu_s = K_.collective_launch_s;
  t.deps[0] = after;
  // The gather limiters: the CPU blocks on the entry two back in the limiter's queue (§3.3, §3.4).
  if (rt_.gather_limiter != GatherLimiter::kNone && limiter_queue_.size() >= 2)
    t.cpu_wait_for = limiter_queue_[limiter_queue_.size() - 2];
  t.comm_kind = static_cast<std::uint8_t>(CommKind::kAllGather);
  t.label = label(
      [&] { return std::string(backward ? "bwd " : "fwd ") + "all_gather " + un.name + mb_suffix(mb); });
  t.unit = u;
  t.micro_batch = mb;
  const std::int32_t id = out_.program.add(t);
  // FSDP2 foreach_all_gather (_fsdp_collectives.py): under the all-gather copy-in stream, the per-parameter
  // casts of the shards (_get_param_all_gather_inputs), then all_gather_copy_in allocates the flat output
  // (one buffer per unit, world x the unit's padded shard) and copies the casts into its local slice; the
  // casts are dropped before the collective. FSDP1 _unshard allocates the padded flat parameter on its
  // unshard stream.
  const Bytes cast_buffer = B(ag_shard_elems(u) * bc_);
  const auto su = static_cast<std::size_t>(u);
  const std::int32_t cast_id =
      rt_.cast_buffer_on_ag_stream
          ? alloc_tensors(MemCategory::kCommBuffers, kPoolAllGather, cast_buffer, ut_[su].params_shard)
          : -1;
  ag_id_[su] = alloc_one(MemCategory::kGathered, kPoolAllGather, B(bytes));
  ag_buf_[su] = bytes;
  free_group(MemCategory::kCommBuffers, cast_id);
  ag_task_[static_cast<std::size_t>(u)] = id;
  gathered_[static_cast<std::size_t>(u)] = 1;
  ag_out_held_[static_cast<std::size_t>(u)] = 1;
  last_shard_comm_ = id;
  // DeepSpeed's queue holds the fetches themselves; FSDP1's the computes (pushed by forward/backward).
  if (rt_.gather_limiter == GatherLimiter::kFetchTwoBack) limiter_queue_.push_back(id);
  out_.comm[static_cast<int>(CommKind::kAllGather)].bytes_per_rank +=
      busbw_factor(CollectiveKind::kAllGather, ag_world(backward, mb)) * (bytes - expert_bytes) +
      busbw_factor(CollectiveKind::kAllGather, p_.efsdp_ranks()) * expert_bytes;
}

void Lowering::release_held_ag_output(int u) {
  if (u < 0 || !ag_out_held_[static_cast<std::size_t>(u)]) return;
  free_group(MemCategory::kGathered, ag_id_[static_cast<std::size_t>(u)]);
  ag_id_[static_cast<std::size_t>(u)] = -1;
  ag_out_held_[static_cast<std::size_t>(u)] = 0;
}

/// Copy-out (FSDP2: split_with_sizes_copy into per-parameter tensors; DeepSpeed: cat of coalesced pieces).
std::int32_t Lowering::copy_out(int u, int mb, bool backward) {
  const SimUnit& un = unit(u);
  if (un.gathered_elems == 0 || !rt_.copy_out) return ag_task_[static_cast<std::size_t>(u)];
  const double bytes = ag_bytes(u);
  Task t;
  t.type = TaskType::kCopy;
  t.lane = kLaneCompute;
  // qwZ: the dequantisation reads the int8 codes and writes the 16-bit parameters.
  const double read_bytes = p_.quantized_weights ? ag_buf_[static_cast<std::size_t>(u)] : bytes;
  t.duration_s = in_.costs.memory_s(read_bytes + bytes);
  t.cpu_s = K_.unit_hook_cpu_s;
  t.deps[0] = ag_task_[static_cast<std::size_t>(u)];
  t.label =
      label([&] { return std::string(backward ? "bwd " : "fwd ") + "copy_out " + un.name + mb_suffix(mb); });
  t.unit = u;
  t.micro_batch = mb;
  const std::int32_t id = out_.program.add(t);
  const bool hold = rt_.hold_forward_ag_output && !backward;
  if (hold) release_held_ag_output(prev_fwd_ag_out_);  // the previous unit's output, kept until now
  // FSDP2 foreach_all_gather_copy_out: split_with_sizes_copy into each parameter's own unsharded tensor
  // (FSDPParam.init_all_gather_outputs: padded to world x the parameter's shard), on the default stream.
  const auto su = static_cast<std::size_t>(u);
  unsharded_id_[su] = alloc_tensors(MemCategory::kGathered, kPoolDefault, B(bytes), ut_[su].params_shard);
  if (hold) {
    prev_fwd_ag_out_ = u;
  } else {  // backward (and DeepSpeed): the flat output is dropped right after copy-out
    free_group(MemCategory::kGathered, ag_id_[su]);
    ag_id_[su] = -1;
    ag_out_held_[su] = 0;
  }
  copyout_task_[static_cast<std::size_t>(u)] = id;
  return id;
}

void Lowering::free_unsharded(int u) {
  if (!gathered_[static_cast<std::size_t>(u)] || unit(u).gathered_elems == 0) return;
  // FSDP2 / DeepSpeed free the copied-out parameters; FSDP1's parameters are views of the flat all-gather
  // output, which is freed itself (_free_storage of _full_param_padded).
  auto& id = rt_.copy_out ? unsharded_id_[static_cast<std::size_t>(u)] : ag_id_[static_cast<std::size_t>(u)];
  free_group(MemCategory::kGathered, id);
  id = -1;
  gathered_[static_cast<std::size_t>(u)] = 0;
}

// ---- tensor parallelism (sequence parallel): the unit's TP collectives on the TP communicator ----
/// Adds the TP collectives of one pass of unit `u` before its compute task and returns the task the compute
/// must wait for (-1 if none). The GEMMs need the all-gathered input, so the blocking share runs while the
/// compute stream waits (exposed); async TP hides the rest behind the GEMMs (a task that runs alongside the
/// compute). `ag_s` / `rs_s` are one pass's all-gather and reduce-scatter time; `n_ag` / `n_rs` how many
/// collectives they are; `ag_bytes` / `rs_bytes` their buffer bytes.
std::int32_t Lowering::unit_collective(std::uint8_t lane, CommKind kind, double s, int n, std::int32_t dep,
                                       double cpu_launch_s, int u, int mb, bool backward, const char* what) {
  const SimUnit& un = unit(u);
  Task t;
  t.type = TaskType::kCollective;
  t.lane = lane;
  t.duration_s = s;
  t.cpu_s = n > 0 ? cpu_launch_s : 0.0;
  t.deps[0] = dep;
  t.backward = backward;
  t.comm_kind = static_cast<std::uint8_t>(kind);
  t.collectives = static_cast<std::uint16_t>(std::min(n, 65535));
  t.unit = u;
  t.micro_batch = mb;
  t.label =
      label([&] { return std::string(backward ? "bwd " : "fwd ") + what + " " + un.name + mb_suffix(mb); });
  return out_.program.add(t);
}

std::int32_t Lowering::tp_collectives(int u, int mb, bool backward, const TpPass& pass) {
  const double ag_s = pass.ag_s, rs_s = pass.rs_s, ag_bytes = pass.ag_bytes, rs_bytes = pass.rs_bytes;
  const int n_ag = pass.n_ag, n_rs = pass.n_rs;
  if (ag_s + rs_s <= 0) return -1;
  const double exposed_share = K_.tp_exposed_share(p_.async_tp);
  auto& ag = out_.comm[static_cast<int>(CommKind::kTpAllGather)];
  auto& rs = out_.comm[static_cast<int>(CommKind::kTpReduceScatter)];
  ag.bytes_per_rank += busbw_factor(CollectiveKind::kAllGather, p_.tp) * ag_bytes;
  rs.bytes_per_rank += busbw_factor(CollectiveKind::kReduceScatter, p_.tp) * rs_bytes;
  std::int32_t last = -1;
  // The TP collectives are launched between the unit's GEMMs: their CPU time is in the compute task's
  // per-layer kernel launches (fw::kForwardLaunchesPerLayer), so cpu_launch_s is 0 here.
  auto add = [&](CommKind kind, double s, int n, std::int32_t dep, const char* what) {
    if (s > 0) last = unit_collective(kLaneTp, kind, s, n, dep, 0.0, u, mb, backward, what);
  };
  // Blocking share: after the previous compute-stream task, before this unit's compute.
  add(CommKind::kTpAllGather, exposed_share * ag_s, n_ag, last_compute_, "tp all_gather");
  add(CommKind::kTpReduceScatter, exposed_share * rs_s, n_rs, last < 0 ? last_compute_ : -1,
      "tp reduce_scatter");
  const std::int32_t gate = last;
  // Async TP: the hidden share runs on the TP communicator alongside the compute (count 0: same collectives).
  if (p_.async_tp) {
    add(CommKind::kTpAllGather, (1 - exposed_share) * ag_s, 0, gate, "tp all_gather (overlapped)");
    add(CommKind::kTpReduceScatter, (1 - exposed_share) * rs_s, 0, gate, "tp reduce_scatter (overlapped)");
  }
  return gate;
}

void Lowering::reduce_scatter(int u, int mb, double grad_bytes_per_elem) {
  const SimUnit& un = unit(u);
  // Dense parameters reduce over the fsdp ranks (dp_shard x cp), this EP rank's experts over the efsdp ranks.
  const int F = p_.fsdp_ranks(), Fe = p_.efsdp_ranks();
  // LoRA's frozen parameters have no gradient to reduce (SimUnit::frozen_shard_elems).
  const std::int64_t expert_rs = std::max<std::int64_t>(
      0, std::max(un.expert_gathered_elems, un.expert_shard_elems * Fe) - un.frozen_expert_shard_elems * Fe);
  // An FSDP2 tied group's unit reduces only its own parameters' gradients (SimUnit::tied_grad_elems).
  const std::int64_t gathered =
      un.reduced_gathered_elems >= 0 ? un.reduced_gathered_elems : un.gathered_elems;
  const std::int64_t shard = un.reduced_shard_elems >= 0 ? un.reduced_shard_elems : un.shard_elems;
  const std::int64_t dense_gathered = gathered - un.expert_gathered_elems;
  const double dense_rs = static_cast<double>(std::max<std::int64_t>(
      0, (un.owns_merged_root ? un.gathered_elems
                              : std::max(dense_gathered, (shard - un.expert_shard_elems) * F)) -
             un.frozen_shard_elems * F));
  const double rs_elems = dense_rs + static_cast<double>(expert_rs);
  const double rs_bytes = rs_elems * br_, expert_rs_bytes = static_cast<double>(expert_rs) * br_;
  // Elements of the reduced gradient shard this rank keeps.
  const double shard_out_elems = dense_rs / F + static_cast<double>(expert_rs) / Fe;
  // RS input copy (FSDP2: default stream; waits the previous RS before dropping its input).
  Task c;
  c.type = TaskType::kCopy;
  c.lane = kLaneCompute;
  c.duration_s = in_.costs.memory_s(rs_elems * (bc_ + br_));
  c.backward = true;
  c.cpu_s = K_.unit_hook_cpu_s;
  c.deps[0] = rt_.rs_waits_prev_rs ? prev_rs_ : -1;
  c.cpu_wait_for = rt_.rs_cpu_limiter ? prev_prev_rs_ : -1;  // at most two reduce events pending
  c.label = label([&] { return "bwd rs_copy_in " + un.name + mb_suffix(mb); });
  c.unit = u;
  c.micro_batch = mb;
  const std::int32_t cid = out_.program.add(c);
  if (held_rs_id_ >= 0) {
    free_group(MemCategory::kCommBuffers, held_rs_id_);
    held_rs_id_ = -1;
  }
  // FSDP2 foreach_reduce: the flat reduce-scatter input is allocated on the current (default) stream and the
  // unsharded gradients copied into it (foreach_reduce_scatter_copy_in); FSDP1 _reduce_grad works on its
  // post-backward stream.
  const std::int32_t rs_in = alloc_one(MemCategory::kCommBuffers, rt_.rs_input_pool, B(rs_bytes));
  const auto su = static_cast<std::size_t>(u);
  if (!rt_.grads_persistent) free_group(MemCategory::kGrads, ugrad_id_[su]);
  if (un.owns_merged_root)  // the root's head part gradients, reduced together
    free_group(MemCategory::kGrads, ugrad_id_.back());
  const std::int32_t rid =
      qgz() ? qgz_reduce(u, mb, rs_elems, cid)
            : add_collective(
                  CollectiveKind::kReduceScatter, CommKind::kReduceScatter, kLaneShard,
                  rs_bytes - expert_rs_bytes, shard_g_, cid,
                  busbw_factor(CollectiveKind::kReduceScatter, F) * (rs_bytes - expert_rs_bytes) +
                      busbw_factor(CollectiveKind::kReduceScatter, Fe) * expert_rs_bytes,
                  [&] { return "reduce_scatter " + un.name + mb_suffix(mb); }, u, mb);
  if (expert_rs_bytes > 0)  // the experts' own reduce-scatter over the efsdp ranks, on the same stream
    out_.program.tasks[static_cast<std::size_t>(rid)].duration_s +=
        coll_(CollectiveKind::kReduceScatter, expert_rs_bytes, efsdp_g_);
  const Bytes out_r = B(shard_out_elems * br_);
  const Bytes grad_shard = B(shard_out_elems * grad_bytes_per_elem);
  if (rt_.rs_grads_view_output && grad_bytes_per_elem == br_ && !rt_.grads_persistent && mb == 0) {
    // FSDP2 before pytorch PR 129721: the reduce-scatter output, allocated under the reduce-scatter stream,
    // is the storage of the sharded gradients (`torch.as_strided` views: one tensor, no copy), and the input,
    // a local of foreach_reduce, is freed when it returns.
    const std::int32_t g = alloc_one(MemCategory::kGrads, kPoolReduceScatter, grad_shard);
    grad_groups_.push_back(g);
    grads_allocated_ += grad_shard;
    free_group(MemCategory::kCommBuffers, rs_in);
  } else {
    // The reduce-scatter output and the sharded gradients are allocated under the reduce-scatter stream
    // (foreach_reduce: `with device_handle.stream(reduce_scatter_stream)`), so they come from its pool.
    const std::int32_t out_id = alloc_one(MemCategory::kCommBuffers, kPoolReduceScatter, out_r);
    if (rt_.rs_input_held) {  // kept until the next unit's post-backward
      held_rs_id_ = rs_in;
    } else {
      free_group(MemCategory::kCommBuffers, rs_in);
    }
    if (!rt_.grads_persistent && mb == 0) {
      const std::int32_t g =
          alloc_tensors(MemCategory::kGrads, kPoolReduceScatter, grad_shard, ut_[su].reduced_shard);
      grad_groups_.push_back(g);
      grads_allocated_ += grad_shard;
    }
    free_group(MemCategory::kCommBuffers, out_id);
  }
  prev_prev_rs_ = prev_rs_;
  prev_rs_ = rid;
  last_shard_comm_ = rid;
  std::int32_t reduced = rid;
  if (p_.replicas > 1) {
    const double bytes = shard_out_elems * br_;
    last_rep_comm_ = reduced = add_collective(
        CollectiveKind::kAllReduce, CommKind::kAllReduce, kLaneReplica, bytes, rep_g_, rid,
        busbw_factor(CollectiveKind::kAllReduce, p_.replicas) * bytes,
        [&] { return "hsdp all_reduce " + un.name + mb_suffix(mb); }, u, mb);
  }
  // Offloaded gradients: the reduced shard goes device -> host (FSDP post-backward D2H, DeepSpeed
  // async copy into the fp32 CPU partition).
  if (offload_.grads) pcie_copy(shard_out_elems * host_grad_bytes_, reduced, u, mb, true, "d2h grads");
}

}  // namespace shardplan::detail

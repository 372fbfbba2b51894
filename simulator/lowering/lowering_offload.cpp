// Lowering, activation offload (--activation-offload; docs/model.md "Activation offload"): a unit's saved
// tensors (its saved group, the tensors of its layers' lists) are copied to pinned host memory on the PCIe
// lane in forward, their GPU storage is freed where the runtime drops it, and they are allocated again and
// copied back before the unit's backward reads them. How and when follows the runtime's ActOffloadStyle
// (simulator/plan/runtime.hpp): torch save_on_cpu, DeepSpeed cpu_checkpointing, Megatron-core
// cpu_offloading. The PCIe copies use the lane and bandwidth of CPU offload (pcie_copy: node.pcie_Bps x
// pcie_efficiency).
#include "core/checked.hpp"
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

void Lowering::plan_activation_offload() {
  const auto n = static_cast<std::size_t>(U_);
  act_off_.assign(n, ActOffloadUnit{});
  act_gpu_group_.assign(n, -1);
  reload_task_.assign(n, -1);
  weights_reload_id_.assign(n, -1);
  act_buf_id_ = {-1, -1};
  act_buf_bytes_ = {0, 0};
  out_.activation_host_bytes = 0;
  if (p_.activation_offload == 0) return;
  std::vector<int> blocks;  // the units holding transformer blocks, in forward order
  for (int u = 0; u < U_; ++u)
    if (unit(u).blocks > 0) blocks.push_back(u);
  switch (rt_.act_offload) {
    case ActOffloadStyle::kSaveOnCpu:
      // Every tensor saved inside the model's forward (the loss runs outside the context): a unit packs
      // where it saves any, pack-only ones included (the embedding's token ids).
      for (int u = 0; u < U_; ++u)
        if (offload_bytes(u) > 0) act_off_[static_cast<std::size_t>(u)] = {true, true, u};
      break;
    case ActOffloadStyle::kCheckpointInputs: {
      // keep_last_count=1: the last checkpoint input is never copied; the one before it is copied but stays
      // in the forward stash (its GPU tensor is used by the backward as is); every earlier one is dropped
      // when the block two later is offloaded (_reap_forward_stash) and restored in backward.
      const std::size_t nb = blocks.size();
      for (std::size_t i = 0; i + 1 < nb; ++i) {
        ActOffloadUnit& a = act_off_[static_cast<std::size_t>(blocks[i])];
        a.copied = true;
        if (i + 2 < nb) a.reloaded = true, a.freed_after = blocks[i + 2];
      }
      break;
    }
    case ActOffloadStyle::kLayerGroups: {
      // The first N layers (cpu_offloading_num_layers); resolve_plan keeps N a multiple of the unit size.
      int seen = 0;
      for (int u : blocks) {
        seen += unit(u).blocks;
        if (seen <= p_.activation_offload) act_off_[static_cast<std::size_t>(u)] = {true, true, u};
      }
      break;
    }
  }
  for (int u = 0; u < U_; ++u)
    if (act_off_[static_cast<std::size_t>(u)].copied)
      out_.activation_host_bytes =
          add_checked(out_.activation_host_bytes, offload_bytes(u), "activation host bytes");
}

Bytes Lowering::offload_bytes(int u) const {
  const SimUnit& un = unit(u);
  // torch 2.15 torch/autograd/graph.py save_on_cpu: pack_to_cpu copies every tensor autograd saves inside the
  // context, the weights a matmul saves for its input's gradient included (under FSDP the unsharded
  // parameter): the weights go to the host in forward and come back as new GPU tensors in backward. Its
  // pack hook runs once per op that saves a tensor (SimUnit::repacked_act_bytes: the attention's input by
  // wq, wk and wv; the rotary table), each pack a host copy and each unpack a copy back.
  if (rt_.act_offload == ActOffloadStyle::kSaveOnCpu)
    return add_checked(add_checked(un.act_bytes, un.repacked_act_bytes, "offloaded bytes"),
                       un.saved_weight_bytes, "offloaded bytes");
  return un.act_bytes;
}

void Lowering::offload_unpack_weights(int u) {
  const auto su = static_cast<std::size_t>(u);
  if (rt_.act_offload != ActOffloadStyle::kSaveOnCpu || act_off_.empty() || !act_off_[su].reloaded) return;
  // The unpacked weights are new tensors beside the parameters FSDP gathers again for the backward, each made
  // when the node reading it runs and dropped with it: about one at a time, the unit's largest (the head's
  // after the loss's backward, which runs outside save_on_cpu).
  weights_reload_id_[su] = alloc_one(MemCategory::kActivations, kPoolDefault, unit(u).saved_weight_max_bytes);
}

void Lowering::offload_release(int u) {
  const auto su = static_cast<std::size_t>(u);
  if (weights_reload_id_.empty() || weights_reload_id_[su] < 0) return;
  free_group(MemCategory::kActivations, weights_reload_id_[su]);
  weights_reload_id_[su] = -1;
}

std::int32_t Lowering::lane_wait(std::uint8_t lane, std::int32_t dep, std::int32_t dep2, const char* what) {
  Task t;
  t.type = TaskType::kMarker;
  t.lane = lane;
  t.deps = {dep, dep2, -1};
  t.label = label([&] { return std::string(what); });
  return out_.program.add(t);
}

void Lowering::offload_forward(int u, int mb) {
  if (p_.activation_offload == 0) return;
  const auto su = static_cast<std::size_t>(u);
  const SimUnit& un = unit(u);
  const ActOffloadUnit a = act_off_[su];
  const std::int32_t fwd = fwd_task_[su];
  constexpr MemCategory A = MemCategory::kActivations;
  switch (rt_.act_offload) {
    case ActOffloadStyle::kSaveOnCpu:
      if (!a.copied) return;
      // The pack copies run on the compute stream: the next kernels wait for them. The GPU tensors are no
      // longer referenced by autograd; stream order makes their blocks reusable at once.
      lane_wait(kLaneCompute,
                pcie_copy(static_cast<double>(offload_bytes(u)), fwd, u, mb, false, "d2h activations"), -1,
                "compute stream: after the activations' d2h");
      free_group(A, act_id_[su]);
      act_id_[su] = -1;
      return;
    case ActOffloadStyle::kCheckpointInputs:
      if (a.copied) pcie_copy(static_cast<double>(un.act_bytes), fwd, u, mb, false, "d2h checkpoint input");
      if (a.reloaded) {
        act_gpu_group_[su] = act_id_[su];
        act_id_[su] = -1;
      }
      // Offloading this block drops the stash's reference to the input offloaded two blocks before.
      for (int v = 0; v < u; ++v) {
        const auto sv = static_cast<std::size_t>(v);
        if (act_off_[sv].freed_after != u || act_gpu_group_[sv] < 0) continue;
        free_group(A, act_gpu_group_[sv]);
        act_gpu_group_[sv] = -1;
      }
      return;
    case ActOffloadStyle::kLayerGroups:
      break;
  }
  if (un.blocks == 0) return;  // a commit per transformer layer (TransformerBlock's forward)
  const int g = act_groups_++;
  const Bytes bytes = un.act_bytes;
  if (a.copied) {
    // tensor_push copies each saved tensor into the double buffer of the group's parity (compute stream,
    // an HBM read and write); autograd keeps only the tag, so the originals die as the forward drops them.
    const auto parity = static_cast<std::size_t>(g % 2);
    Task c;
    c.type = TaskType::kCompute;
    c.lane = kLaneCompute;
    c.duration_s = in_.costs.memory_s(2.0 * static_cast<double>(bytes));
    c.deps[0] = fwd;
    c.unit = u;
    c.micro_batch = mb;
    c.label = label([&] { return "offload buffer copy " + un.name + mb_suffix(mb); });
    last_compute_ = out_.program.add(c);
    if (act_buf_bytes_[parity] != bytes) {  // a buffer of another shape is allocated anew
      free_group(A, act_buf_id_[parity]);
      act_buf_id_[parity] = alloc_tensors(A, kPoolDefault, bytes, ut_[su].saved);
      act_buf_bytes_[parity] = bytes;
    }
    free_group(A, act_id_[su]);
    act_id_[su] = -1;
  }
  const bool prev_offloaded = g == 0 || g - 1 < p_.activation_offload / std::max(1, p_.wrap);
  if (!prev_offloaded) return;
  // on_group_commit_forward: torch.cuda.synchronize() (the previous group's D2H and this layer's compute),
  // then the buffers no longer needed are dropped and this group's D2H is issued on the D2H stream.
  const std::int32_t sync = lane_wait(kLanePcie, last_compute_, -1, "commit: torch.cuda.synchronize");
  Task host;
  host.type = TaskType::kMarker;
  host.lane = kLanePcie;
  host.cpu_wait_for = sync;
  host.label = label([] { return std::string("host synchronised"); });
  out_.program.add(host);
  const int groups = p_.activation_offload / std::max(1, p_.wrap);
  if (g >= 1 && g - 1 + 2 >= groups) {
    const auto parity = static_cast<std::size_t>((g - 1) % 2);
    free_group(A, act_buf_id_[parity]);
    act_buf_id_[parity] = -1;
    act_buf_bytes_[parity] = 0;
  }
  if (a.copied) pcie_copy(static_cast<double>(bytes), last_compute_, u, mb, false, "d2h activations");
}

void Lowering::offload_reload(int v, int mb, std::int32_t dep) {
  const auto sv = static_cast<std::size_t>(v);
  if (reload_task_[sv] >= 0 || !act_off_[sv].reloaded) return;
  const Bytes bytes = unit(v).act_bytes;
  reload_task_[sv] = pcie_copy(static_cast<double>(offload_bytes(v)), dep, v, mb, true, "h2d activations");
  // save_on_cpu unpacks under the current (compute) stream; DeepSpeed's restore and Megatron's reload
  // allocate under their copy stream.
  const std::uint8_t pool = rt_.act_offload == ActOffloadStyle::kSaveOnCpu ? kPoolDefault : kPoolOffloadCopy;
  act_id_[sv] = alloc_tensors(MemCategory::kActivations, pool, bytes, ut_[sv].saved);
}

void Lowering::offload_backward(int u, int mb) {
  if (p_.activation_offload == 0) return;
  const auto su = static_cast<std::size_t>(u);
  switch (rt_.act_offload) {
    case ActOffloadStyle::kSaveOnCpu:  // unpack on the compute stream, after what it ran before
      offload_reload(u, mb, last_compute_);
      break;
    case ActOffloadStyle::kCheckpointInputs:  // restore on the side stream, in its order, when needed
      offload_reload(u, mb, -1);
      break;
    case ActOffloadStyle::kLayerGroups:
      // on_group_commit_backward of layer u: the H2D stream waits for the compute so far, then reloads the
      // layer before it (num_prefetch_group=1); the layer's own was reloaded one layer earlier.
      offload_reload(u, mb, last_compute_);
      if (unit(u).blocks > 0 && u > 0) offload_reload(u - 1, mb, last_compute_);
      break;
  }
  if (reload_task_[su] < 0) return;
  lane_wait(kLaneCompute, reload_task_[su], -1, "compute stream: after the activations' h2d");
  reload_task_[su] = -1;
}

}  // namespace shardplan::detail

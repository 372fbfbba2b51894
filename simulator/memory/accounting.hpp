// Memory accounting outside the step's task program: the persistent state of one rank (parameters, gradients,
// optimizer state, as each runtime pads and shards them), what is allocated before the step starts, the
// planner's cheap lower bounds (of the peak, and of reserved memory from the walk's per-stream peaks), and
// memory outside PyTorch's allocator (CUDA context, NCCL).
#pragma once
#include <array>

#include "simulator/cost/cost.hpp"
#include "simulator/engine/engine.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// Elements of the persistent state one rank holds, wherever it lives (GPU or host), as the runtime shards
/// and pads them (docs/mechanics.md §1.2, §1.8).
struct StateElems {
  std::int64_t params = 0, grads = 0, optimizer = 0;
};
StateElems state_elems(const ModelGraph& model, const Plan& p);

/// Which parts of the persistent state CPU offload keeps on the host (docs/mechanics.md §1.11).
struct OffloadSplit {
  bool params = false, grads = false, optimizer = false;
};
OffloadSplit offload_split(const Plan& p);

/// AdamW `step` tensors on the device: one per parameter tensor with a fused (or capturable) torch optimizer,
/// none for the foreach one (a CPU scalar) or DeepSpeed's.
std::int64_t optimizer_step_tensors(const ModelGraph& model, const Plan& p);
/// Persistent state of one rank on the GPU {params, grads, optimizer} in bytes (offloaded parts are 0).
std::array<Bytes, 3> persistent_state(const ModelGraph& model, const Plan& p);
/// Host memory one rank's offloaded state takes (0 without offload); a node holds this for each of its GPUs.
Bytes host_state_bytes_per_rank(const ModelGraph& model, const Plan& p);

/// Activations saved by one micro-batch's forward on one rank, plus the saved log-softmax of the loss: a
/// lower bound of the activations at the peak.
Bytes activation_bytes(const ModelGraph& model, const Plan& p);
/// The part of activation_bytes on the experts' side of the MoE layers' dispatch (ActTensor::expert_rows):
/// under EP the rows the busiest rank's experts receive (--moe-imbalance); 0 for a dense model.
Bytes expert_side_activation_bytes(const ModelGraph& model, const Plan& p);
/// Bytes the loss saves from its forward to its backward for `tokens` tokens of this rank (the loss layer's
/// tensors of the plan's loss kernel that loss_saved() selects).
double loss_saved_bytes(const ModelGraph& model, const Plan& p, double tokens);

/// The model code's buffers on every rank (model_buffers.cpp): RoPE caches (ModelSpec::rope_cache) and
/// torchtitan's MoE counters (--moe-impl grouped), each allocation rounded as the caching allocator rounds
/// it.
Bytes model_buffer_bytes(const ModelGraph& model, const Plan& p);

/// Bytes allocated before the step's first task, per category: the persistent state and the buffers that live
/// across steps (DeepSpeed ZeRO-3 IPG bucket, DDP Reducer buckets, held logits, the model's buffers).
std::array<Bytes, kMemCategories> initial_allocation(const ModelGraph& model, const Plan& p,
                                                     const RuntimeTraits& rt,
                                                     const std::array<Bytes, 3>& persistent);

/// Memory held outside PyTorch's allocator (CUDA context, NCCL communicators, the token dispatch backend's
/// preallocated buffers).
struct RuntimeOverhead {
  Bytes cuda_context_bytes = 0;
  Bytes nccl_bytes = 0;
  /// DeepEP's ElasticBuffer with --ep-backend deepep (ep_buffers.hpp), alive for the whole run.
  Bytes ep_dispatch_bytes = 0;
  Bytes total() const { return cuda_context_bytes + nccl_bytes + ep_dispatch_bytes; }
};
/// The CUDA context and the NCCL communicators of the plan's process groups.
RuntimeOverhead runtime_overhead(const Plan& p);
/// With the token dispatch backend's buffers, which depend on the model and the cluster.
RuntimeOverhead runtime_overhead(const Plan& p, const ModelGraph& model, const Cluster& cluster);

/// The planner's cheap bound: persistent params and optimizer state + one micro-batch of saved activations +
/// the runtime overhead. Never above the simulated peak reserved + overhead (tested).
Bytes memory_lower_bound(const ModelGraph& model, const Plan& p);

/// A lower bound of reserved memory from the walk's per-stream peaks of allocator-rounded bytes (blocks are
/// not shared across streams, and segments are kept): the planner's cheap pass. Reserved memory itself comes
/// from the caching-allocator replay (simulator/memory/replay.hpp).
Bytes reserved_lower_bound(const Timeline& tl);

}  // namespace shardplan

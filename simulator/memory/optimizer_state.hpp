// The optimizer's state as each implementation allocates it, tensor by tensor (docs/model.md "Optimizers"):
// which tensors the runtime hands the optimizer (a parameter's shard, a whole parameter, a flat partition),
// and the state tensors each optimizer creates for one of them. persistent_state (accounting.cpp) sums them;
// the lowering splits the allocator replay's optimizer state into the same tensors.
#pragma once
#include <array>
#include <cstdint>
#include <functional>

#include "core/units.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// One tensor the optimizer steps on one rank, as the runtime hands it over: FSDP2 a parameter's shard (a
/// DTensor with Shard(0): ceil(rows / F) padded local rows x columns), DDP (ZeRO-0) a whole parameter, FSDP1
/// / DeepSpeed / Megatron a flat 1-D partition (rows = elements, cols = 1).
struct OptimizerTensor {
  std::int64_t elems = 0;           ///< local elements
  std::int64_t rows = 0, cols = 1;  ///< local shape (a vector or a flat partition: cols 1)
  /// Leading dimension of a grouped expert weight [stack, rows, cols] (the rank's experts, or its Shard(0)
  /// share of them); 1 for every other tensor. elems = stack x rows x cols.
  std::int64_t stack = 1;
  std::int64_t full_rows = 0, full_cols = 1;  ///< the whole (TP-local) parameter: what Muon orthogonalises
  /// A 2-D weight inside a transformer block: Muon's; embeddings, the output head, norms and biases get its
  /// auxiliary AdamW (torch.optim.Muon's documentation, Moonlight, KellerJordan/Muon). Grouped expert weights
  /// are 3-D, which torch.optim.Muon refuses (Muon.__init__: "Muon only supports 2D parameters"): they go to
  /// the auxiliary AdamW too.
  bool matrix = false;
  bool flat = false;  ///< a flat partition (FSDP1, DeepSpeed, Megatron)
};

/// The state tensors one optimizer allocates for one tensor: each one request to the caching allocator, in
/// bytes, in creation order.
struct StateTensors {
  std::array<Bytes, 6> bytes{};
  int n = 0;
  void add(Bytes b) {
    if (b > 0 && n < static_cast<int>(bytes.size())) bytes[static_cast<std::size_t>(n++)] = b;
  }
  Bytes sum() const;
  /// Each request rounded as the caching allocator rounds it (allocation_bytes).
  Bytes allocated() const;
};

/// Bytes per element of the optimizer's moments: the dtype the plan keeps them in (fp32, bf16 under
/// bf16-true where the parameters are the master; fp32 beside an fp32 master in the optimizer).
int moment_bytes(const RuntimeTraits& rt, const Plan& p);
/// Bytes per element of the fp32 master copy the optimizer owns besides its moments
/// (RuntimeTraits::master_weights_in_optimizer), 0 where the sharded parameters are the master.
int master_bytes(const RuntimeTraits& rt);

/// The state `p.optimizer` creates for one tensor (docs/model.md "Optimizers"):
/// - adamw / adam: exp_avg, exp_avg_sq like the tensor (torch/optim/adam.py _init_group);
/// - sgd: momentum_buffer (torch/optim/sgd.py, momentum > 0); lion: exp_avg (lion-pytorch 0.2.5);
/// - adafactor (torch/optim/_adafactor.py _init_group): a matrix keeps row_var [rows, 1] and col_var [1,
/// cols],
///   a vector (or a flat partition) variance like it; its `step` is a CPU tensor;
/// - adamw8bit: torchao 0.18 (fsdp2; torchao/optim/adam.py _new_buffer, subclass_8bit.py
/// OptimState8bit.zeros)
///   per moment uint8 codes like the local tensor, fp32 scales per block of 256 and a 256-entry fp32 qmap,
///   when the local tensor has >= 4096 elements and a multiple of 256, else zeros_like; bitsandbytes 0.50
///   (other runtimes; bitsandbytes/optim/optimizer.py Optimizer2State.init_state) state1, state2 uint8 and
///   absmax1, absmax2 fp32 per block of 256 when >= 4096 elements (min_8bit_size), else two fp32 moments;
///   its two shared quantile maps are per optimizer (2 KiB, not counted);
/// - muon: momentum_buffer for a matrix (torch/optim/_muon.py), AdamW's two moments for the rest.
StateTensors optimizer_state_tensors(const RuntimeTraits& rt, const Plan& p, const OptimizerTensor& t);

/// Calls f(tensor, count) for every tensor the optimizer steps on one rank, in model order (identical tensors
/// once with their count; a rank's 1/ep of the routed experts counted already).
void for_each_optimizer_tensor(const ModelGraph& model, const Plan& p,
                               const std::function<void(const OptimizerTensor&, std::int64_t)>& f);

/// The optimizer state of one rank in bytes, allocator-rounded per tensor where the runtime allocates per
/// parameter (FSDP2, DDP) unless `rounded` is false (host memory), as requested for a flat partition; the
/// fp32 master copy included, the `step` scalars not (optimizer_step_tensors).
Bytes optimizer_state_bytes(const ModelGraph& model, const Plan& p, bool rounded = true);

/// What the optimizer step works on, for its time (lowering.cpp optimizer_step).
struct OptimizerWork {
  std::int64_t elems = 0;         ///< local elements of every tensor stepped
  std::int64_t matrix_elems = 0;  ///< of them, Muon's matrices (local shards)
  std::int64_t tensors = 0;       ///< tensors stepped
};
OptimizerWork optimizer_work(const ModelGraph& model, const Plan& p);

}  // namespace shardplan

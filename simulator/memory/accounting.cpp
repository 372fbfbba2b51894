// Persistent state, initial allocations, the lower bound, reserved memory and runtime overhead (docs/model.md
// "Memory").
#include "simulator/memory/accounting.hpp"

#include <cmath>

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/memory/ep_buffers.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/memory/optimizer_state.hpp"
#include "simulator/memory/zeropp.hpp"

namespace shardplan {

namespace {

/// Elements of one rank: TP-local, its shard as the runtime pads it, and DeepSpeed ZeRO-1/2's partition.
struct ElemCounts {
  std::int64_t local = 0, shard = 0, part = 0;
};

/// The counts over the model's parameters, or over the trainable ones only (`trainable`: LoRA's adapters).
ElemCounts count_elems(const ModelGraph& model, const Plan& p, bool trainable) {
  const RuntimeTraits rt = runtime_traits(p);
  // Dense parameters shard over dp_shard x cp, one EP rank's experts (experts / ep of each MoE layer) over
  // dp_shard x cp / ep (units.cpp, torchtitan's fsdp and efsdp meshes).
  const int F = p.fsdp_ranks(), Fe = p.efsdp_ranks(), t = p.tp;
  const bool ep = p.ep > 1;
  std::int64_t local = 0, shard = 0, expert_local = 0, expert_shard = 0;
  // Identical tensors (a MoE layer's experts) are summed as one group times its count, and identical groups
  // of the model's layers as one times the layers that have it: the same integers.
  model.for_each_model_tensor_group([&](const Tensor& ten, std::int64_t count, std::int64_t layers) {
    if (trainable && ten.frozen) return;
    auto times = [&](std::int64_t v) { return mul_checked(v, layers, "tensor elements"); };
    const std::int64_t n = times(mul_checked(tp_local_elems(ten, t), count, "tensor elements"));
    if (ep && ten.expert) {  // all experts' elements (this rank's: / ep below); this rank's shard
      expert_local = add_checked(expert_local, n);
      if (rt.padding != Padding::kFlatUnit)
        expert_shard =
            add_checked(expert_shard, times(rank_shard_elems(ten, count, t, Fe, rt.padding, p.ep)));
      return;
    }
    local = add_checked(local, n);
    if (rt.padding != Padding::kFlatUnit)
      shard = add_checked(
          shard, times(mul_checked(tensor_shard_elems(ten, t, F, rt.padding), count, "shard elements")));
  });
  if (rt.padding == Padding::kFlatUnit)
    shard = ceil_div(local, F);  // one padded flat parameter, approximately
  if (ep) {
    expert_local /= p.ep;
    if (rt.padding == Padding::kFlatUnit) expert_shard = ceil_div(expert_local, Fe);
  }
  // DeepSpeed ZeRO-1/2 partition one flat group padded to 2 x F (nccl_start_alignment_factor, §1.8).
  const bool flat = rt.flat_group_partitions;
  std::int64_t part = flat ? ceil_div(local, 2 * F) * 2 : shard;
  if (ep) {
    part += flat ? ceil_div(expert_local, 2 * Fe) * 2 : expert_shard;
    shard += expert_shard;
    local += expert_local;
  }
  return {local, shard, part};
}

}  // namespace

StateElems state_elems(const ModelGraph& model, const Plan& p) {
  const ElemCounts all = count_elems(model, p, false);
  // LoRA (docs/model.md "LoRA and QLoRA"): frozen parameters get no gradient and no optimizer state; FSDP1's
  // FlatParameter gradient (use_orig_params=True) still covers them.
  const bool frozen = has_frozen_parameters(model);
  const ElemCounts train = frozen ? count_elems(model, p, true) : all;
  const RuntimeTraits rt = runtime_traits(p);
  const ElemCounts grad = rt.padding == Padding::kFlatUnit ? all : train;
  // Optimizer state from ZeRO-1, gradients from ZeRO-2 in partitions (DeepSpeed ZeRO-1/2: of one flat group;
  // else each rank's shard); parameters sharded where the runtime gathers them per unit (ZeRO-3, FSDP's
  // ZeRO-2).
  StateElems e{all.local, grad.local, train.local};
  if (p.zero >= 1) e.optimizer = train.part;
  if (p.zero >= 2) e.grads = grad.part;
  if (rt.gathers_params) e.params = all.shard;
  return e;
}

namespace {

Bytes frozen_param_bytes_delta(const ModelGraph& model, const Plan& p, int param_bytes) {
  // The bytes frozen tensors stored in their own dtype (bf16, int8 codes, packed 4-bit) take beyond or below
  // their elements at the plan's parameter dtype, plus the quantisation buffers every rank holds whole.
  if (!has_frozen_parameters(model)) return 0;
  const RuntimeTraits rt = runtime_traits(p);
  const bool sharded = rt.gathers_params;
  const int F = p.fsdp_ranks();
  Bytes delta = 0;
  for (const Layer* l : model.order()) {
    l->for_each_tensor_group([&](const Tensor& ten, std::int64_t count) {
      if (ten.store == WeightStore::kParam) return;
      // FSDP1's flat shard is approximately local / F (as state_elems).
      const std::int64_t local = rank_local_elems(ten, count, p.tp, p.ep);
      const std::int64_t n =
          !sharded ? local
          : rt.padding == Padding::kFlatUnit
              ? ceil_div(local, F)
              : rank_shard_elems(ten, count, p.tp, ten.expert && p.ep > 1 ? p.efsdp_ranks() : F, rt.padding,
                                 p.ep);
      delta += mul_checked(n, store_bytes(ten.store, param_bytes) - param_bytes, "parameter bytes");
    });
    for (const Tensor& b : l->buffers)
      delta = add_checked(
          delta, allocation_bytes(mul_checked(b.numel(), store_bytes(b.store, param_bytes), "buffer bytes")));
  }
  return delta;
}

}  // namespace

OffloadSplit offload_split(const Plan& p) {
  // DeepSpeed ZeRO-Offload (offload_optimizer): fp32 master + Adam moments and the fp32 gradient partitions
  // live on the host (stage_1_and_2.py cpu_offload: accumulated_grads_in_cpu; stage3.py offload_optimizer);
  // the 16-bit parameters stay on the GPU. offload_param (ZeRO-Infinity, stage 3) moves the 16-bit parameter
  // partitions too. FSDP CPU offload (FSDP1 CPUOffload(offload_params=True), FSDP2 CPUOffloadPolicy) keeps
  // the sharded parameters, their gradients and the optimizer state on the host (docs/mechanics.md §1.11).
  OffloadSplit o;
  if (p.offload == Offload::kNone) return o;
  o.optimizer = o.grads = true;
  o.params = p.offload == Offload::kParams;
  return o;
}

std::int64_t optimizer_step_tensors(const ModelGraph& model, const Plan& p) {
  // torch/optim/adam.py (torch 2.15; AdamW subclasses Adam) _init_group: state["step"] is a 0-dim tensor on
  // the parameter's device when `fused` or `capturable`, a CPU tensor otherwise ("Deliberately host `step` on
  // CPU if both capturable and fused are off"). One per parameter tensor; DeepSpeed's optimizers run on its
  // flat partitions and keep the step count in the parameter group.
  // Megatron's distributed optimizer steps flat shard tensors with Apex/TE FusedAdam (step per group).
  if (runtime_traits(p).optimizer_flat_partitions || !p.fused_optimizer) return 0;
  // Only Adam-family torch optimizers keep a device `step`: SGD and Lion keep none, Adafactor and torchao's
  // 8-bit AdamW a CPU tensor (torch.tensor(0.0)), bitsandbytes a Python int; Muon none for its matrices (its
  // auxiliary fused AdamW one per other tensor).
  const Optimizer o = p.optimizer;
  if (o != Optimizer::kAdamW && o != Optimizer::kAdam && o != Optimizer::kMuon) return 0;
  std::int64_t n = 0;
  for_each_optimizer_tensor(model, p, [&](const OptimizerTensor& t, std::int64_t count) {
    if (o != Optimizer::kMuon || !t.matrix) n += count;
  });
  return n;
}

std::array<Bytes, 3> persistent_state(const ModelGraph& model, const Plan& p) {
  const StateElems e = state_elems(model, p);
  const OffloadSplit o = offload_split(p);
  const RuntimeTraits rt = runtime_traits(p);
  const BytesPerParam b = bytes_per_param(rt, p.precision);
  // Megatron's grad buffer holds the gradients in the reduce dtype (grad_reduce_in_fp32: fp32, else bf16).
  const Bytes grad_b = rt.grads_in_reduce_dtype ? (p.reduce() == Dtype::kFp32 ? 4 : 2) : Bytes{b.grads};
  std::array<Bytes, 3> out{mul_checked(e.params, b.params, "parameter bytes"),
                           mul_checked(e.grads, grad_b, "gradient bytes"), 0};
  if (rt.padding == Padding::kPerTensorDim0) {
    // FSDP2 keeps each parameter's (padded) shard as its own tensor (_fsdp_param.py _init_sharded_param:
    // new_zeros(padded_sharded_size)) and AdamW creates exp_avg and exp_avg_sq per parameter (zeros_like):
    // each is one allocation, rounded as the caching allocator rounds it. Gradients are views of one
    // reduce-scatter output per unit (sized in the lowering).
    // Dense tensors shard over dp_shard x cp; with expert parallelism a rank holds 1/ep of the routed
    // experts' tensors, each sharded over dp_shard x cp / ep (state_elems above).
    Bytes params = 0, expert_params = 0;
    model.for_each_model_tensor_group([&](const Tensor& ten, std::int64_t count, std::int64_t layers) {
      const bool expert = p.ep > 1 && ten.expert;
      // A grouped expert weight is one tensor of the rank's stack / ep experts (counted whole below);
      // per-expert tensors are all listed here and the rank's 1/ep of them taken after the loop.
      const bool grouped = expert && ten.stack > 1;
      const std::int64_t local = grouped ? rank_local_elems(ten, 1, p.tp, p.ep) : tp_local_elems(ten, p.tp);
      const std::int64_t shard =
          grouped ? rank_shard_elems(ten, 1, p.tp, p.efsdp_ranks(), Padding::kPerTensorDim0, p.ep)
                  : tensor_shard_elems(ten, p.tp, expert ? p.efsdp_ranks() : p.fsdp_ranks(),
                                       Padding::kPerTensorDim0);
      const Bytes pb = allocation_bytes(
          mul_checked(p.zero >= 2 ? shard : local, store_bytes(ten.store, b.params), "parameter bytes"));
      // `count` identical tensors in each of `layers` layers: `count` x `layers` allocations of the same
      // rounded size each.
      const std::int64_t n = mul_checked(count, layers, "tensors");
      (expert && !grouped ? expert_params : params) += mul_checked(pb, n, "parameter bytes");
    });
    out[0] = params + expert_params / p.ep;
    // QLoRA's quantisation constants: whole on every rank, one allocation each.
    for (const Layer* l : model.order())
      for (const Tensor& buf : l->buffers)
        out[0] += allocation_bytes(buf.numel() * store_bytes(buf.store, b.params));
  } else {
    out[0] = add_checked(out[0], frozen_param_bytes_delta(model, p, b.params));
  }
  // The optimizer's state tensor by tensor (optimizer_state.cpp): FSDP2 and DDP create each state tensor per
  // parameter (zeros_like, one allocation each); a flat partition's state is one tensor per moment.
  out[2] = optimizer_state_bytes(model, p);
  // AdamW's `step` scalars: 4 bytes each (fp32), one allocation each.
  out[2] = add_checked(out[2], optimizer_step_tensors(model, p) * allocation_bytes(4), "optimizer bytes");
  if (o.params) out[0] = 0;
  // ZeRO++ hpZ: the secondary partitions, made at each parameter's release after its first forward and freed
  // after the optimizer step (stage3.py _post_step): alive through backward and the step, counted for the
  // whole step (docs/model.md "ZeRO++").
  out[0] = add_checked(out[0], hpz_secondary_bytes(model, p), "parameter bytes");
  if (o.grads) out[1] = 0;
  if (o.optimizer) out[2] = 0;
  return out;
}

Bytes host_state_bytes_per_rank(const ModelGraph& model, const Plan& p) {
  const OffloadSplit o = offload_split(p);
  if (!o.optimizer) return 0;
  const StateElems e = state_elems(model, p);
  const RuntimeTraits rt = runtime_traits(p);
  const BytesPerParam b = bytes_per_param(rt, p.precision);
  // Gradients reach the host as fp32 (DeepSpeed accumulates them there in fp32; FSDP's sharded grads have the
  // fp32 parameters' dtype under bf16-mixed, the parameter dtype otherwise).
  const Bytes grad_b = rt.native_cpu_adam ? 4 : b.grads;
  Bytes host = add_checked(optimizer_state_bytes(model, p, /*rounded=*/false),
                           mul_checked(e.grads, grad_b, "host gradient bytes"));
  if (o.params) host = add_checked(host, mul_checked(e.params, b.params, "host parameter bytes"));
  return host;
}

double loss_saved_bytes(const ModelGraph& model, const Plan& p, double tokens) {
  const LossKernel k = loss_kernel(p, runtime_traits(p));
  const LossOps o = loss_ops(k);
  const LossDims x = loss_dims(p, model.spec(), tokens);
  double total = 0;
  for (const Layer* l : model.order())
    for (const LossTensor* t : loss_tensors_of(l->loss_tensors, k))
      if (loss_saved(*t, o)) total += loss_tensor_bytes(*t, x);
  return total;
}

Bytes activation_bytes(const ModelGraph& model, const Plan& p) {
  const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq) / p.cp;  // this rank's tokens
  double total = 0;
  double block_inputs = 0;  // full AC: what each block keeps
  for (const Layer* l : model.order()) {
    if (p.ac == AcMode::kFull && l->block >= 0) {
      block_inputs += block_input_bytes(*l, p, T);
      continue;
    }
    total += layer_saved_bytes(*l, p, T, p.ac == AcMode::kSelective && l->block >= 0);
  }
  total += block_inputs;
  // The loss's tensors saved from its forward to its backward (the loss layer's list of the plan's loss
  // kernel, simulator/model/loss_tensors.cpp): eager the log-softmax output, compiled the logits and two
  // per-token statistics, Megatron its in-place softmax and target mask.
  total += loss_saved_bytes(model, p, T);
  return static_cast<Bytes>(total);
}

Bytes expert_side_activation_bytes(const ModelGraph& model, const Plan& p) {
  const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq) / p.cp;  // this rank's tokens
  double total = 0;
  for (const Layer* l : model.order())
    if (l->moe_experts > 0 && !(p.ac == AcMode::kFull && l->block >= 0))  // full AC: the block input alone
      total += layer_expert_side_saved_bytes(*l, p, T, p.ac == AcMode::kSelective && l->block >= 0);
  return static_cast<Bytes>(total);
}

std::array<Bytes, kMemCategories> initial_allocation(const ModelGraph& model, const Plan& p,
                                                     const RuntimeTraits& rt,
                                                     const std::array<Bytes, 3>& ps) {
  std::array<Bytes, kMemCategories> initial{};
  initial[static_cast<int>(MemCategory::kParams)] = ps[0];
  initial[static_cast<int>(MemCategory::kOptimizer)] = ps[2];
  initial[static_cast<int>(MemCategory::kOther)] = model_buffer_bytes(model, p);
  if (rt.grads_persistent) initial[static_cast<int>(MemCategory::kGrads)] = ps[1];
  if (rt.ipg_bucket_persistent)  // DeepSpeed ZeRO-3: IPG bucket allocated at optimizer init (§1.6)
    initial[static_cast<int>(MemCategory::kCommBuffers)] =
        static_cast<Bytes>(
            std::min(fw::kDeepSpeedReduceBucketElems, static_cast<double>(model.parameters()) / p.tp)) *
        2;
  // Plain data parallel (ZeRO-0 on the fsdp2 runtime = DDP / composable replicate): the Reducer's flat bucket
  // buffers hold a second copy of every gradient for the life of the model (gradient_as_bucket_view=False,
  // the default; the DDP docs: the view "saves memory equal to the total gradients size").
  if (rt.ddp_reducer_buckets) initial[static_cast<int>(MemCategory::kCommBuffers)] = ps[1];
  if (p.hold_logits) {
    // The previous micro-step's model output, still referenced by the training loop: the loss kernel's
    // carried entry (the upcast logits under an eager upcast loss, else the logits in the compute dtype).
    const LossKernel k = loss_kernel(p, rt);
    const double T = static_cast<double>(p.mbs) * static_cast<double>(p.seq);
    const double lb = p.loss_dtype == Dtype::kFp32 ? 4.0 : p.compute_bytes();
    for (const Layer* l : model.order())
      for (const LossTensor* t : loss_tensors_of(l->loss_tensors, k))
        if (t->made == kLossCarried)
          initial[static_cast<int>(MemCategory::kActivations)] =
              static_cast<Bytes>(std::llround(loss_dtype_bytes(t->dtype, p.compute_bytes(), lb) * T *
                                              static_cast<double>(model.spec().vocab) / p.tp / p.cp));
  }
  return initial;
}

RuntimeOverhead runtime_overhead(const Plan& p) {
  RuntimeOverhead o;
  o.cuda_context_bytes = fw::kCudaContextBytes;
  // Communicators: shard (or DP), replicate, TP; CP's ring and, with EP, the EP and efsdp groups.
  const int comms = (p.fsdp_ranks() > 1 || p.dp > 1 ? 1 : 0) + (p.replicas > 1 ? 1 : 0) + (p.tp > 1 ? 1 : 0) +
                    (p.cp > 1 ? 1 : 0) + (p.ep > 1 ? 2 : 0) +
                    // ZeRO++: hpZ's intra group; qgZ's node-local and cross-node all-to-all groups.
                    (p.hpz_partition > 1 ? 1 : 0) + (p.quantized_gradients ? 2 : 0);
  o.nccl_bytes = comms * fw::kNcclCommunicatorBytes;
  return o;
}

RuntimeOverhead runtime_overhead(const Plan& p, const ModelGraph& model, const Cluster& cluster) {
  RuntimeOverhead o = runtime_overhead(p);
  o.ep_dispatch_bytes = ep_dispatch_buffer_bytes(p, model, cluster);
  return o;
}

Bytes memory_lower_bound(const ModelGraph& model, const Plan& p) {
  const auto ps = persistent_state(model, p);
  // Pipeline parallelism: each of the pp ranks holds its stages' state and activations; the busiest holds at
  // least the average of the whole model's.
  return (ps[0] + ps[2] + activation_bytes(model, p)) / p.pp + fw::kCudaContextBytes;
}

Bytes reserved_lower_bound(const Timeline& tl) {
  // A stream's segments never shrink without an OOM retry or empty_cache(), and a block serves only its own
  // stream: the allocator holds at least each stream's peak of rounded allocations, all at once.
  Bytes reserved = 0;
  for (const Bytes b : tl.pool_peak_bytes) reserved += b;
  return std::max(reserved, tl.peak_bytes);
}

}  // namespace shardplan

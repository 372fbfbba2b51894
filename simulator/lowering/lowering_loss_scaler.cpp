// Lowering, fp16-mixed's dynamic loss scaler before the optimizer step (docs/model.md "fp16 mixed
// precision"): the pass over this rank's gradients that checks them for inf/nan (and unscales them), the
// all-reduce of the found-inf flag over the data-parallel ranks, and the CPU's read of the flag, which the
// step waits for. The tensors it creates: torch's found_inf and inv_scale, DeepSpeed ZeRO-0's fp32 gradients.
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

std::int32_t Lowering::loss_scaler() {
  const StateElems e = state_elems(in_.model, p_);
  const BytesPerParam bpp = bytes_per_param(rt_, p_.precision);
  // What the check reads: torch's GradScaler the optimizer's gradients (FSDP: this rank's shards, in the
  // reduce dtype), megatron its fp32 main gradients of the distributed optimizer's shard, DeepSpeed the
  // 16-bit gradients of its partition (ZeRO-0: all of them).
  double bytes = 0;
  switch (rt_.scaler_check) {
    case ScalerCheck::kReducedGrads:
      bytes =
          static_cast<double>(e.grads) * (p_.reduce() == Dtype::kFp32 ? 4.0 : 2.0) * fw::kTorchUnscalePasses;
      break;
    case ScalerCheck::kMainGrads:
      bytes = static_cast<double>(e.optimizer) * 4.0 * fw::kTorchUnscalePasses;
      break;
    case ScalerCheck::kPartitionGrads:
      bytes = static_cast<double>(e.optimizer) * bpp.grads * fw::kDeepSpeedOverflowPasses;
      break;
  }
  // CPU-offloaded gradients are checked on the host (DeepSpeed's local_overflow tracked while copying them
  // out; ShardedGradScaler unscales the CPU shards): no HBM pass.
  if (offload_.grads) bytes = 0;
  Task t;
  t.type = TaskType::kCompute;
  t.lane = kLaneCompute;
  t.duration_s =
      in_.costs.memory_s(bytes) + coll_(CollectiveKind::kAllReduce, fw::kLossScalerFlagBytes, dp_g_);
  t.cpu_s = 3 * K_.kernel_launch_s + K_.collective_launch_s;
  t.deps = {last_shard_comm_, last_rep_comm_, offload_.grads ? last_pcie_ : -1};
  t.label = label([] { return std::string("loss scaler: inf/nan check, unscale, found-inf all_reduce"); });
  const std::int32_t id = out_.program.add(t);
  std::int32_t live = -1;
  if (rt_.scaler_check != ScalerCheck::kPartitionGrads) {
    // found_inf and inv_scale (`self._scale.double().reciprocal().float()`): one fp32 element each, alive
    // until GradScaler.step has read found_inf (torch 2.15 torch/amp/grad_scaler.py unscale_); megatron's
    // found_inf likewise (optimizer.py).
    live = alloc_one(MemCategory::kOptimizer, kPoolDefault, 4);
    alloc_one(MemCategory::kOptimizer, kPoolDefault, 4, live);
  } else if (p_.zero == 0 && !offload_.optimizer) {
    // DeepSpeed ZeRO-0 fp16 runs FP16_Optimizer (deepspeed 0.19.8 runtime/engine.py
    // _do_optimizer_sanity_check -> FP16; runtime/fp16/fused_optimizer.py step): each 16-bit gradient is
    // copied to fp32 (`p.grad.to(data_type)`, one tensor per parameter) and the copies are flattened into
    // one fp32 gradient of the whole model (_flatten_dense_tensors), which the fp32 master steps with; the
    // copies die after the flatten, the flat gradient with the step. ZeRO-1/2/3 keep fp32 partition
    // gradients of their own (persistent state) and create none here.
    const Bytes fp32 = B(static_cast<double>(e.optimizer) * 4);
    const std::int32_t copies = alloc_tensors(MemCategory::kOptimizer, kPoolDefault, fp32, optimizer_params_);
    live = alloc_one(MemCategory::kOptimizer, kPoolDefault, fp32);
    free_group(MemCategory::kOptimizer, copies);
  }
  // GradScaler.step / DeepSpeed's has_overflow / megatron's step read the flag back (`.item()`): the CPU
  // waits for the stream before it issues the step.
  Task wait;
  wait.type = TaskType::kMarker;
  wait.lane = kLaneCompute;
  wait.cpu_wait_for = id;
  wait.label = label([] { return std::string("loss scaler: found_inf.item()"); });
  out_.program.add(wait);
  return live;
}

}  // namespace shardplan::detail

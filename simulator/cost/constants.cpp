// The per-parameter byte tables of simulator/cost/constants.hpp.
#include "simulator/cost/constants.hpp"

namespace shardplan {

BytesPerParam bytes_per_param(const RuntimeTraits& rt, Precision p) {
  // The master weights in the optimizer (RuntimeTraits::master_weights_in_optimizer): 16-bit parameters and
  // gradients, fp32 master + Adam exp_avg + exp_avg_sq. Megatron-core: bf16 parameters in the param buffer,
  // fp32 main_grad in the grad buffer (grad_reduce_in_fp32; persistent_state uses 2 bytes when the reduce
  // dtype is bf16), fp32 main parameters in the distributed optimizer (distrib_optimizer.py
  // _build_model_and_main_param_groups: shard_main_param = shard_model_param.clone().float()).
  if (rt.master_weights_in_optimizer) return {2, rt.grads_in_reduce_dtype ? 4 : 2, 12};
  switch (p) {
    case Precision::kBf16Mixed:
    case Precision::kFp16Mixed:  // the same tensors with fp16 compute
      return {4, 4, 8};
    case Precision::kBf16:
      return {2, 2, 8};
    case Precision::kBf16True:
      return {2, 2, 4};
    case Precision::kFp32:
      return {4, 4, 8};
  }
  return {4, 4, 8};
}

double optimizer_traffic_vs_adamw(Optimizer o) {
  switch (o) {
    case Optimizer::kAdamW:
    case Optimizer::kAdam:
      return 1.0;
    case Optimizer::kSgd:
      return 20.0 / 28.0;
    case Optimizer::kLion:
    case Optimizer::kAdafactor:
      return 76.0 / 28.0;
    case Optimizer::kAdamW8bit:
      return 16.0 / 28.0;
    case Optimizer::kMuon:
      return 42.0 / 28.0;
  }
  return 1.0;
}

double optimizer_bytes_per_param(const RuntimeTraits& rt, Precision p, bool fused, Optimizer o) {
  double b = 28;
  switch (p) {
    case Precision::kBf16Mixed:
    case Precision::kFp16Mixed:
      // DeepSpeed and Megatron step a flat fp32 partition and write the 16-bit copy back.
      b = rt.master_weights_in_optimizer ? 40 : 28;
      break;
    case Precision::kBf16:
      b = 22;
      break;
    case Precision::kBf16True:
      b = 14;
      break;
    case Precision::kFp32:
      b = 28;
      break;
  }
  // torch's foreach kernels make several passes where the fused one makes one (AdamW, Adam, SGD have fused
  // kernels); the others' traffic already counts their passes.
  const bool has_fused = o == Optimizer::kAdamW || o == Optimizer::kAdam || o == Optimizer::kSgd;
  b *= optimizer_traffic_vs_adamw(o);
  if (!fused && has_fused) b *= fw::kForeachOptimizerTrafficFactor;
  return b + fw::kGradNormBytesPerParam;
}

}  // namespace shardplan

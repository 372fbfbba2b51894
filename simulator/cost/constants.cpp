// The per-parameter byte tables of simulator/cost/constants.hpp.
#include "simulator/cost/constants.hpp"

namespace shardplan {

BytesPerParam bytes_per_param(Runtime rt, Precision p) {
  // Megatron-core (bf16-mixed only, plan.cpp): bf16 parameters in the param buffer, fp32 main_grad in the
  // grad buffer (grad_reduce_in_fp32; persistent_state uses 2 bytes when the reduce dtype is bf16), fp32 main
  // parameters + Adam exp_avg + exp_avg_sq in the distributed optimizer (distrib_optimizer.py
  // _build_model_and_main_param_groups: shard_main_param = shard_model_param.clone().float()).
  if (rt == Runtime::kMegatron) return {2, 4, 12};
  switch (p) {
    case Precision::kBf16Mixed:
      return rt == Runtime::kDeepSpeed ? BytesPerParam{2, 2, 12} : BytesPerParam{4, 4, 8};
    case Precision::kBf16:
      return {2, 2, 8};
    case Precision::kBf16True:
      return {2, 2, 4};
    case Precision::kFp32:
      return {4, 4, 8};
  }
  return {4, 4, 8};
}

double optimizer_bytes_per_param(Runtime rt, Precision p, bool fused) {
  double b = 28;
  switch (p) {
    case Precision::kBf16Mixed:
      // DeepSpeed and Megatron step a flat fp32 partition and write the 16-bit copy back.
      b = rt == Runtime::kDeepSpeed || rt == Runtime::kMegatron ? 40 : 28;
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
  if (!fused) b *= fw::kForeachOptimizerTrafficFactor;
  return b + fw::kGradNormBytesPerParam;
}

}  // namespace shardplan

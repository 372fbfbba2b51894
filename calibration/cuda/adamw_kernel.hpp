// Our multi-tensor fused AdamW kernel (one launch updates up to kMaxTensors tensors in 64 Ki-element chunks,
// as apex/PyTorch fused Adam do), for the layouts of adamw_reference.hpp. Host-callable; the math is
// adamw_math.hpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "calibration/adamw_reference.hpp"

namespace shardplan::calibration::cuda {

/// Device pointers of one tensor's state; unused fields (per layout) are null.
struct AdamwDeviceTensor {
  float* p32 = nullptr;
  float* g32 = nullptr;
  float* m32 = nullptr;
  float* v32 = nullptr;
  std::uint16_t* p16 = nullptr;  ///< bf16 param (bf16 layout) or the bf16 copy written in bf16-mixed
  std::uint16_t* g16 = nullptr;
  std::uint16_t* m16 = nullptr;
  std::uint16_t* v16 = nullptr;
  std::int64_t n = 0;
};

/// Enqueues one optimizer step over all tensors on `stream` (several launches when the list is long).
void adamw_multi_tensor_step(AdamwLayout layout, const std::vector<AdamwDeviceTensor>& tensors,
                             const AdamwStepScalars& s, cudaStream_t stream);

}  // namespace shardplan::calibration::cuda

// Error checks for CUDA runtime, cuBLASLt and NCCL calls in shardplan-calibrate: failures throw (the runner
// records them as a failed benchmark); nothing calls exit().
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace shardplan::calibration::cuda {

[[noreturn]] inline void throw_cuda(const char* what, const char* file, int line, const std::string& msg) {
  throw std::runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           msg);
}

}  // namespace shardplan::calibration::cuda

#define SP_CUDA(call)                                                                                   \
  do {                                                                                                  \
    cudaError_t sp_e_ = (call);                                                                         \
    if (sp_e_ != cudaSuccess)                                                                           \
      ::shardplan::calibration::cuda::throw_cuda(#call, __FILE__, __LINE__, cudaGetErrorString(sp_e_)); \
  } while (0)

#define SP_CUBLAS(call)                                                                     \
  do {                                                                                      \
    cublasStatus_t sp_s_ = (call);                                                          \
    if (sp_s_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::shardplan::calibration::cuda::throw_cuda(#call, __FILE__, __LINE__,                 \
                                                 "cuBLAS status " + std::to_string(sp_s_)); \
  } while (0)

// The per-element AdamW update (decoupled weight decay, bias correction, fp32 math) shared verbatim by the
// CPU reference (adamw_reference.cpp) and the CUDA kernel (cuda/adamw_kernel.cu), plus bf16 <-> fp32
// conversion.
#pragma once
#include <math.h>

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SHARDPLAN_HD __host__ __device__
#else
#define SHARDPLAN_HD
#endif

namespace shardplan::calibration {

/// Scalars of one optimizer step, computed on the host in double and rounded once to float
/// (adamw_step_scalars).
struct AdamwStepScalars {
  float lr = 0;
  float beta1 = 0;
  float beta2 = 0;
  float eps = 0;
  float weight_decay = 0;
  float step_size = 0;              ///< lr / (1 - beta1^t)
  float bias_correction2_sqrt = 0;  ///< sqrt(1 - beta2^t)
};

/// PyTorch AdamW semantics: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
SHARDPLAN_HD inline void adamw_update(float& p, float g, float& m, float& v, const AdamwStepScalars& s) {
  p = p * (1.0f - s.lr * s.weight_decay);
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  p = p - s.step_size * (m / denom);
}

/// bf16 bits -> float (exact).
SHARDPLAN_HD inline float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// float -> bf16 bits, round to nearest even (NaN stays NaN).
SHARDPLAN_HD inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

}  // namespace shardplan::calibration

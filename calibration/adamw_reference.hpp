// CPU reference of our fused AdamW for the three state layouts the calibration benchmarks, the host-side step
// scalars the CUDA kernel uses, and the bytes each layout moves per parameter (what "achieved bandwidth"
// divides).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/adamw_math.hpp"

namespace shardplan::calibration {

/// fp32: p, g, m, v fp32. bf16-mixed: fp32 master p, m, v; bf16 grad; also writes a bf16 copy of p.
/// bf16: p, g, m, v all bf16 (math in fp32).
enum class AdamwLayout { kFp32, kBf16Mixed, kBf16 };

inline constexpr const char* kAdamwLayoutNames[] = {"fp32", "bf16-mixed", "bf16"};
std::string_view adamw_layout_name(AdamwLayout layout);
std::optional<AdamwLayout> parse_adamw_layout(std::string_view name);
std::vector<std::string> adamw_layout_names();

/// Bytes read + written per parameter by one fused step (mechanics.md section 5): fp32 16+12 = 28,
/// bf16-mixed (2+4+4+4) + (4+4+4+2) = 28, bf16 8+6 = 14.
std::int64_t adamw_bytes_per_param(AdamwLayout layout);

struct AdamwHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

/// Step scalars for step t >= 1 (bias corrections in double, rounded to float once).
AdamwStepScalars adamw_step_scalars(const AdamwHyper& h, std::int64_t step);

/// Optimizer state for one tensor on the host. Fields unused by a layout stay empty.
struct AdamwHostState {
  AdamwLayout layout = AdamwLayout::kFp32;
  std::vector<float> p32, g32, m32, v32;          ///< fp32 (p32 is the master copy in bf16-mixed)
  std::vector<std::uint16_t> p16, g16, m16, v16;  ///< bf16 bits (p16: the bf16 param copy in bf16-mixed)

  std::size_t size() const;
  /// Deterministic pseudo-random state of n parameters (seeded), valid for `layout`.
  static AdamwHostState random(AdamwLayout layout, std::size_t n, std::uint32_t seed);
};

/// One AdamW step on the host, element by element with adamw_update (the same code the kernel runs).
void adamw_reference_step(AdamwHostState& st, const AdamwStepScalars& s);

/// Largest |a-b| / max(|b|, floor) over parameters (the master copy for bf16-mixed); used to compare GPU
/// results.
double adamw_max_rel_diff(const AdamwHostState& a, const AdamwHostState& b, double floor = 1e-6);

}  // namespace shardplan::calibration

// The single-GPU benchmark entries of shardplan-calibrate: HBM device-to-device copy, cuBLASLt bf16 GEMMs,
// and our fused AdamW per layout. Each returns a BenchmarkEntry whose run() stores samples in the profile.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "calibration/adamw_reference.hpp"
#include "calibration/sweep.hpp"

namespace shardplan::calibration::cuda {

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
};

/// Square grid 1024..16384 plus the transformer shapes of one layer when hidden > 0: with T tokens, hidden h,
/// MLP width f and tensor-parallel degree tp: QKV (T, 3h/tp, h), attention out (T, h, h/tp), MLP up (T, f/tp,
/// h), MLP down (T, h, f/tp).
std::vector<GemmShape> gemm_shapes(std::int64_t hidden, std::int64_t ffn, int tp, std::int64_t tokens);

BenchmarkEntry hbm_entry(const MeasureOptions& measure, std::int64_t max_bytes);
BenchmarkEntry gemm_entry(const MeasureOptions& measure, std::vector<GemmShape> shapes);
BenchmarkEntry adamw_entry(AdamwLayout layout, const MeasureOptions& measure, std::int64_t max_bytes);

/// Dense bf16 FLOP/s of device 0 from its SM count, peak clock and per-architecture FLOP/clk/SM; 0 when
/// unknown.
double device_peak_bf16_flops(std::string* how);

}  // namespace shardplan::calibration::cuda

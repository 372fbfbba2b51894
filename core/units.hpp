// Units used across shardplan. Bytes and counts are 64-bit integers; time, FLOPs and rates are doubles.
// Names carry their unit: *_bytes, *_s, *_flops, *_Bps (bytes per second), *_flops_per_s.
#pragma once
#include <cstdint>

namespace shardplan {

using Bytes = std::int64_t;

inline constexpr Bytes kKiB = Bytes{1} << 10;
inline constexpr Bytes kMiB = Bytes{1} << 20;
inline constexpr Bytes kGiB = Bytes{1} << 30;
inline constexpr Bytes kTiB = Bytes{1} << 40;
inline constexpr double kGB = 1e9;  // decimal gigabyte, as vendors and nccl-tests' GB/s use it
inline constexpr double kTFLOP = 1e12;
inline constexpr double kUs = 1e-6;  // one microsecond in seconds

}  // namespace shardplan

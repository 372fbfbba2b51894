// nccl-tests' normalisation of collective bandwidth (doc/PERFORMANCE.md), shared by the calibration benchmarks,
// the nccl-tests importer and the collective cost model. ONE definition, used everywhere.
//   algbw = S / t, where S is the size column of nccl-tests: for all-gather and reduce-scatter the WHOLE buffer
//   (count per rank x ranks x element size), for all-reduce the buffer reduced.
//   busbw = algbw x factor(kind, n).
#pragma once
#include <array>
#include <optional>
#include <string_view>

namespace shardplan {

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kReduce, kAllToAll, kSendRecv };

inline constexpr std::array<std::string_view, 7> kCollectiveNames = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "all_to_all", "send_recv"};

constexpr std::string_view collective_name(CollectiveKind k) { return kCollectiveNames[static_cast<int>(k)]; }

inline std::optional<CollectiveKind> parse_collective(std::string_view s) {
  for (std::size_t i = 0; i < kCollectiveNames.size(); ++i)
    if (kCollectiveNames[i] == s) return static_cast<CollectiveKind>(i);
  return std::nullopt;
}

/// busbw / algbw for `n` ranks (nccl-tests definitions). n = 1 gives 0 for AG/RS/AR (no data moves).
constexpr double busbw_factor(CollectiveKind k, int n) {
  const double nn = static_cast<double>(n);
  switch (k) {
    case CollectiveKind::kAllReduce: return 2.0 * (nn - 1) / nn;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return (nn - 1) / nn;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
    case CollectiveKind::kSendRecv: return 1.0;
  }
  return 1.0;
}

/// Bytes each rank sends for one collective on a whole buffer of `buffer_bytes` (ring algorithms).
constexpr double bytes_sent_per_rank(CollectiveKind k, double buffer_bytes, int n) {
  return busbw_factor(k, n) * buffer_bytes;
}

}  // namespace shardplan

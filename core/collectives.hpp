// The collective table: one entry per collective with its name and nccl-tests' bus-bandwidth normalisation
// (nccl-tests doc/PERFORMANCE.md). Shared by the calibration benchmarks, the nccl-tests importer and the
// collective cost model: ONE definition, used everywhere.
//   algbw = S / t, where S is the size column of nccl-tests: for all-gather and reduce-scatter the WHOLE
//   buffer (count per rank x ranks x element size), for all-reduce the buffer reduced. busbw = algbw x
//   busbw_factor(kind, n).
#pragma once
#include <array>
#include <optional>
#include <string_view>

namespace shardplan {

enum class CollectiveKind {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv
};

struct CollectiveInfo {
  CollectiveKind kind;
  std::string_view name;  ///< nccl-tests / profile spelling
  /// busbw / algbw for n ranks. AG/RS/AR/all-to-all move (n-1)/n of the buffer per rank per pass (AR: two
  /// passes, reduce-scatter then all-gather); broadcast, reduce and send/recv move the buffer once.
  double (*busbw_factor)(int n);
};

namespace detail {
constexpr double one_pass(int n) {
  return (static_cast<double>(n) - 1) / static_cast<double>(n);
}
constexpr double two_passes(int n) {
  return 2.0 * (static_cast<double>(n) - 1) / static_cast<double>(n);
}
constexpr double whole(int) {
  return 1.0;
}
}  // namespace detail

inline constexpr std::array<CollectiveInfo, 7> kCollectives = {{
    {CollectiveKind::kAllGather, "all_gather", detail::one_pass},
    {CollectiveKind::kReduceScatter, "reduce_scatter", detail::one_pass},
    {CollectiveKind::kAllReduce, "all_reduce", detail::two_passes},
    {CollectiveKind::kBroadcast, "broadcast", detail::whole},
    {CollectiveKind::kReduce, "reduce", detail::whole},
    {CollectiveKind::kAllToAll, "all_to_all", detail::one_pass},
    {CollectiveKind::kSendRecv, "send_recv", detail::whole},
}};

constexpr const CollectiveInfo& collective_info(CollectiveKind k) {
  return kCollectives[static_cast<int>(k)];
}
constexpr std::string_view collective_name(CollectiveKind k) {
  return collective_info(k).name;
}

inline std::optional<CollectiveKind> parse_collective(std::string_view s) {
  for (const auto& c : kCollectives)
    if (c.name == s) return c.kind;
  return std::nullopt;
}

/// busbw / algbw for `n` ranks (nccl-tests definitions). n = 1 gives 0 for AG/RS/AR (no data moves).
constexpr double busbw_factor(CollectiveKind k, int n) {
  return collective_info(k).busbw_factor(n);
}

/// Bytes each rank sends for one collective on a whole buffer of `buffer_bytes` (ring algorithms).
constexpr double bytes_sent_per_rank(CollectiveKind k, double buffer_bytes, int n) {
  return busbw_factor(k, n) * buffer_bytes;
}

}  // namespace shardplan

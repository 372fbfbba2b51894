// NCCL-like algorithm x protocol selection. Constants are NCCL 2.30.7's (mechanics.md §4.4), in microseconds.
#include "simulator/collective.hpp"

#include <algorithm>
#include <cmath>

namespace shardplan {

namespace {
enum Proto { kLL = 0, kLL128 = 1, kSimple = 2 };
constexpr const char* kProtoNames[] = {"LL", "LL128", "Simple"};
// Base latency (us): ring and tree.
constexpr double kRingBase[] = {6.6, 14.0, 8.4};
constexpr double kTreeBase[] = {6.8, 14.0, 8.4};
// Per-hop latency (us) by link type.
constexpr double kRingNvlink[] = {0.6, 1.9, 3.4};
constexpr double kRingPcie[] = {1.0, 2.5, 5.7};
constexpr double kRingNet[] = {2.7, 4.0, 14.0};
constexpr double kTreeNvlink[] = {0.6, 1.25, 4.0};
constexpr double kTreeNet[] = {5.0, 8.5, 14.0};
constexpr double kNvlsHop = 25.0;  // NVLS Simple per-hop latency, NVLink

double ll_max_Bps(GpuArch a, int nodes) {
  if (nodes > 1) return (nodes > 2 ? 20.4 : 39.0) * 1e9;  // Intel CPU table
  switch (a) {
    case GpuArch::kVolta: return 39e9;
    case GpuArch::kAmpere: return 87.7e9;
    case GpuArch::kHopper: return 141e9;
    case GpuArch::kBlackwell: return 282e9;
    default: return 87.7e9;
  }
}
}  // namespace

CollectiveCost collective_cost(CollectiveKind kind, double S, const GroupView& g, const CollectiveConstants& c) {
  CollectiveCost best;
  const int n = g.ranks;
  if (n <= 1 || S <= 0) return best;
  const bool ar = kind == CollectiveKind::kAllReduce;
  const int nodes = g.nodes;
  // Bus bandwidth of a ring: the slower of the intra-domain link and the domain's share of the network.
  const double intra = g.intra_Bps * (g.intra_nvlink ? c.nvlink_efficiency : c.pcie_efficiency);
  double bus = intra;
  if (nodes > 1) bus = std::min(bus, g.inter_Bps * c.nic_efficiency);
  if (g.ranks_per_node == 1 && nodes > 1) bus = g.inter_Bps * c.nic_efficiency;
  const double factor = busbw_factor(kind, n);
  const double* hop = g.intra_nvlink ? kRingNvlink : kRingPcie;
  const int steps = ar ? 2 * (n - 1) : (n - 1);
  const int inter_steps = nodes > 1 ? (ar ? 2 * (nodes - 1) : (nodes - 1)) : 0;
  auto consider = [&](double t_s, const char* algo, int proto) {
    if (best.algorithm == std::string("none") || t_s < best.time_s) {
      best.time_s = t_s;
      best.algorithm = algo;
      best.protocol = kProtoNames[proto];
    }
  };
  const double ll_cap = ll_max_Bps(g.arch, nodes);
  for (int p = kLL; p <= kSimple; ++p) {
    // Ring.
    double intra_lat = hop[p];
    if (nodes > 1) intra_lat = std::max(intra_lat, p == kSimple ? 3.0 : 1.0);  // netOverhead
    double inter_lat = kRingNet[p] + (p == kSimple ? 2.0 : 1.0) * g.inter_latency_s / kUs;
    double lat_us = kRingBase[p] + (steps - inter_steps) * intra_lat + inter_steps * inter_lat;
    if (ar && nodes > 1 && p == kSimple) lat_us *= 1.4;  // NCCL's multi-node ring AR plateau correction
    double bw = p == kLL ? std::min(ll_cap, 0.5 * bus) : p == kLL128 ? 0.92 * bus : bus;
    consider(lat_us * kUs + factor * S / bw, "ring", p);
    // Tree (all-reduce only, several nodes).
    if (ar && nodes > 1) {
      double tl = kTreeBase[p] + 2.0 * ((g.ranks_per_node - 1) * kTreeNvlink[p] + std::log2(nodes) * kTreeNet[p]);
      double tbw = (p == kLL ? std::min(ll_cap, bus / 3.8) : p == kLL128 ? bus * 120.0 / 128.0 : 0.92 * bus) * 0.85;
      consider(tl * kUs + S / (0.5 * tbw) * 0.5 * 2.0 * (n - 1) / n, "tree", p);
    }
  }
  // NVLS (NVLink SHARP): single domain all-reduce; the switch reduces, so each GPU moves the buffer once each way.
  if (ar && g.nvls && nodes == 1) {
    double bw = intra * 1.3;  // ~480 GB/s NVLS vs ~370 GB/s ring busbw on 8 H100 (mechanics §4.4, nccl-tests#212)
    consider(kNvlsHop * kUs + factor * S / bw, "nvls", kSimple);
  }
  return best;
}

}  // namespace shardplan

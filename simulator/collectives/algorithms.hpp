// The algorithms of NCCL's tuner as separate cost functions (internal to collectives/): each says what one
// algorithm x protocol costs on a group, as the time it takes and as what NCCL's tuner believes, and
// collective_cost (collectives.cpp) chooses among them as the tuner does.
#pragma once
#include <optional>

#include "simulator/collectives/collectives.hpp"
#include "simulator/collectives/nccl_tables.hpp"

namespace shardplan::nccl {

/// The collective and the group, as every algorithm reads them (built once per call by collective_cost).
struct Setting {
  CollectiveKind kind = CollectiveKind::kAllGather;
  double S = 0;  ///< the whole buffer, bytes
  const GroupView* g = nullptr;
  int n = 0, N = 0, ppn = 1;  ///< ranks, NVLink domains (NCCL's nNodes), ranks per domain
  int idx2 = 0;               ///< index2 of the per-channel tables: N1, N2, N4+
  int nc = 2;                 ///< channels: one per NVLink, at least 2
  int nsteps = 0;  ///< a ring's steps: 2 (n - 1) for all-reduce, n - 1 for all-gather / reduce-scatter
  bool ar = false, agrs = false, nvlink = false;
  const ArchConsts* k = nullptr;   ///< the constants the time follows
  const ArchConsts* kc = nullptr;  ///< the constants NCCL's tuner chooses with (the release's own table)
  double B_intra = 0;              ///< bandwidth of one GPU inside its domain
  double B_net = 0;                ///< network bandwidth of one domain for this group
  double lat_inter = 0;            ///< graphs[a]->latencyInter, us
  double factor = 1;               ///< nccl-tests busbw / algbw
  double ll_max = 0;               ///< llMaxBws
  RingGraph ring_graph;            ///< NCCL's ring across NVLink domains (empty on one domain)

  /// interLat: the NET row, + latencyInter, + once more for Simple's flush.
  double inter_lat(int p, double net_row) const { return net_row + lat_inter * (p == kSimple ? 2.0 : 1.0); }
  /// The tuner's own view: graphs[a]->latencyInter is the net plugin's reported latency, which NCCL's IB
  /// transport leaves at 0 ("props->latency = 0; // Not set", v2.29.2 src/transport/net_ib/init.cc;
  /// search.cc copies net->net.latency), so NCCL chooses without the fabric's path latency that the time
  /// includes (the choice/time split).
  static double inter_lat_tuner(double net_row) { return net_row; }
};

/// One algorithm x protocol: t = lat_us + S / (algbw x corr); the tuner compares choice_lat_us + S /
/// (choice_algbw x corr) (choice_algbw <= 0: algbw; choice_lat_us < 0: lat_us). They differ where a release's
/// table is not what the hardware does (Blackwell in 2.26), where the tuner counts its graph's channels
/// rather than the links (multi-node ring), and across the network, whose path latency the tuner does not
/// know.
struct Candidate {
  const char* algorithm = "none";
  int protocol = kSimple;
  double lat_us = 0, busbw = 0, algbw = 0, corr = 1;
  const char* bound = "";
  double choice_algbw = 0;
  int channels = 0;  ///< 0: Setting::nc
  double choice_lat_us = -1;
};

std::optional<Candidate> ring(const Setting& s, int p);
std::optional<Candidate> tree(const Setting& s, int p);
std::optional<Candidate> nvls(const Setting& s);
std::optional<Candidate> nvls_tree(const Setting& s);
std::optional<Candidate> collnet_chain(const Setting& s);
std::optional<Candidate> pat(const Setting& s);
/// All-to-all and send/recv: NCCL point-to-point sends, not a ring or tree algorithm (p2p.cpp).
CollectiveCost p2p_cost(const Setting& s, bool explain);

}  // namespace shardplan::nccl

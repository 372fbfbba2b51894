// All-to-all and send/recv as NCCL point-to-point sends.
#include <algorithm>
#include <string>

#include "simulator/collectives/algorithms.hpp"

namespace shardplan::nccl {

// Point-to-point collectives. PyTorch's all_to_all_single on NCCL is one ncclGroupStart() with an
// ncclSend and an ncclRecv per peer and ncclGroupEnd() (torch/csrc/cuda/nccl.cpp all2all_single_equal_split;
// builds with NCCL_ALLTOALL_SUPPORTED call ncclAllToAll, which NCCL runs as the same grouped sends;
// nccl-tests src/alltoall.cu does the same): each rank sends S/n to each of the n - 1 others, all at once.
// NCCL runs the peers of a group as concurrent p2p channels (src/enqueue.cc, p2p scheduling), so a rank's
// NVLink carries the (ppn - 1) / n of S bound for its own domain and its NIC the (n - ppn) / n bound for
// other domains, side by side: t = latency + max(intra / B_intra, inter / NIC). Context parallelism's ring
// shift (send/recv) sends S to one neighbour: over NVLink inside a domain, over the NIC across domains.
// Latency: one Simple-protocol step (kRingBase + the NVLink or network hop of tuning.cc's tables).
// nccl-tests' all-to-all busbw = algbw x (n - 1) / n (doc/PERFORMANCE.md), the one_pass factor of
// core/collectives.hpp.
CollectiveCost p2p_cost(const Setting& s, bool explain) {
  CollectiveCost c;
  const CollectiveKind kind = s.kind;
  const double S = s.S, B_intra = s.B_intra, B_net = s.B_net;
  const bool nvlink = s.nvlink;
  const GroupView& g = *s.g;
  const int n = g.ranks, N = g.nodes, ppn = std::max(1, g.ranks_per_node);
  // One NIC per GPU of the group in a domain (GroupView::rails): a GPU's share of the domain's network.
  const double nic = N > 1 ? B_net / ppn : 0;
  double intra_s = 0, inter_s = 0;
  if (kind == CollectiveKind::kAllToAll) {
    intra_s = B_intra > 0 ? S * (ppn - 1) / n / B_intra : 0;
    inter_s = N > 1 && nic > 0 ? S * (n - ppn) / n / nic : 0;
  } else if (N > 1 && nic > 0) {  // a ring neighbour: in another domain when the group spans several
    inter_s = S / std::min(B_intra > 0 ? B_intra : nic, nic);
  } else {
    intra_s = B_intra > 0 ? S / B_intra : 0;
  }
  const double lat_us = kRingBase[kSimple] + (N > 1 ? kRingNet[kSimple] + 2.0 * g.inter_latency_s / kUs
                                                    : (nvlink ? kRingNvlink : kRingPci)[kSimple]);
  c.time_s = lat_us * kUs + std::max(intra_s, inter_s);
  c.algorithm = "p2p";
  c.protocol = kProtoNames[kSimple];
  c.latency_s = lat_us * kUs;
  const double busy = std::max(intra_s, inter_s);
  c.busbw_Bps = busy > 0 ? S * busbw_factor(kind, n) / busy : 0;
  if (explain)
    c.why = std::string(kind == CollectiveKind::kAllToAll ? "all-to-all" : "send/recv") +
            " as NCCL point-to-point sends (" + std::to_string(N) + " NVLink domain" + (N > 1 ? "s" : "") +
            "); bound by " +
            (inter_s > intra_s ? "the NIC"
             : nvlink          ? "NVLink"
                               : "PCIe");
  return c;
}

}  // namespace shardplan::nccl

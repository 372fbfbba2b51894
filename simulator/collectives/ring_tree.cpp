// NCCL's ring and tree algorithms (src/graph/tuning.cc ncclTopoTuneModel / ncclTopoGetAlgoTime, NVIDIA/nccl
// v2.30 unless stated): bandwidth from the traffic each puts on its bottleneck link, latency from NCCL's
// tables.
#include <algorithm>
#include <cmath>

#include "simulator/collectives/algorithms.hpp"

namespace shardplan::nccl {

// ---- Ring: every rank sends nsteps/n of the buffer over its slowest link (intra, or the domain's NICs).
// No pipeline-fill term, unlike the tree's tree_fill_s: every rank sends its own chunk at step 0 and
// forwards its predecessor's after that (runRing in src/device/all_gather.h, reduce_scatter.h,
// all_reduce.h, NCCL 2.26/2.29), so every link is busy from the start. Only one slice hop is exposed, and
// the per-step latency counts it. docs/model.md "Ring pipeline" has the check against the H100 logs.
std::optional<Candidate> ring(const Setting& s, int p) {
  const ArchConsts& k = *s.k;
  const int N = s.N, ppn = s.ppn;
  const double bw = N > 1 ? std::min(s.B_intra, s.B_net) : s.B_intra;
  double busbw = bw;
  if (p == kLL) busbw = std::min(s.ll_max, 0.5 * bw);
  // The tuner's ring bandwidth across nodes is the ring graph's: graphs[RING]->nChannels x bwInter
  // (tuning.cc), one channel per NIC at the NIC's speed, which the search admits when NVLink carries it:
  // a channel leaves each node from its exit GPU through the NIC, so a GPU's NVLink carries only the
  // channels it does not exit, (ppn - 1) / ppn of them (search.cc). On a DGX H100: 8 x 48 = 384 GB/s.
  double choice_busbw =
      N > 1 && p == kSimple ? std::min(s.B_net, ppn > 1 ? s.B_intra * ppn / (ppn - 1.0) : s.B_net) : busbw;
  if (p == kLL128) {
    busbw = std::min(0.92 * bw, s.nc * k.ring_ll128_per_ch * 1e9);
    // The tuner caps LL128 at graphs[RING]->nChannels x perChMaxRingLL128Bw (tuning.cc). Across nodes the
    // ring graph has one channel per NIC (each channel enters and leaves the node through a NIC at the
    // NIC's speed, src/graph/search.cc; connect.cc only then doubles the channels the kernels run), so
    // NCCL chooses with rails x 36.7 GB/s on Hopper (8 x 36.7 = 293.6 GB/s on a DGX H100 against Simple's
    // 8 x 48) and moves to Simple near 0.25 GB over 10 nodes, as the 80-rank H100 logs do between 128 and
    // 256 MiB.
    const int graph_nc = N > 1 ? std::max(1, s.g->rails) : s.nc;
    choice_busbw = std::min(0.92 * bw, graph_nc * s.kc->ring_ll128_per_ch * 1e9);
  }
  // Across nodes the CTAs that run are comm->nChannels of NCCL's ring graph (ring_graph_across_nodes),
  // not one per NVLink, and one channel's NVLink hop is one CTA copying at no more than one NVLink's
  // usable bandwidth, NCCL's SMxx_NVLINK_BW (src/graph/topo.h v2.29.2: 20.6 GB/s on Hopper, 40.1 on
  // Blackwell). On a DGX H100 with 8 NICs the graph is 8 channels x 45 GB/s, doubled to 16 CTAs: 16
  // x 20.6 = 329.6 GB/s busbw, under the 370.8 of NVLink and the 384 of the NICs, where the 80-rank H100
  // logs level off (all-gather 324 GB/s at 16 GiB). One node's ring has 24 CTAs (6 x 60 GB/s, duplicated,
  // doubled), whose 494 GB/s leave NVLink the bound.
  const int ring_nc = s.ring_graph.channels;
  bool cta_bound = false;
  if (ring_nc > 0) {
    const double per_ch = (p == kLL128 ? k.ring_ll128_per_ch : k.nvlink_channel_GBps) * 1e9;
    cta_bound = p != kLL && ring_nc * per_ch < busbw;
    if (cta_bound) busbw = ring_nc * per_ch;
  }
  const double hw_intra_ring = (s.nvlink ? kRingNvlink : kRingPci)[p];
  const double net_overhead = N > 1 ? kNetOverhead * (p == kSimple ? 3.0 : 1.0) : 0.0;
  const double intra_lat = std::max(hw_intra_ring, net_overhead);
  const int inter_steps = N == 1 ? 0 : (s.ar ? 2 * (N - 1) : N - 1);
  const double net_row = ppn == 1 ? kTreeNet[p] : kRingNet[p];
  const double lat =
      kRingBase[p] + (s.nsteps - inter_steps) * intra_lat + inter_steps * s.inter_lat(p, net_row);
  // "Plateau effect of ring" (ncclTopoGetAlgoTime, src/graph/tuning.cc v2.26.2-v2.29.2): NCCL's estimate
  // of a multi-node ring Simple all-reduce multiplies the latency by 1.4 (1.9 before sm80) once each
  // channel's step holds >= 64 bytes, nBytes / (comm->nChannels x nRanks). Part of the tuner's choice.
  const double plateau =
      s.ar && p == kSimple && N > 1 && s.S / ((ring_nc > 0 ? ring_nc : s.nc) * double(s.n)) >= 64
          ? (s.g->arch == GpuArch::kVolta ? 1.9 : 1.4)
          : 1.0;
  const double lat_tuner = plateau * (kRingBase[p] + (s.nsteps - inter_steps) * intra_lat +
                                      inter_steps * Setting::inter_lat_tuner(net_row));
  Candidate c;
  c.algorithm = "ring";
  c.protocol = p;
  c.lat_us = lat;
  c.busbw = busbw;
  c.algbw = busbw / s.factor;
  c.bound = cta_bound                      ? "the ring's CTAs (NCCL's channels x one NVLink each)"
            : N > 1 && s.B_net < s.B_intra ? "the domain's NICs"
                                           : (s.nvlink ? "NVLink" : "PCIe");
  c.choice_algbw = choice_busbw / s.factor;
  c.channels = ring_nc;
  c.choice_lat_us = lat_tuner;
  return c;
}

// ---- Tree (all-reduce over several nodes): a chain inside the node, double binary tree across nodes.
// NCCL: busBw = min(0.92 x bw, nc x perChMaxTreeBw) (+ LL/LL128 limits), algbw = busBw / 2.
std::optional<Candidate> tree(const Setting& s, int p) {
  const int N = s.N, ppn = s.ppn;
  auto tree_busbw = [&](const ArchConsts& t) {
    double bw = std::min(0.92 * std::min(s.B_intra, s.B_net), s.nc * t.tree_per_ch[s.idx2] * 1e9);
    if (p == kLL) bw = std::min(bw / 3.8, s.ll_max);
    if (p == kLL128) bw = std::min(bw * 120.0 / 128.0, s.nc * t.tree_ll128_per_ch[s.idx2] * 1e9);
    return bw;
  };
  const double busbw = tree_busbw(*s.k), choice_busbw = tree_busbw(*s.kc);
  const double hw_intra_tree = (s.nvlink ? kTreeNvlink : kTreePci)[p];
  // NCCL's latency counts each hop's fixed cost; the chain also forwards whole chunks, so the last one
  // leaves the root only after the first has gone up and down the tree's depth (tree_fill_s).
  const double fill_s = tree_fill_s(tree_chunk_bytes(p, s.S, s.nc, N, ppn), s.S, s.nc, N, ppn, busbw / s.nc);
  const double lat = kTreeBase[p] +
                     2.0 * ((ppn - 1) * hw_intra_tree + log2i(N) * s.inter_lat(p, kTreeNet[p])) +
                     fill_s / kUs;
  // The choice keeps the fill, as it has since the GB200 2.26 work: without it NCCL 2.26's table would
  // pick the tree on 2 GB200 racks at 0.5-1 GiB, where the 128-rank log follows the ring's latency.
  const double lat_tuner =
      kTreeBase[p] + 2.0 * ((ppn - 1) * hw_intra_tree + log2i(N) * Setting::inter_lat_tuner(kTreeNet[p])) +
      fill_s / kUs;
  // NCCL indexes the table by floor(log2(S / 64)); interpolating between its points (linear in log2 S)
  // keeps the time monotone in S (the factor never grows faster than 1.25x per octave).
  const double x = s.S >= 64 ? std::log2(s.S / 64) : 0.0;
  double corr = 1.0;
  if (x < 23) {
    const int i = static_cast<int>(std::floor(x));
    corr = kTreeCorrection[p][i] + (x - i) * (kTreeCorrection[p][i + 1] - kTreeCorrection[p][i]);
  }
  Candidate c;
  c.algorithm = "tree";
  c.protocol = p;
  c.lat_us = lat;
  c.busbw = busbw;
  c.algbw = 0.5 * busbw;
  c.corr = corr;
  c.bound =
      busbw < 0.92 * std::min(s.B_intra, s.B_net) ? "NCCL's per-channel tree ceiling" : "the domain's NICs";
  c.choice_algbw = 0.5 * choice_busbw;
  c.choice_lat_us = lat_tuner;
  return c;
}

}  // namespace shardplan::nccl

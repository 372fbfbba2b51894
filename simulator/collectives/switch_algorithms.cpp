// NCCL's algorithms that lean on the switches or on one GPU per node: NVLS (NVLink SHARP) inside one domain,
// NVLS-tree across domains, CollNet chain (IB SHARP) and PAT (src/graph/tuning.cc, NVIDIA/nccl v2.30 unless
// stated). All Simple protocol.
#include <algorithm>

#include "simulator/collectives/algorithms.hpp"

namespace shardplan::nccl {

namespace {
Candidate simple(const char* algorithm, double lat_us, double busbw, double algbw, const char* bound,
                 int channels, double choice_lat_us) {
  Candidate c;
  c.algorithm = algorithm;
  c.protocol = kSimple;
  c.lat_us = lat_us;
  c.busbw = busbw;
  c.algbw = algbw;
  c.bound = bound;
  c.channels = channels;
  c.choice_lat_us = choice_lat_us;
  return c;
}
}  // namespace

// ---- NVLS (NVLink SHARP), one domain. All-reduce: reduce-scatter by multimem.ld_reduce (each GPU sends
// the whole buffer to the switch, receives S/n) then all-gather by multimem.st (sends S/n, receives S):
// per direction S(n+1)/n, so busbw = 2(n-1)/n x S/t = 2(n-1)/(n+1) x B. All-gather / reduce-scatter: per
// direction S(n-1)/n like the ring. B = NVLink x nvlsEfficiency.
std::optional<Candidate> nvls(const Setting& s) {
  if (!s.g->nvls || s.N != 1 || s.k->nvls_efficiency <= 0 || !(s.ar || s.agrs)) return std::nullopt;
  const int n = s.n;
  const double B = s.B_intra * s.k->nvls_efficiency;
  const double busbw = s.ar ? B * 2.0 * (n - 1) / (n + 1) : B;
  // The all-reduce's chunk pipeline (nvls_pipeline_s) adds to the time; NCCL's tuner does not count it,
  // so the choice keeps the bare 25 us. Heads: the NVLS graph's channels, one per GPU up to
  // NCCL_MAX_NVLS_ARITY 32 (src/graph/search.cc).
  const int nvls_nc = nvls_channels(s.g->arch, s.g->nccl_minor, false);
  const double pipe_s = s.ar ? nvls_pipeline_s(s.S, nvls_nc, std::min(32, s.ppn), busbw / s.factor) : 0.0;
  return simple("nvls", kNvlsIntra + pipe_s / kUs, busbw, busbw / s.factor, "NVLink SHARP (switch reduction)",
                s.ar ? nvls_nc : 0, kNvlsIntra);
}

// ---- NVLS-tree (all-reduce, several domains): NVLS inside, tree across. busbw = min(intra NVLS, NICs x
// (2 when N <= 2), NVLS channels x perChMaxNVLSTreeBw). The channels are the NVLS graph's: one per head
// GPU, each with its NIC, at most NCCL_MAX_NVLS_ARITY (32) and the node's GPUs (src/graph/search.cc
// ncclTopoCompute: "NVLS ... search must have ngpus heads at most"; src/include/device.h, NCCL 2.29.2),
// not one per NVLink; tuning.cc multiplies the per-channel ceiling by graphs[NVLS_TREE]->nChannels and
// skips NVLS-tree under 2 channels.
std::optional<Candidate> nvls_tree(const Setting& s) {
  const int N = s.N, ppn = s.ppn;
  const int nvls_nc = std::min({32, ppn, std::max(1, s.g->rails)});
  if (!s.ar || !s.g->nvls || N <= 1 || s.k->nvls_efficiency <= 0 || nvls_nc < 2) return std::nullopt;
  const double intra = s.B_intra * s.k->nvls_efficiency * 2.0 * (ppn - 1) / (ppn + 1);
  const double inter = s.B_net * (N <= 2 ? 2.0 : 1.0);
  const double cap = nvls_nc * s.k->nvls_tree_per_ch[s.idx2] * 1e9;
  const double busbw = std::min({intra, inter, cap});
  const double lat = kNvlsIntra + 2.0 * log2i(N) * s.inter_lat(kSimple, kNvlsTreeNet);
  const double lat_tuner = kNvlsIntra + 2.0 * log2i(N) * Setting::inter_lat_tuner(kNvlsTreeNet);
  return simple("nvls_tree", lat, busbw, busbw / s.factor,
                busbw == intra ? "NVLink SHARP inside the domain"
                : busbw == cap ? "NCCL's per-channel NVLS-tree ceiling"
                               : "the domain's NICs",
                nvls_nc, lat_tuner);
}

// ---- CollNet chain (IB SHARP, all-reduce): chain through the node's GPUs up and down (2S per direction
// on NVLink: algbw <= B_intra / 2), the switch reduces across nodes (S each way per NIC set).
std::optional<Candidate> collnet_chain(const Setting& s) {
  if (!s.g->sharp || !s.ar || s.N <= 1) return std::nullopt;
  const double algbw = std::min(s.B_intra / 2.0, s.B_net);
  const double lat = 2.0 * (s.ppn - 1) * kCollnetChainIntra + s.inter_lat(kSimple, kCollnetChainNet);
  return simple(
      "collnet_chain", lat, algbw * s.factor, algbw,
      s.B_intra / 2 < s.B_net ? "the NVLink chain inside the node" : "the node's NICs to the SHARP switch", 0,
      2.0 * (s.ppn - 1) * kCollnetChainIntra + Setting::inter_lat_tuner(kCollnetChainNet));
}

// ---- PAT (all-gather / reduce-scatter, one GPU per node): Bruck-like log-step exchange, busBw x 0.75.
std::optional<Candidate> pat(const Setting& s) {
  const int N = s.N, n = s.n;
  if (!s.agrs || N <= 1 || s.ppn != 1 || N != n) return std::nullopt;
  const double busbw = 0.75 * s.B_net;
  const double lat = kPatBase + log2i(N) * (s.inter_lat(kSimple, kPatNet) / 3.5) + n * 2.8;
  return simple("pat", lat, busbw, busbw / s.factor, "the NIC", 0,
                kPatBase + log2i(N) * (Setting::inter_lat_tuner(kPatNet) / 3.5) + n * 2.8);
}

}  // namespace shardplan::nccl

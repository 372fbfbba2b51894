// NCCL-like algorithm x protocol selection. Unless stated otherwise every constant is NVIDIA/nccl v2.30
// (github.com/NVIDIA/nccl, tree 5067397), src/graph/tuning.cc ncclTunerConstantsDefaults, in microseconds or
// GB/s.
#include "simulator/collectives/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <sstream>
#include <string>

#include "core/error.hpp"

namespace shardplan {

namespace {
enum Proto { kLL = 0, kLL128 = 1, kSimple = 2 };
constexpr const char* kProtoNames[] = {"LL", "LL128", "Simple"};
// baseLatencies (us) per protocol LL/LL128/Simple.
constexpr double kTreeBase[] = {6.8, 14.0, 8.4};
constexpr double kRingBase[] = {6.6, 14.0, 8.4};
constexpr double kPatBase = 8.0;
// hwLatencies (us): NVLINK, PCI, NET rows; Tree and Ring per protocol, the others Simple only.
constexpr double kTreeNvlink[] = {0.6, 1.25, 4.0};
constexpr double kRingNvlink[] = {0.6, 1.9, 3.4};
constexpr double kTreePci[] = {1.0, 1.9, 4.0};
constexpr double kRingPci[] = {1.0, 2.5, 5.7};
constexpr double kTreeNet[] = {5.0, 8.5, 14.0};
constexpr double kRingNet[] = {2.7, 4.0, 14.0};
constexpr double kCollnetChainIntra = 2.8, kCollnetChainNet = 30.0;
constexpr double kNvlsIntra = 25.0, kNvlsNet = 18.0, kNvlsTreeNet = 20.9;
constexpr double kPatIntra = 4.0, kPatNet = 14.0;
// getNetOverhead: 1 us on Intel x86 (and by default), x3 for Simple (tuning.cc).
constexpr double kNetOverhead = 1.0;

struct ArchConsts {
  double nvlink_channel_GBps;  ///< src/graph/topo.h SMxx_NVLINK_BW: NCCL's usable GB/s of one NVLink
  double nvlink_line_GBps;  ///< one NVLink's line rate per direction (NVLink 3/4: 25 GB/s, NVLink 5: 50 GB/s)
  double ll_max_n1;         ///< llMaxBws[arch][N1]
  double ring_ll128_per_ch;     ///< perChMaxRingLL128Bws
  double tree_per_ch[3];        ///< perChMaxTreeBws [N1, N2, N4+]
  double tree_ll128_per_ch[3];  ///< perChMaxTreeLL128Bws
  double nvls_tree_per_ch[3];   ///< perChMaxNVLSTreeBws
  double nvls_efficiency;       ///< nvlsEfficiency
};

// NCCL 2.26 (v2.26.2-1, src/graph/tuning.cc) tuned Blackwell as twice Hopper: perChMaxRingLL128Bws
// 2 x 36.7, perChMaxTreeLL128Bws 2 x {36.7, 36.7, 29.0}, perChMaxTreeBws 2 x {38.7, 41.4, 36.0}, llMaxBws
// 2 x Hopper; NVIDIA replaced them by the measured rows above (2.29/2.30: tree 24.0 GB/s per channel over 4+
// nodes, not 72). The tuner still *chooses* with its own release's table, while the hardware runs at what the
// later table records: collective_cost picks with these and times with the baseline (the choice/time split).
// 2.26 has no perChMaxNVLSTreeBws table (the NVLS-tree row is the baseline's and is not used for choosing).
const ArchConsts blackwell_nccl226{
    40.1, 50.0, 282.0, 73.4, {77.4, 82.8, 72.0}, {73.4, 73.4, 58.0}, {0, 96.0, 80.0}, 0.74};

const ArchConsts& arch_consts(GpuArch a) {
  static const ArchConsts volta{
      20.0, 25.0, 39.0, 20.0, {26.5, 18.5, 10.0}, {20.0, 20.0, 20.0}, {26.5, 18.5, 10.0}, 0};
  static const ArchConsts ampere{
      20.0, 25.0, 87.7, 20.0, {24.0, 23.6, 17.8}, {20.0, 20.0, 20.0}, {24.0, 23.6, 17.8}, 0};
  static const ArchConsts hopper{
      20.6, 25.0, 141.0, 36.7, {38.7, 41.4, 36.0}, {36.7, 36.7, 29.0}, {0, 57.7, 45.5}, 0.85};
  static const ArchConsts blackwell{
      40.1, 50.0, 282.0, 40.0, {70.0, 42.8, 24.0}, {55.6, 31.67, 20.0}, {0, 96.0, 80.0}, 0.74};
  switch (a) {
    case GpuArch::kVolta:
      return volta;
    case GpuArch::kAmpere:
      return ampere;
    case GpuArch::kHopper:
      return hopper;
    case GpuArch::kBlackwell:
      return blackwell;
    default:
      return ampere;
  }
}

// treeCorrectionFactor[proto][log2(bytes / 64)] for 64 B .. 256 MiB (ncclTopoGetAlgoTime, tuning.cc).
constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

int log2i(double x) {
  return x >= 1 ? static_cast<int>(std::floor(std::log2(x))) : 0;
}
}  // namespace

double tree_chunk_bytes(int protocol, double buffer_bytes, int channels, int nodes, int ranks_per_node) {
  // Per-protocol buffers (src/init.cc): Simple DEFAULT_BUFFSIZE 4 MiB; LL DEFAULT_LL_BUFFSIZE = 8
  // lines/thread x 512 threads x NCCL_STEPS x 16 B = 512 KiB; LL128 DEFAULT_LL128_BUFFSIZE = 120 elems/thread
  // x 640 threads x NCCL_STEPS x 8 B. A step is buffSize / NCCL_STEPS (8); a tree chunk is one step
  // (chunkSteps = 1 for all but ring Simple), LL carries half its bytes as data and LL128 15 of every 16
  // words (calcCollChunking).
  constexpr double kSteps = 8;
  if (protocol == kSimple) return 4194304.0 / kSteps;
  if (protocol == kLL) return 8.0 * 512 * kSteps * 16 / kSteps / 2;
  double chunk = std::floor(120.0 * 640 * kSteps * 8 / kSteps / 16) * 15;
  // Tree LL128 halves the chunk while the channels' share is short of the pipeline it must fill.
  const double ppn = std::max(1, ranks_per_node);
  const double nsteps = 1 + log2i(nodes) + 0.1 * ppn;
  const double per = buffer_bytes / std::max(1, channels);
  while (std::floor(per / chunk) < nsteps * 64 / ppn && chunk > 131072) chunk = std::floor(chunk / 2);
  while (std::floor(per / chunk) < nsteps * 16 / ppn && chunk > 32768) chunk = std::floor(chunk / 2);
  return chunk;
}

double tree_fill_s(double chunk_bytes, double buffer_bytes, int channels, int nodes, int ranks_per_node,
                   double channel_Bps) {
  if (channel_Bps <= 0) return 0;
  const int depth = std::max(0, ranks_per_node - 1) + log2i(nodes);
  const double chunk = std::min(chunk_bytes, buffer_bytes / std::max(1, channels));
  return 2.0 * depth * chunk / channel_Bps;
}

RingGraph ring_graph_across_nodes(GpuArch arch, int rails, double nic_GBps, double nvlink_GBps) {
  // Per-channel speeds the search tries, highest first (src/graph/search.cc, NVIDIA/nccl v2.29.2:
  // speedArrayInter, sm90SpeedArrayInter, sm100SpeedArrayInter).
  static constexpr double kInter[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                      7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
  static constexpr double kSm90[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                     15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
  static constexpr double kSm100[] = {96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                                      17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
  const bool hopper_up = arch == GpuArch::kHopper || arch == GpuArch::kBlackwell;  // ccMin > 80
  const std::span<const double> speeds = arch == GpuArch::kBlackwell ? std::span<const double>(kSm100)
                                         : arch == GpuArch::kHopper  ? std::span<const double>(kSm90)
                                                                     : std::span<const double>(kInter);
  // NCCL caps the search at ringGraph->maxChannels = MAXCHANNELS / 2 = 32 and comm->nChannels at MAXCHANNELS
  // 64 (src/init.cc, src/include/device.h). Like the rest of this model's channel counts (one per NVLink
  // link) these are left uncapped, so that links without limit (the simulator's invariant tests) have no
  // channel limit either; on real nodes floor(NVLink / speed) <= 31 keeps them under NCCL's caps anyway (H100
  // 370.8 / 24 = 15, B200 721.8 / 24 = 30).
  constexpr double kMaxChannels = 1e8;  // keeps 4 x channels within int
  RingGraph r;
  rails = std::max(1, rails);
  if (nic_GBps <= 0) return r;
  // The search starts at the first speed no higher than the NIC (system->maxBw) and keeps the solution
  // with the most bandwidth (nChannels x bw, search.cc ncclTopoCompareGraphs), lowering the speed while the
  // next one is more than 0.49 of the first solution's. A speed's channels: each NIC carries floor(nic /
  // speed) of them and each GPU's NVLink floor(nvlink / speed) (every channel crosses every GPU of the
  // domain once).
  double first = 0;
  for (const double s : speeds) {
    if (s > nic_GBps) continue;
    if (first > 0 && s <= 0.49 * first) break;
    double chd = std::min(kMaxChannels, rails * std::floor(nic_GBps / s));
    if (nvlink_GBps > 0) chd = std::min(chd, std::floor(nvlink_GBps / s));
    const int ch = static_cast<int>(chd);
    if (ch <= 0) continue;
    if (first == 0) first = s;
    if (ch * s > r.search_channels * r.search_GBps) {
      r.search_channels = ch;
      r.search_GBps = s;
    }
  }
  if (r.search_channels == 0) r.search_channels = 1, r.search_GBps = speeds.back();
  int ch = r.search_channels;
  double bw = r.search_GBps;
  // ncclTopoDupChannels (search.cc): doubles the graph's channels (bandwidth split among them) unless
  // bwIntra < 25, or ccMin > 80 with bwIntra < 50 and more than 4 channels.
  if (bw >= 25.0 && !(hopper_up && bw < 50.0 && ch > 4)) {
    const int dup = 2 * ch;
    bw /= (dup + ch - 1) / ch;
    ch = dup;
  }
  r.search_channels = ch;
  r.search_GBps = bw;
  // ncclTopoPostset (connect.cc): "nChannels = comm->nChannels = std::min(MAXCHANNELS,nChannels*2)", then
  // "Use 4 compute channels per search channel to reach peak BW on <8 PPN": minCompCap >= 90, nNodes > 1,
  // graphs[RING]->bwIntra > 45 and nChannels < 16 double again.
  int comm_ch = 2 * ch;
  if (hopper_up && bw > 45.0 && comm_ch < 16) comm_ch = 2 * comm_ch;
  r.channels = comm_ch;
  return r;
}

int nvls_channels(GpuArch arch, int nccl_minor, bool multi_domain) {
  if (arch != GpuArch::kBlackwell) return 16;         // NVLS_NCHANNELS_SM90
  return multi_domain || nccl_minor <= 26 ? 32 : 24;  // NVLS_NCHANNELS_SM100 / _SM100_NVL (2.27+)
}

double nvls_chunk_bytes(double channel_bytes, int heads) {
  const double h = std::max(1, heads);
  double chunk = 131072;  // NVLS_CHUNKSIZE default (src/transport/nvls.cc)
  if (channel_bytes < 64 * h * chunk && chunk > 65536) chunk = 65536;
  if (channel_bytes < 8 * h * chunk && chunk > 32768) chunk = 32768;
  if (channel_bytes < 2 * h * chunk && chunk > 16384) chunk = 16384;
  return chunk;
}

// Hand-over cost of one NVLS all-reduce iteration (heads x chunk of one channel). Not in NCCL's tuner; fitted
// with everything else NCCL's (latency 25 us, NVLink x nvlsEfficiency 0.85, 16 channels, calcCollChunking's
// chunk) by
//   python3 tools/fit_nvls_chunk.py tests/data/nccl-tests/dev/all_reduce_8ranks_h100_xxrjun.log
// 2.04 us; the 10 sizes 32 MiB - 16 GiB are then within -2.6 .. +1.9 % (median 1.4 %; without it 5.9 %, worst
// -20.8 %). The chunk schedule places the log's steps: 32 KiB at 32 MiB, 64 KiB up to 512 MiB, 128 KiB from
// 1 GiB, where the error without it jumps from -8.2 to -3.6 %.
constexpr double kNvlsIterationSync_s = 2.04e-6;

double nvls_pipeline_s(double buffer_bytes, int channels, int heads, double algbw_Bps) {
  if (buffer_bytes <= 0 || algbw_Bps <= 0) return 0;
  const int nc = std::max(1, channels), h = std::max(1, heads);
  // One iteration of every channel: heads x chunk each.
  const double loop_bytes = nc * h * nvls_chunk_bytes(buffer_bytes / nc, h);
  const double iterations = std::ceil(buffer_bytes / loop_bytes);
  // (iterations + 1) x (loop / algbw + sync) against the tuner's S / algbw: the bytes of the fill iteration
  // (no more than the buffer) and a hand-over per iteration.
  return std::min(loop_bytes, buffer_bytes) / algbw_Bps + (iterations + 1) * kNvlsIterationSync_s;
}

CollectiveAlgorithms CollectiveAlgorithms::parse(const std::string& list) {
  std::string s = list;
  const bool negate = !s.empty() && s[0] == '^';
  if (negate) s = s.substr(1);
  CollectiveAlgorithms a;
  if (!negate) a = {false, false, false, false, false, false};
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    for (auto& ch : tok) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    bool* f = tok == "ring"                                                         ? &a.ring
              : tok == "tree"                                                       ? &a.tree
              : tok == "nvls"                                                       ? &a.nvls
              : tok == "nvlstree" || tok == "nvls_tree"                             ? &a.nvls_tree
              : tok == "collnet" || tok == "collnetchain" || tok == "collnetdirect" ? &a.collnet
              : tok == "pat"                                                        ? &a.pat
                                                                                    : nullptr;
    if (!f)
      throw InputError::flag("--algo",
                             "unknown algorithm \"" + tok +
                                 "\"; expected ring, tree, nvls, nvlstree, collnetchain, pat (NCCL_ALGO)");
    *f = !negate;
  }
  return a;
}

double nccl_tests_iteration_s(double collective_s, int gpus_per_thread, double launch_s_per_gpu) {
  return std::max(collective_s, std::max(1, gpus_per_thread) * launch_s_per_gpu);
}

GroupView with_ranks(const GroupView& g, int ranks) {
  GroupView r = g;
  r.ranks = std::max(1, ranks);
  r.ranks_per_node = std::min(g.ranks_per_node, r.ranks);
  r.nodes = (r.ranks + r.ranks_per_node - 1) / r.ranks_per_node;
  const int per_host = std::max(1, std::min(r.ranks_per_node, g.ranks / std::max(1, g.hosts)));
  r.hosts = (r.ranks + per_host - 1) / per_host;
  r.nvls = g.nvls && r.ranks_per_node > 2;
  if (r.nodes > 1 && r.rails == 0) r.rails = std::max(1, r.ranks_per_node);
  if (r.nodes > 1 && r.inter_Bps == 0) r.inter_Bps = r.rails * r.rail_Bps;
  return r;
}

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
static CollectiveCost p2p_cost(CollectiveKind kind, double S, const GroupView& g, double B_intra,
                               double B_net, bool nvlink, bool explain) {
  CollectiveCost c;
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

CollectiveCost collective_cost(CollectiveKind kind, double S, const GroupView& g,
                               const CollectiveConstants& c, bool explain) {
  CollectiveCost best;
  const int n = g.ranks;
  if (n <= 1 || S <= 0) return best;
  const bool ar = kind == CollectiveKind::kAllReduce;
  const bool agrs = kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter;
  const int N = g.nodes;  // NCCL's nNodes: with MNNVL the NVLink clique is one node (src/graph/topo.cc)
  const int ppn = std::max(1, g.ranks_per_node);
  const int idx2 = N <= 2 ? N - 1 : 2;  // index2 of the per-channel tables: N1, N2, N4+
  const ArchConsts& k = arch_consts(g.arch);
  // The constants NCCL's tuner chooses with (the release's own table) next to those the time follows.
  const ArchConsts& kc = g.arch == GpuArch::kBlackwell && g.nccl_minor <= 26 ? blackwell_nccl226 : k;
  const CollectiveAlgorithms& allow = c.algorithms;

  // Bandwidth of one GPU inside its domain. NVLink: NCCL's per-link figure times the links
  // (nvlink_Bps / line rate per link), i.e. the SM-limited payload ceiling (~80 % of line rate); PCIe:
  // NCCL's PCI_BW 12 GB/s per Gen3 x16 (topo.h) scaled to the link: 12/16 of line rate.
  const bool nvlink = g.intra_nvlink && g.intra_Bps > 0;
  const double links = nvlink ? g.intra_Bps / (k.nvlink_line_GBps * 1e9) : 1.0;
  const double B_intra =
      nvlink ? g.intra_Bps * k.nvlink_channel_GBps / k.nvlink_line_GBps : g.intra_Bps * 12.0 / 16.0;
  // Channels: one per NVLink (NCCL's search gives each channel one link's bandwidth, src/graph/search.cc), at
  // least 2 (NCCL's minimum, NCCL_MIN_NCHANNELS default in src/graph/connect.cc).
  const int nc = std::max(2, static_cast<int>(std::lround(links)));
  // Network bandwidth of one domain for this group: one NIC per member (rails), each at its achievable rate.
  const double B_net = N > 1 ? std::max(1, g.rails) * g.rail_Bps : 0;
  const double lat_inter = g.inter_latency_s / kUs;  // graphs[a]->latencyInter

  const char* best_bound = "";
  bool found = false;
  double best_choice_s = 0, fastest_s = 0;
  // choice_algbw / choice_lat_us: the algorithm bandwidth and latency NCCL's tuner believes, which decide;
  // the time is computed with algbw and lat_us. They differ where a release's table is not what the hardware
  // does (Blackwell in 2.26), where the tuner counts its graph's channels rather than the links (multi-node
  // ring), and across the network, whose path latency the tuner does not know (IB reports 0).
  auto consider = [&](const char* algo, int p, double lat_us, double busbw, double algbw, double corr,
                      const char* bound, double choice_algbw = 0, int channels = 0,
                      double choice_lat_us = -1) {
    if (algbw <= 0) return;
    if (choice_algbw <= 0) choice_algbw = algbw;
    if (choice_lat_us < 0) choice_lat_us = lat_us;
    const double t = lat_us * kUs + S / (algbw * corr);
    const double t_choice = choice_lat_us * kUs + S / (choice_algbw * corr);
    fastest_s = found ? std::min(fastest_s, t) : t;
    if (!found || t_choice < best_choice_s) {
      found = true;
      best_choice_s = t_choice;
      best.time_s = t;
      best.algorithm = algo;
      best.protocol = kProtoNames[p];
      best.busbw_Bps = busbw;
      best.latency_s = lat_us * kUs;
      best.channels = channels > 0 ? channels : nc;
      best_bound = bound;
    }
  };

  // All-to-all and send/recv are NCCL point-to-point operations, not ring/tree algorithms (see
  // p2p_cost below).
  if (kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kSendRecv)
    return p2p_cost(kind, S, g, B_intra, B_net, nvlink, explain);

  const int nsteps = ar ? 2 * (n - 1) : n - 1;
  const double factor = busbw_factor(kind, n);  // nccl-tests busbw / algbw (= nsteps / n for ring)
  const double ll_max =
      (N == 1 ? k.ll_max_n1 : (N == 2 ? 39.0 : 20.4)) * 1e9;  // llMaxBws (Intel rows for N>1)

  // NCCL's ring across NVLink domains (ring_graph_across_nodes); empty on one domain or without NVLink hops.
  const RingGraph ring_graph = N > 1 && ppn > 1 && nvlink
                                   ? ring_graph_across_nodes(g.arch, g.rails, g.rail_Bps / 1e9, B_intra / 1e9)
                                   : RingGraph{};
  for (int p = kLL; p <= kSimple; ++p) {
    // LL128 is on by default over NVLink on Hopper/Blackwell, and on Ampere/Volta single-node NVLink
    // (tuning.cc: typeIntra <= PATH_NVB, typeInter <= PATH_PXN for sm90+, PATH_PXB otherwise).
    if (p == kLL128 && (!nvlink || (N > 1 && (g.arch == GpuArch::kAmpere || g.arch == GpuArch::kVolta))))
      continue;
    // NICs behind the CPU's C2C link (GB200): up to NCCL 2.26 the GPU-to-NIC path is PATH_PHB (v2.26.2-1
    // src/graph/paths.cc: NCCL_NET_GDR_C2C defaults to 0), beyond LL128's typeInter <= PATH_PXN
    // (src/graph/tuning.cc), so no LL128 across nodes; 2.27 added "support for P2C (PXN over C2C) and the
    // LL128 protocol" on C2C platforms (v2.27.3-1 release notes) and NET_GDR_C2C defaults to 1.
    if (p == kLL128 && N > 1 && g.nic_behind_c2c && g.nccl_minor <= 26) continue;
    const double hw_intra_ring = (nvlink ? kRingNvlink : kRingPci)[p];
    const double hw_intra_tree = (nvlink ? kTreeNvlink : kTreePci)[p];
    // interLat: NET row (the tree's when one GPU per node), + latencyInter, + once more for Simple's flush.
    auto inter_lat = [&](double net_row) { return net_row + lat_inter * (p == kSimple ? 2.0 : 1.0); };
    // The tuner's own view: graphs[a]->latencyInter is the net plugin's reported latency, which NCCL's IB
    // transport leaves at 0 ("props->latency = 0; // Not set", v2.29.2 src/transport/net_ib/init.cc;
    // search.cc copies net->net.latency), so NCCL chooses without the fabric's path latency that the time
    // includes (the choice/time split).
    auto inter_lat_tuner = [&](double net_row) { return net_row; };

    // ---- Ring: every rank sends nsteps/n of the buffer over its slowest link (intra, or the domain's NICs).
    // No pipeline-fill term, unlike the tree's tree_fill_s: every rank sends its own chunk at step 0 and
    // forwards its predecessor's after that (runRing in src/device/all_gather.h, reduce_scatter.h,
    // all_reduce.h, NCCL 2.26/2.29), so every link is busy from the start. Only one slice hop is exposed, and
    // the per-step latency counts it. docs/model.md "Ring pipeline" has the check against the H100 logs.
    if (allow.ring) {
      const double bw = N > 1 ? std::min(B_intra, B_net) : B_intra;
      double busbw = bw;
      if (p == kLL) busbw = std::min(ll_max, 0.5 * bw);
      // The tuner's ring bandwidth across nodes is the ring graph's: graphs[RING]->nChannels x bwInter
      // (tuning.cc), one channel per NIC at the NIC's speed, which the search admits when NVLink carries it:
      // a channel leaves each node from its exit GPU through the NIC, so a GPU's NVLink carries only the
      // channels it does not exit, (ppn - 1) / ppn of them (search.cc). On a DGX H100: 8 x 48 = 384 GB/s.
      double choice_busbw =
          N > 1 && p == kSimple ? std::min(B_net, ppn > 1 ? B_intra * ppn / (ppn - 1.0) : B_net) : busbw;
      if (p == kLL128) {
        busbw = std::min(0.92 * bw, nc * k.ring_ll128_per_ch * 1e9);
        // The tuner caps LL128 at graphs[RING]->nChannels x perChMaxRingLL128Bw (tuning.cc). Across nodes the
        // ring graph has one channel per NIC (each channel enters and leaves the node through a NIC at the
        // NIC's speed, src/graph/search.cc; connect.cc only then doubles the channels the kernels run), so
        // NCCL chooses with rails x 36.7 GB/s on Hopper (8 x 36.7 = 293.6 GB/s on a DGX H100 against Simple's
        // 8 x 48) and moves to Simple near 0.25 GB over 10 nodes, as the 80-rank H100 logs do between 128 and
        // 256 MiB.
        const int graph_nc = N > 1 ? std::max(1, g.rails) : nc;
        choice_busbw = std::min(0.92 * bw, graph_nc * kc.ring_ll128_per_ch * 1e9);
      }
      // Across nodes the CTAs that run are comm->nChannels of NCCL's ring graph (ring_graph_across_nodes),
      // not one per NVLink, and one channel's NVLink hop is one CTA copying at no more than one NVLink's
      // usable bandwidth, NCCL's SMxx_NVLINK_BW (src/graph/topo.h v2.29.2: 20.6 GB/s on Hopper, 40.1 on
      // Blackwell). On a DGX H100 with 8 NICs the graph is 8 channels x 45 GB/s, doubled to 16 CTAs: 16
      // x 20.6 = 329.6 GB/s busbw, under the 370.8 of NVLink and the 384 of the NICs, where the 80-rank H100
      // logs level off (all-gather 324 GB/s at 16 GiB). One node's ring has 24 CTAs (6 x 60 GB/s, duplicated,
      // doubled), whose 494 GB/s leave NVLink the bound.
      const int ring_nc = ring_graph.channels;
      bool cta_bound = false;
      if (ring_nc > 0) {
        const double per_ch = (p == kLL128 ? k.ring_ll128_per_ch : k.nvlink_channel_GBps) * 1e9;
        cta_bound = p != kLL && ring_nc * per_ch < busbw;
        if (cta_bound) busbw = ring_nc * per_ch;
      }
      const double net_overhead = N > 1 ? kNetOverhead * (p == kSimple ? 3.0 : 1.0) : 0.0;
      const double intra_lat = std::max(hw_intra_ring, net_overhead);
      const int inter_steps = N == 1 ? 0 : (ar ? 2 * (N - 1) : N - 1);
      const double net_row = ppn == 1 ? kTreeNet[p] : kRingNet[p];
      const double lat = kRingBase[p] + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat(net_row);
      // "Plateau effect of ring" (ncclTopoGetAlgoTime, src/graph/tuning.cc v2.26.2-v2.29.2): NCCL's estimate
      // of a multi-node ring Simple all-reduce multiplies the latency by 1.4 (1.9 before sm80) once each
      // channel's step holds >= 64 bytes, nBytes / (comm->nChannels x nRanks). Part of the tuner's choice.
      const double plateau =
          ar && p == kSimple && N > 1 && S / ((ring_nc > 0 ? ring_nc : nc) * double(n)) >= 64
              ? (g.arch == GpuArch::kVolta ? 1.9 : 1.4)
              : 1.0;
      const double lat_tuner = plateau * (kRingBase[p] + (nsteps - inter_steps) * intra_lat +
                                          inter_steps * inter_lat_tuner(net_row));
      consider("ring", p, lat, busbw, busbw / factor, 1.0,
               cta_bound                  ? "the ring's CTAs (NCCL's channels x one NVLink each)"
               : N > 1 && B_net < B_intra ? "the domain's NICs"
                                          : (nvlink ? "NVLink" : "PCIe"),
               choice_busbw / factor, ring_nc, lat_tuner);
    }
    // ---- Tree (all-reduce over several nodes): a chain inside the node, double binary tree across nodes.
    // NCCL: busBw = min(0.92 x bw, nc x perChMaxTreeBw) (+ LL/LL128 limits), algbw = busBw / 2.
    if (allow.tree && ar && N > 1) {
      auto tree_busbw = [&](const ArchConsts& t) {
        double bw = std::min(0.92 * std::min(B_intra, B_net), nc * t.tree_per_ch[idx2] * 1e9);
        if (p == kLL) bw = std::min(bw / 3.8, ll_max);
        if (p == kLL128) bw = std::min(bw * 120.0 / 128.0, nc * t.tree_ll128_per_ch[idx2] * 1e9);
        return bw;
      };
      const double busbw = tree_busbw(k), choice_busbw = tree_busbw(kc);
      // NCCL's latency counts each hop's fixed cost; the chain also forwards whole chunks, so the last one
      // leaves the root only after the first has gone up and down the tree's depth (tree_fill_s).
      const double fill_s = tree_fill_s(tree_chunk_bytes(p, S, nc, N, ppn), S, nc, N, ppn, busbw / nc);
      const double lat =
          kTreeBase[p] + 2.0 * ((ppn - 1) * hw_intra_tree + log2i(N) * inter_lat(kTreeNet[p])) + fill_s / kUs;
      // The choice keeps the fill, as it has since the GB200 2.26 work: without it NCCL 2.26's table would
      // pick the tree on 2 GB200 racks at 0.5-1 GiB, where the 128-rank log follows the ring's latency.
      const double lat_tuner = kTreeBase[p] +
                               2.0 * ((ppn - 1) * hw_intra_tree + log2i(N) * inter_lat_tuner(kTreeNet[p])) +
                               fill_s / kUs;
      // NCCL indexes the table by floor(log2(S / 64)); interpolating between its points (linear in log2 S)
      // keeps the time monotone in S (the factor never grows faster than 1.25x per octave).
      const double x = S >= 64 ? std::log2(S / 64) : 0.0;
      double corr = 1.0;
      if (x < 23) {
        const int i = static_cast<int>(std::floor(x));
        corr = kTreeCorrection[p][i] + (x - i) * (kTreeCorrection[p][i + 1] - kTreeCorrection[p][i]);
      }
      consider(
          "tree", p, lat, busbw, 0.5 * busbw, corr,
          busbw < 0.92 * std::min(B_intra, B_net) ? "NCCL's per-channel tree ceiling" : "the domain's NICs",
          0.5 * choice_busbw, 0, lat_tuner);
    }
    if (p != kSimple) continue;
    // ---- NVLS (NVLink SHARP), one domain. All-reduce: reduce-scatter by multimem.ld_reduce (each GPU sends
    // the whole buffer to the switch, receives S/n) then all-gather by multimem.st (sends S/n, receives S):
    // per direction S(n+1)/n, so busbw = 2(n-1)/n x S/t = 2(n-1)/(n+1) x B. All-gather / reduce-scatter: per
    // direction S(n-1)/n like the ring. B = NVLink x nvlsEfficiency.
    if (allow.nvls && g.nvls && N == 1 && k.nvls_efficiency > 0 && (ar || agrs)) {
      const double B = B_intra * k.nvls_efficiency;
      const double busbw = ar ? B * 2.0 * (n - 1) / (n + 1) : B;
      // The all-reduce's chunk pipeline (nvls_pipeline_s) adds to the time; NCCL's tuner does not count it,
      // so the choice keeps the bare 25 us. Heads: the NVLS graph's channels, one per GPU up to
      // NCCL_MAX_NVLS_ARITY 32 (src/graph/search.cc).
      const int nvls_nc = nvls_channels(g.arch, g.nccl_minor, false);
      const double pipe_s = ar ? nvls_pipeline_s(S, nvls_nc, std::min(32, ppn), busbw / factor) : 0.0;
      consider("nvls", p, kNvlsIntra + pipe_s / kUs, busbw, busbw / factor, 1.0,
               "NVLink SHARP (switch reduction)", 0, ar ? nvls_nc : 0, kNvlsIntra);
    }
    // ---- NVLS-tree (all-reduce, several domains): NVLS inside, tree across. busbw = min(intra NVLS, NICs x
    // (2 when N <= 2), NVLS channels x perChMaxNVLSTreeBw). The channels are the NVLS graph's: one per head
    // GPU, each with its NIC, at most NCCL_MAX_NVLS_ARITY (32) and the node's GPUs (src/graph/search.cc
    // ncclTopoCompute: "NVLS ... search must have ngpus heads at most"; src/include/device.h, NCCL 2.29.2),
    // not one per NVLink; tuning.cc multiplies the per-channel ceiling by graphs[NVLS_TREE]->nChannels and
    // skips NVLS-tree under 2 channels.
    const int nvls_nc = std::min({32, ppn, std::max(1, g.rails)});
    if (allow.nvls_tree && ar && g.nvls && N > 1 && k.nvls_efficiency > 0 && nvls_nc >= 2) {
      const double intra = B_intra * k.nvls_efficiency * 2.0 * (ppn - 1) / (ppn + 1);
      const double inter = B_net * (N <= 2 ? 2.0 : 1.0);
      const double cap = nvls_nc * k.nvls_tree_per_ch[idx2] * 1e9;
      const double busbw = std::min({intra, inter, cap});
      const double lat = kNvlsIntra + 2.0 * log2i(N) * inter_lat(kNvlsTreeNet);
      const double lat_tuner = kNvlsIntra + 2.0 * log2i(N) * inter_lat_tuner(kNvlsTreeNet);
      consider("nvls_tree", p, lat, busbw, busbw / factor, 1.0,
               busbw == intra ? "NVLink SHARP inside the domain"
               : busbw == cap ? "NCCL's per-channel NVLS-tree ceiling"
                              : "the domain's NICs",
               0, nvls_nc, lat_tuner);
    }
    // ---- CollNet chain (IB SHARP, all-reduce): chain through the node's GPUs up and down (2S per direction
    // on NVLink: algbw <= B_intra / 2), the switch reduces across nodes (S each way per NIC set).
    if (allow.collnet && g.sharp && ar && N > 1) {
      const double algbw = std::min(B_intra / 2.0, B_net);
      const double lat = 2.0 * (ppn - 1) * kCollnetChainIntra + inter_lat(kCollnetChainNet);
      consider(
          "collnet_chain", p, lat, algbw * factor, algbw, 1.0,
          B_intra / 2 < B_net ? "the NVLink chain inside the node" : "the node's NICs to the SHARP switch", 0,
          0, 2.0 * (ppn - 1) * kCollnetChainIntra + inter_lat_tuner(kCollnetChainNet));
    }
    // ---- PAT (all-gather / reduce-scatter, one GPU per node): Bruck-like log-step exchange, busBw x 0.75.
    if (allow.pat && agrs && N > 1 && ppn == 1 && N == n) {
      const double busbw = 0.75 * B_net;
      const double lat = kPatBase + log2i(N) * (inter_lat(kPatNet) / 3.5) + n * 2.8;
      (void)kPatIntra;
      consider("pat", p, lat, busbw, busbw / factor, 1.0, "the NIC", 0, 0,
               kPatBase + log2i(N) * (inter_lat_tuner(kPatNet) / 3.5) + n * 2.8);
    }
    (void)kNvlsNet;
  }
  if (found && explain)
    best.why = std::string(best.algorithm) + " " + best.protocol +
               (best.time_s > fastest_s
                    ? " as NCCL 2." + std::to_string(g.nccl_minor) +
                          "'s tuner chooses (its tables and graph; another algorithm would be faster)"
                    : std::string(" fastest of the algorithms NCCL enables here")) +
               " (" + std::to_string(N) + " NVLink domain" + (N > 1 ? "s" : "") + ", " + std::to_string(ppn) +
               " rank" + (ppn > 1 ? "s" : "") + " each); bound by " + best_bound;
  return best;
}

}  // namespace shardplan

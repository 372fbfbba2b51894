// The time of one collective as NCCL runs it: the algorithm x protocol NCCL's tuner picks (algorithms.hpp,
// one file per algorithm family: ring_tree.cpp, switch_algorithms.cpp, p2p.cpp; shapes in graphs.cpp;
// tables in nccl_tables.hpp/.cpp), NCCL_ALGO parsing, and nccl-tests' iteration time.
#include "simulator/collectives/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "simulator/collectives/algorithms.hpp"

namespace shardplan {

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

namespace {

/// The collective and the group as NCCL's tuner sees them (nccl::Setting).
nccl::Setting make_setting(CollectiveKind kind, double S, const GroupView& g) {
  using namespace nccl;
  Setting s;
  s.kind = kind;
  s.S = S;
  s.g = &g;
  s.n = g.ranks;
  s.ar = kind == CollectiveKind::kAllReduce;
  s.agrs = kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter;
  s.N = g.nodes;  // NCCL's nNodes: with MNNVL the NVLink clique is one node (src/graph/topo.cc)
  s.ppn = std::max(1, g.ranks_per_node);
  s.idx2 = s.N <= 2 ? s.N - 1 : 2;
  s.k = &arch_consts(g.arch);
  // The constants NCCL's tuner chooses with (the release's own table) next to those the time follows.
  s.kc = g.arch == GpuArch::kBlackwell && g.nccl_minor <= 26 ? &blackwell_nccl226() : s.k;
  // Bandwidth of one GPU inside its domain. NVLink: NCCL's per-link figure times the links
  // (nvlink_Bps / line rate per link), i.e. the SM-limited payload ceiling (~80 % of line rate); PCIe:
  // NCCL's PCI_BW 12 GB/s per Gen3 x16 (topo.h) scaled to the link: 12/16 of line rate.
  s.nvlink = g.intra_nvlink && g.intra_Bps > 0;
  const double links = s.nvlink ? g.intra_Bps / (s.k->nvlink_line_GBps * 1e9) : 1.0;
  s.B_intra =
      s.nvlink ? g.intra_Bps * s.k->nvlink_channel_GBps / s.k->nvlink_line_GBps : g.intra_Bps * 12.0 / 16.0;
  // Channels: one per NVLink (NCCL's search gives each channel one link's bandwidth, src/graph/search.cc), at
  // least 2 (NCCL's minimum, NCCL_MIN_NCHANNELS default in src/graph/connect.cc).
  s.nc = std::max(2, static_cast<int>(std::lround(links)));
  // Network bandwidth of one domain for this group: one NIC per member (rails), each at its achievable rate.
  s.B_net = s.N > 1 ? std::max(1, g.rails) * g.rail_Bps : 0;
  s.lat_inter = g.inter_latency_s / kUs;  // graphs[a]->latencyInter
  s.nsteps = s.ar ? 2 * (s.n - 1) : s.n - 1;
  s.factor = busbw_factor(kind, s.n);  // nccl-tests busbw / algbw (= nsteps / n for ring)
  s.ll_max = (s.N == 1 ? s.k->ll_max_n1 : (s.N == 2 ? 39.0 : 20.4)) * 1e9;  // llMaxBws (Intel rows for N>1)
  // NCCL's ring across NVLink domains (ring_graph_across_nodes); empty on one domain or without NVLink hops.
  if (s.N > 1 && s.ppn > 1 && s.nvlink)
    s.ring_graph = ring_graph_across_nodes(g.arch, g.rails, g.rail_Bps / 1e9, s.B_intra / 1e9);
  return s;
}

/// LL128 is on by default over NVLink on Hopper/Blackwell, and on Ampere/Volta single-node NVLink
/// (tuning.cc: typeIntra <= PATH_NVB, typeInter <= PATH_PXN for sm90+, PATH_PXB otherwise). NICs behind the
/// CPU's C2C link (GB200): up to NCCL 2.26 the GPU-to-NIC path is PATH_PHB (v2.26.2-1 src/graph/paths.cc:
/// NCCL_NET_GDR_C2C defaults to 0), beyond LL128's typeInter <= PATH_PXN (src/graph/tuning.cc), so no LL128
/// across nodes; 2.27 added "support for P2C (PXN over C2C) and the LL128 protocol" on C2C platforms
/// (v2.27.3-1 release notes) and NET_GDR_C2C defaults to 1.
bool ll128_enabled(const nccl::Setting& s) {
  const GroupView& g = *s.g;
  if (!s.nvlink || (s.N > 1 && (g.arch == GpuArch::kAmpere || g.arch == GpuArch::kVolta))) return false;
  return !(s.N > 1 && g.nic_behind_c2c && g.nccl_minor <= 26);
}

/// The tuner's pick: the candidate whose believed time is least; its real time, and the fastest real time.
struct Choice {
  nccl::Candidate best;
  double best_choice_s = 0, best_time_s = 0, fastest_s = 0;
  bool found = false;
  void consider(const nccl::Setting& s, const std::optional<nccl::Candidate>& c) {
    if (!c || c->algbw <= 0) return;
    const double choice_algbw = c->choice_algbw <= 0 ? c->algbw : c->choice_algbw;
    const double choice_lat_us = c->choice_lat_us < 0 ? c->lat_us : c->choice_lat_us;
    const double t = c->lat_us * kUs + s.S / (c->algbw * c->corr);
    const double t_choice = choice_lat_us * kUs + s.S / (choice_algbw * c->corr);
    fastest_s = found ? std::min(fastest_s, t) : t;
    if (!found || t_choice < best_choice_s) {
      found = true;
      best_choice_s = t_choice;
      best_time_s = t;
      best = *c;
    }
  }
};

}  // namespace

// Collective cost model after NCCL's own tuner (ncclTopoTuneModel and ncclTopoGetAlgoTime): every algorithm
// NCCL would enable (algorithms.hpp) at every protocol, and the one its tuner believes fastest wins.
CollectiveCost collective_cost(CollectiveKind kind, double S, const GroupView& g,
                               const CollectiveConstants& c, bool explain) {
  CollectiveCost out;
  if (g.ranks <= 1 || S <= 0) return out;
  const nccl::Setting s = make_setting(kind, S, g);
  // All-to-all and send/recv are NCCL point-to-point operations, not ring/tree algorithms (p2p.cpp).
  if (kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kSendRecv)
    return nccl::p2p_cost(s, explain);
  const CollectiveAlgorithms& allow = c.algorithms;
  Choice ch;
  for (int p = nccl::kLL; p <= nccl::kSimple; ++p) {
    if (p == nccl::kLL128 && !ll128_enabled(s)) continue;
    if (allow.ring) ch.consider(s, nccl::ring(s, p));
    if (allow.tree && s.ar && s.N > 1) ch.consider(s, nccl::tree(s, p));
    if (p != nccl::kSimple) continue;
    if (allow.nvls) ch.consider(s, nccl::nvls(s));
    if (allow.nvls_tree) ch.consider(s, nccl::nvls_tree(s));
    if (allow.collnet) ch.consider(s, nccl::collnet_chain(s));
    if (allow.pat) ch.consider(s, nccl::pat(s));
  }
  if (!ch.found) return out;
  const nccl::Candidate& b = ch.best;
  out.time_s = ch.best_time_s;
  out.algorithm = b.algorithm;
  out.protocol = nccl::kProtoNames[b.protocol];
  out.busbw_Bps = b.busbw;
  out.latency_s = b.lat_us * kUs;
  out.channels = b.channels > 0 ? b.channels : s.nc;
  if (explain)
    out.why = std::string(b.algorithm) + " " + out.protocol +
              (out.time_s > ch.fastest_s
                   ? " as NCCL 2." + std::to_string(g.nccl_minor) +
                         "'s tuner chooses (its tables and graph; another algorithm would be faster)"
                   : std::string(" fastest of the algorithms NCCL enables here")) +
              " (" + std::to_string(s.N) + " NVLink domain" + (s.N > 1 ? "s" : "") + ", " +
              std::to_string(s.ppn) + " rank" + (s.ppn > 1 ? "s" : "") + " each); bound by " + b.bound;
  return out;
}

}  // namespace shardplan

// The NCCL-like collective cost model (collective.cpp, mechanics.md §4.4) on groups of real cluster presets:
// the large-buffer ring formula, all-reduce vs reduce-scatter, intra- vs inter-node, monotonicity in bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json_reader.hpp"
#include "sim_helpers.hpp"

using namespace shardplan;

namespace {
constexpr double kGiBd = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiBd = 1024.0 * 1024.0;
}  // namespace

TEST_CASE("group views of a DGX H100 cluster", "[simulator][collective][cluster]") {
  // dgx-h100: NVLink 450 GB/s per GPU per direction through the NVSwitch; 8 NICs of 50 GB/s, each behind a
  // PCIe link of 64 GB/s. Inside a node the widest GPU-GPU path is NVLink (450e9). Across nodes the widest
  // path is GPU -PCIe 64e9- NIC -50e9- leaf -50e9- NIC -PCIe- GPU ⇒ 50e9 per rail, 8 rails ⇒ 400e9 per node;
  // its latency is the four links' 1 µs each = 4 µs.
  Cluster one(load_cluster_spec("dgx-h100"), 8), eight(load_cluster_spec("dgx-h100"), 64);
  GroupView g8 = one.group(8, 1);
  CHECK(g8.ranks == 8);
  CHECK(g8.nodes == 1);
  CHECK(g8.intra_Bps == 450e9);
  CHECK(g8.intra_nvlink);
  CHECK(g8.nvls);
  GroupView g64 = eight.group(64, 1);
  CHECK(g64.nodes == 8);
  CHECK(g64.ranks_per_node == 8);
  CHECK(g64.inter_Bps == 400e9);
  CHECK(g64.inter_latency_s == Approx(4e-6));
  // Hosts = NVLink domains on a DGX; each rail reaches nic_Bps x nic_efficiency = 50e9 x 0.96 = 48e9.
  CHECK(g64.hosts == 8);
  CHECK(g64.rails == 8);
  CHECK(g64.rail_Bps == Approx(48e9));
  // Stride 8 (one rank per node, e.g. the HSDP replicate group of shard 8): 8 nodes, 1 rank each.
  GroupView r = eight.group(8, 8);
  CHECK(r.nodes == 8);
  CHECK(r.ranks_per_node == 1);
}

TEST_CASE("ring all-gather on a large buffer equals the NCCL-style formula", "[simulator][collective]") {
  Cluster cl(load_cluster_spec("dgx-h100"), 8);
  const GroupView g = cl.group(8, 1);
  const double S = 4 * kGiBd;
  // collective.cpp constants (NCCL 2.30.7 tuning.cc): ring Simple base 8.4 µs, NVLink hop 3.4 µs; the
  // bus bandwidth is NVLink × nvlink_efficiency = 450e9 × 0.824 = 370.8e9 B/s. n = 8 ⇒ n−1 = 7 steps:
  //   latency = 8.4 + 7 · 3.4 = 32.2 µs
  //   t = 32.2e-6 + (7/8) · 4 GiB / 370.8e9 = 32.2e-6 + 0.875 · 4,294,967,296 / 370.8e9 ≈ 10.1670 ms
  // LL (bw capped at 141e9 on Hopper), LL128 (0.92 × bus) and NVLS (370.8e9 × 0.85, 25 µs) are slower here.
  const double expected = 32.2e-6 + 7.0 / 8.0 * S / (450e9 * 0.824);
  CollectiveCost c = collective_cost(CollectiveKind::kAllGather, S, g);
  CHECK(c.time_s == Approx(expected).epsilon(1e-12));
  CHECK(std::string(c.algorithm) == "ring");
  CHECK(std::string(c.protocol) == "Simple");
  CHECK(c.time_s == Approx(10.1670e-3).epsilon(1e-4));
  // The CostModel without a calibration profile gives the same number.
  CostModel cm(cl);
  CHECK(cm.collective_s(CollectiveKind::kAllGather, S, g) == Approx(expected).epsilon(1e-12));
  // Reduce-scatter has the same ring cost (same steps, same factor (n−1)/n).
  CHECK(collective_cost(CollectiveKind::kReduceScatter, S, g).time_s == Approx(expected).epsilon(1e-12));
  // No pipeline fill on the ring (every rank sends its own chunk at step 0, NCCL runRing). At 32 MiB each
  // rank's per-channel share is below one 2 MiB chunk, and the time is still latency + bytes / bandwidth:
  //   32.2e-6 + 0.875 · 33,554,432 / 370.8e9 = 32.2 µs + 79.18 µs = 111.38 µs.
  const double S32 = 32.0 * 1048576;
  CHECK(collective_cost(CollectiveKind::kAllGather, S32, g).time_s ==
        Approx(32.2e-6 + 7.0 / 8.0 * S32 / (450e9 * 0.824)).epsilon(1e-12));
  CHECK(collective_cost(CollectiveKind::kAllGather, S32, g).time_s == Approx(111.38e-6).epsilon(1e-4));
}

TEST_CASE("ring all-gather across 8 nodes equals the NCCL-style formula", "[simulator][collective]") {
  Cluster cl(load_cluster_spec("dgx-h100"), 64);
  const GroupView g = cl.group(64, 1);
  const double S = 8 * kGiBd;
  // n = 64 ranks on 8 nodes: 63 steps of which 7 cross the network.
  //   bus = min(NVLink 450e9 × 20.6/25 = 370.8e9, 8 rails × 50e9 × nic_efficiency 0.96 = 384e9,
  //             16 CTAs × SM90_NVLINK_BW 20.6e9 = 329.6e9) = 329.6e9
  //   (NCCL's ring graph across nodes: 8 channels × 45 GB/s, doubled by ncclTopoPostset to 16, see
  //   ring_graph_across_nodes below)
  //   intra hop (Simple) = max(3.4, netOverhead 3.0) = 3.4 µs; inter hop = 14 + 2 × 4 µs path latency = 22 µs
  //   latency = 8.4 + 56 · 3.4 + 7 · 22 = 8.4 + 190.4 + 154 = 352.8 µs
  //   t = 352.8e-6 + (63/64) · 8 GiB / 329.6e9
  // LL128 (latency 14 + 56·1.9 + 7·(4 + 4) = 176.4 µs, bw 0.92 × 370.8e9) loses above ~0.7 GB; LL is capped
  // at 20.4e9 B/s (> 2 nodes).
  const double expected = 352.8e-6 + 63.0 / 64.0 * S / 329.6e9;
  CollectiveCost c = collective_cost(CollectiveKind::kAllGather, S, g);
  CHECK(c.time_s == Approx(expected).epsilon(1e-12));
  CHECK(std::string(c.protocol) == "Simple");
  CHECK(c.channels == 16);
  CHECK(c.busbw_Bps == Approx(329.6e9));
}

TEST_CASE("across nodes NCCL's tuner picks LL128 or Simple with its ring graph and without fabric latency",
          "[simulator][collective]") {
  // 80 ranks on 10 DGX H100 nodes (NCCL 2.29's tuner, tuning.cc). The ring graph has one channel per NIC:
  // 8 channels × bwInter 48 GB/s = 384e9 for Simple (NVLink carries the 7 of 8 channels a GPU does not exit:
  // 370.8e9 × 8/7 = 423.8e9 ≥ 384e9), LL128 min(0.92 × 370.8e9, 8 × perChMaxRingLL128Bw 36.7e9 = 293.6e9).
  // Its latencies leave out the fabric (the IB plugin reports latency 0): LL128 14 + 70 · 1.9 + 9 · 4.0 = 183
  // µs, Simple 8.4 + 70 · 3.4 + 9 · 14 = 372.4 µs. Crossover: 189.4e-6 = S · 79/80 · (1/293.6e9 − 1/384e9)
  // ⇒ S = 239 MB: LL128 at 128 MiB, Simple at 256 MiB (the 80-rank all-gather log jumps there, 841 → 1766
  // µs). The time is the hardware's: Simple at 16 CTAs × 20.6e9 = 329.6e9 (NCCL's 16 ring channels, one
  // NVLink's usable bandwidth each) with the fabric's 4 µs path latency counted twice per network step,
  // 8.4 + 70 · 3.4 + 9 · (14 + 2 · 4) = 444.4 µs, although LL128 would be faster.
  Cluster cl(load_cluster_spec("dgx-h100"), 80);
  const GroupView g = cl.group(80, 1);
  REQUIRE(g.nodes == 10);
  CollectiveCost small = collective_cost(CollectiveKind::kAllGather, 128.0 * kMiBd, g);
  CHECK(std::string(small.algorithm) == "ring");
  CHECK(std::string(small.protocol) == "LL128");
  const double S = 256.0 * kMiBd;
  CollectiveCost big = collective_cost(CollectiveKind::kAllGather, S, g);
  CHECK(std::string(big.protocol) == "Simple");
  CHECK(big.time_s == Approx(444.4e-6 + 79.0 / 80.0 * S / 329.6e9).epsilon(1e-9));
  CHECK(big.why.find("tuner chooses") != std::string::npos);
  // Just below and above the crossover.
  CHECK(std::string(collective_cost(CollectiveKind::kAllGather, 236e6, g).protocol) == "LL128");
  CHECK(std::string(collective_cost(CollectiveKind::kAllGather, 243e6, g).protocol) == "Simple");
}

TEST_CASE("all-reduce costs twice a reduce-scatter on a ring, NVLS and NVLS-tree change the ratio",
          "[simulator][collective]") {
  // Ring all-reduce = reduce-scatter + all-gather: 2(n−1)/n · S / bus vs (n−1)/n · S / bus; the latencies
  // are negligible at 16 GiB. An 8-GPU A100 node has no NVLS: ratio 2.
  const double S = 16 * kGiBd;
  Cluster a100(load_cluster_spec("dgx-a100-80g"), 8), h100(load_cluster_spec("dgx-h100"), 64);
  {
    const GroupView g = a100.group(8, 1);
    const double ar = collective_cost(CollectiveKind::kAllReduce, S, g).time_s;
    const double rs = collective_cost(CollectiveKind::kReduceScatter, S, g).time_s;
    CHECK(ar / rs == Approx(2.0).epsilon(0.01));
  }
  // NVLS one-shot inside an H100 node: reduce-scatter by multimem.ld_reduce (each GPU sends S, receives S/n),
  // all-gather by multimem.st (sends S/n, receives S): S(n+1)/n per direction, so busbw = 2(n−1)/(n+1) · B
  // with B = 370.8e9 × nvlsEfficiency 0.85 = 315.18e9 ⇒ 14/9 · 315.18e9 = 490.28e9. AR / RS = (14/8 /
  // 490.28e9) / (7/8 / 370.8e9) = 2 · 370.8 / 490.28 ≈ 1.5126 (latencies 25 vs 32.2 µs are negligible at 16
  // GiB). The all-reduce's chunk pipeline (nvls_pipeline_s) adds, at 16 GiB: 16 channels, 8 heads, chunk 128
  // KiB (1 GiB a channel ≥ 64 · 8 · 128 KiB), loop 16 MiB ⇒ 1024 iterations: 16 MiB / 280.16e9 (algbw =
  // 490.28e9 · 8/14) + 1025 · 2.04 µs = 59.88 + 2091.0 µs, +3.4 % of the 62.0 ms.
  Cluster node(load_cluster_spec("dgx-h100"), 8);
  const GroupView g = node.group(8, 1);
  CollectiveCost ar = collective_cost(CollectiveKind::kAllReduce, S, g);
  CHECK(std::string(ar.algorithm) == "nvls");
  CHECK(ar.busbw_Bps == Approx(14.0 / 9.0 * 370.8e9 * 0.85));
  CHECK(ar.channels == 16);
  const double algbw = 14.0 / 9.0 * 370.8e9 * 0.85 * 8.0 / 14.0;
  const double pipe = 16 * kMiBd / algbw + 1025 * 2.04e-6;
  CHECK(ar.time_s == Approx(25e-6 + S / algbw + pipe).epsilon(1e-9));
  CHECK(ar.time_s / collective_cost(CollectiveKind::kReduceScatter, S, g).time_s ==
        Approx(2 * 370.8 / (14.0 / 9.0 * 370.8 * 0.85) * (1 + pipe / (S / algbw))).epsilon(0.002));
  // 64 ranks on 8 nodes: NVLS-tree, busbw = min(NVLS inside 490.28e9, NICs 8 × 48e9 = 384e9 (N > 2: x1),
  // 8 NVLS channels (one head GPU and NIC each; NCCL's NVLS graph has at most the node's 8 GPUs) ×
  // perChMaxNVLSTreeBw[Hopper][N4+] 45.5e9 = 364e9) = 364e9. Latency 25 + 2 · log2i(8) · (20.9 + 2 · 4) =
  // 198.4 µs. The ring all-reduce runs at busbw 16 CTAs × 20.6e9 = 329.6e9, latency 8.4 + 112 · 3.4 + 14 ·
  // (14 + 2 · 4) = 697.2 µs. NCCL's tuner compares NVLS-tree (no fabric latency: 25 + 6 · 20.9 = 150.4 µs,
  // 364e9) with its ring graph (8 × 48e9 = 384e9; latency 8.4 + 112 · 3.4 + 14 · 14 = 585.2 µs × 1.4, the
  // "plateau effect of ring" = 819.3 µs): NVLS-tree below S = 668.9e-6 / (126/64 · (1/364e9 − 1/384e9)) =
  // 2.37e9 B, the ring above, as at 16 GiB, where the ring's AR / RS ratio is 2 again (up to the latencies)
  // although NVLS-tree would be faster there (93.12 ms vs 103.3 ms).
  const GroupView g64 = h100.group(64, 1);
  const double S1 = kGiBd;
  CollectiveCost ar64 = collective_cost(CollectiveKind::kAllReduce, S1, g64);
  CHECK(std::string(ar64.algorithm) == "nvls_tree");
  CHECK(ar64.busbw_Bps == Approx(364e9));
  CHECK(ar64.channels == 8);
  CHECK(ar64.time_s == Approx(198.4e-6 + 126.0 / 64.0 * S1 / 364e9).epsilon(1e-9));
  CollectiveCost ar64_large = collective_cost(CollectiveKind::kAllReduce, S, g64);
  CHECK(std::string(ar64_large.algorithm) == "ring");
  CHECK(ar64_large.time_s == Approx(697.2e-6 + 126.0 / 64.0 * S / 329.6e9).epsilon(1e-9));
  CHECK(ar64_large.why.find("tuner chooses") != std::string::npos);
  CHECK(
      ar64_large.time_s / collective_cost(CollectiveKind::kReduceScatter, S, g64).time_s ==
      Approx((697.2e-6 + 126.0 / 64.0 * S / 329.6e9) / (352.8e-6 + 63.0 / 64.0 * S / 329.6e9)).epsilon(1e-9));
  CHECK(std::string(collective_cost(CollectiveKind::kAllReduce, 2.30e9, g64).algorithm) == "nvls_tree");
  CHECK(std::string(collective_cost(CollectiveKind::kAllReduce, 2.45e9, g64).algorithm) == "ring");
}

TEST_CASE("tree, CollNet chain and PAT follow NCCL's formulas", "[simulator][collective]") {
  const double S = 8 * kGiBd;
  // Tree on 20 GB200 NVL72 racks (1440 ranks): busbw = min(0.92 × min(NVLink 900e9 × 40.1/50 = 721.8e9,
  // NICs), 18 channels × perChMaxTreeBws[Blackwell][N4] 24e9 = 432e9) = 432e9; NCCL's algbw is busBw / 2.
  Cluster gb(load_cluster_spec("gb200-nvl72-multirack"), 1440);
  CollectiveConstants tree_only;
  tree_only.algorithms = CollectiveAlgorithms::parse("tree");
  CollectiveCost t = collective_cost(CollectiveKind::kAllReduce, S, gb.group(1440, 1), tree_only);
  CHECK(std::string(t.algorithm) == "tree");
  CHECK(t.busbw_Bps == Approx(432e9));
  // 20 racks > 8 per leaf: the path crosses the spine, 6 links of 1 µs (PCIe, NIC-leaf, leaf-spine, back).
  // latency (Simple) = 8.4 + 2 · ((72 − 1) · 4.0 + log2i(20) = 4 · (14 + 2 · 6 µs)) = 8.4 + 2 · (284 + 104),
  // plus the pipeline fill: 2 × depth (71 + 4) × one 512 KiB chunk at 432e9 / 18 channels = 24e9 a channel.
  CHECK(t.latency_s == Approx((8.4 + 2 * (71 * 4.0 + 4 * 26.0)) * 1e-6 + 2.0 * 75 * 524288 / 24e9));
  CHECK(t.time_s ==
        Approx(t.latency_s + S / (0.5 * 432e9)).epsilon(1e-9));  // correction factor 1 above 256 MiB
  // CollNet chain (IB SHARP) on 12 H100 nodes: the chain carries S up and S down each NVLink direction
  // (algbw ≤ 370.8e9 / 2), the switch reduces across nodes (algbw ≤ 384e9): algbw 185.4e9.
  ClusterSpec sharp = load_cluster_spec("dgx-h100");
  sharp.fabric.sharp = true;
  Cluster h(sharp, 96);
  CollectiveConstants collnet;
  collnet.algorithms = CollectiveAlgorithms::parse("collnetchain");
  CollectiveCost c = collective_cost(CollectiveKind::kAllReduce, S, h.group(96, 1), collnet);
  CHECK(std::string(c.algorithm) == "collnet_chain");
  // latency = 2 · 7 · 2.8 + (30 + 2 · 4) = 77.2 µs
  CHECK(c.time_s == Approx(77.2e-6 + S / 185.4e9).epsilon(1e-9));
  // PAT: one GPU per node (stride 8), all-gather; latency 8 + log2i(16) · (14 + 2·4)/3.5 + 16 · 2.8 µs, busbw
  // 0.75 × one rail (48e9). It wins for small buffers (ring: 15 steps × (14 + 8) µs), the ring for large
  // ones.
  Cluster h16(load_cluster_spec("dgx-h100"), 128);
  const GroupView r = h16.group(16, 8);
  CollectiveCost small = collective_cost(CollectiveKind::kAllGather, 64 * 1024, r);
  CHECK(std::string(small.algorithm) == "pat");
  CHECK(small.latency_s == Approx((8 + 4 * 22.0 / 3.5 + 16 * 2.8) * 1e-6));
  CHECK(std::string(collective_cost(CollectiveKind::kAllGather, S, r).algorithm) == "ring");
}

TEST_CASE("8 ranks in one node beat 64 ranks on 8 nodes for the same bytes per rank",
          "[simulator][collective]") {
  // Same per-rank shard b: the 8-way buffer is 8b, the 64-way one 64b. Intra: 32.2 µs + 7b / 370.8e9;
  // inter: 352.8 µs + 63b / 370.8e9 ⇒ strictly slower at every size (both terms larger).
  Cluster one(load_cluster_spec("dgx-h100"), 8), eight(load_cluster_spec("dgx-h100"), 64);
  const GroupView g8 = one.group(8, 1), g64 = eight.group(64, 1);
  for (double b = 1024; b <= kGiBd; b *= 4) {
    INFO("bytes per rank " << b);
    for (CollectiveKind k : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter})
      CHECK(collective_cost(k, 8 * b, g8).time_s < collective_cost(k, 64 * b, g64).time_s);
    // All-reduce: each rank holds the whole buffer, so "same bytes per rank" is the same S.
    CHECK(collective_cost(CollectiveKind::kAllReduce, b, g8).time_s <
          collective_cost(CollectiveKind::kAllReduce, b, g64).time_s);
  }
}

TEST_CASE("collective time is monotone in bytes", "[simulator][collective]") {
  // Each (algorithm, protocol) time is latency + S / bw, increasing in S; the chosen time is their minimum,
  // which is then non-decreasing too, except where NCCL's tuner chooses with its own table and that choice is
  // not the fastest (the multi-node LL128 cap, rails x perChMaxRingLL128Bw): the time may then drop only
  // where the choice moves on from such a slower pick, as NCCL's measured times do at its protocol switches.
  // Sweep 1 B .. 64 GiB in 1/16-octave steps over several group shapes.
  Cluster h1(load_cluster_spec("dgx-h100"), 8), h8(load_cluster_spec("dgx-h100"), 64),
      big(load_cluster_spec("dgx-h100"), 512), a100(load_cluster_spec("dgx-a100-40g"), 16);
  std::vector<GroupView> groups = {h1.group(8, 1),  h1.group(2, 1),    h8.group(64, 1),   h8.group(8, 8),
                                   h8.group(16, 1), big.group(512, 1), a100.group(16, 1), a100.group(2, 8)};
  for (const auto& g : groups)
    for (CollectiveKind k :
         {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
      double prev = 0;
      std::string prev_pick, prev_why;
      for (double S = 1; S <= 64 * kGiBd; S *= std::pow(2.0, 1.0 / 16)) {
        const CollectiveCost c = collective_cost(k, S, g);
        const double t = c.time_s;
        const std::string pick = std::string(c.algorithm) + " " + c.protocol;
        const bool tuner_pick_ends = pick != prev_pick && prev_why.find("tuner chooses") != std::string::npos;
        // NVLS all-reduce in one domain: the chunk doubles at calcCollChunking's thresholds, halving the
        // iterations and their hand-overs (nvls_pipeline_s), so the time steps down there as NCCL's does.
        const int nvls_nc = nvls_channels(g.arch, g.nccl_minor, false),
                  heads = std::min(32, g.ranks_per_node);
        const bool nvls_chunk_step = pick == "nvls Simple" && prev_pick == pick &&
                                     nvls_chunk_bytes(S / nvls_nc, heads) !=
                                         nvls_chunk_bytes(S / std::pow(2.0, 1.0 / 16) / nvls_nc, heads);
        prev_pick = pick;
        prev_why = c.why;
        if (t < prev && !tuner_pick_ends && !nvls_chunk_step) {
          FAIL_CHECK("time drops from " << prev << " to " << t << " s at " << S << " B, ranks " << g.ranks
                                        << " nodes " << g.nodes << " kind " << collective_name(k));
          break;
        }
        prev = t;
      }
    }
}

TEST_CASE("one rank or no bytes cost nothing", "[simulator][collective]") {
  Cluster cl(load_cluster_spec("dgx-h100"), 8);
  CHECK(collective_cost(CollectiveKind::kAllGather, 1e9, cl.group(1, 1)).time_s == 0);
  CHECK(collective_cost(CollectiveKind::kAllReduce, 0, cl.group(8, 1)).time_s == 0);
}

TEST_CASE("with unbounded bandwidth only NCCL's fixed latencies remain", "[simulator][collective]") {
  // Bandwidth 1e18 B/s and zero link latency: the hardware-independent base and per-hop latencies of
  // collective.cpp still apply (they are NCCL's tuning constants, not link properties). 8 ranks in a node:
  //   ring LL     6.6 + 7·0.6 = 10.8 µs, but LL's bandwidth is capped at 141e9 (Hopper llMaxBw)
  //   ring LL128  14 + 7·1.9  = 27.3 µs with ~infinite bandwidth (0.92 × 0.824e18)
  //   ring Simple 8.4 + 7·3.4 = 32.2 µs with ~infinite bandwidth
  //   NVLS        25 µs (Simple only) with ~infinite bandwidth
  // ⇒ tiny buffers cost 10.8 µs, and no buffer costs more than 25 µs (+ 1 GiB / 2.6e17 ≈ 4 ns).
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  spec.node.nvlink_Bps = spec.node.nic_Bps = spec.node.pcie_Bps = 1e18;
  spec.node.nvlink_latency_s = 0;
  spec.fabric.latency_s = 0;
  Cluster cl(spec, 8);
  const GroupView g = cl.group(8, 1);
  CHECK(collective_cost(CollectiveKind::kAllGather, 1024, g).time_s == Approx(10.8e-6).epsilon(1e-3));
  CHECK(collective_cost(CollectiveKind::kAllGather, kGiBd, g).time_s == Approx(25e-6).epsilon(1e-3));
  CHECK(collective_cost(CollectiveKind::kAllGather, 64 * kGiBd, g).time_s <= 25.3e-6);
}

TEST_CASE("nccl-tests period with several GPUs per launching thread", "[simulator][collective]") {
  // nccl-tests' BenchTime issues `iters` groups without synchronising, one launch per GPU of the thread, so
  // the period is max(GPU time, GPUs per thread x launch cost). With 5 us per launch and -g 8: 40 us.
  CHECK(nccl_tests_iteration_s(10e-6, 8, 5e-6) == Approx(40e-6).epsilon(1e-12));    // host-bound
  CHECK(nccl_tests_iteration_s(100e-6, 8, 5e-6) == Approx(100e-6).epsilon(1e-12));  // GPU-bound
  // One GPU per process (-g 1): the floor is a single launch, under any collective of >= 1 MiB.
  CHECK(nccl_tests_iteration_s(10e-6, 1, 5e-6) == Approx(10e-6).epsilon(1e-12));
  CHECK(nccl_tests_iteration_s(2e-6, 1, 5e-6) == Approx(5e-6).epsilon(1e-12));
  // A header that says nGpus 0 counts as one GPU.
  CHECK(nccl_tests_iteration_s(2e-6, 0, 5e-6) == Approx(5e-6).epsilon(1e-12));
}

TEST_CASE("NVLS all-reduce chunk pipeline: chunk sizes and channels as NCCL's calcCollChunking and nvls.cc",
          "[simulator][collective]") {
  // calcCollChunking's NVLS branch (v2.26.2-1 = v2.29.2-1 src/enqueue.cc) per channel part with 8 heads:
  // 128 KiB from 64 · 8 · 128 KiB = 64 MiB a channel, 64 KiB from 8 · 8 · 64 KiB = 4 MiB, 32 KiB from
  // 2 · 8 · 32 KiB = 512 KiB, else 16 KiB.
  CHECK(nvls_chunk_bytes(64 * kMiBd, 8) == 131072.0);
  CHECK(nvls_chunk_bytes(64 * kMiBd - 1, 8) == 65536.0);
  CHECK(nvls_chunk_bytes(4 * kMiBd, 8) == 65536.0);
  CHECK(nvls_chunk_bytes(4 * kMiBd - 1, 8) == 32768.0);
  CHECK(nvls_chunk_bytes(512 * 1024.0, 8) == 32768.0);
  CHECK(nvls_chunk_bytes(512 * 1024.0 - 1, 8) == 16384.0);
  // 4 heads halve the thresholds: 32 MiB a channel keeps 128 KiB.
  CHECK(nvls_chunk_bytes(32 * kMiBd, 4) == 131072.0);
  // NVLS channels (src/transport/nvls.cc): SM90 16; SM100 32 in 2.26, 24 inside one domain from 2.27.
  CHECK(nvls_channels(GpuArch::kHopper, 29, false) == 16);
  CHECK(nvls_channels(GpuArch::kBlackwell, 26, false) == 32);
  CHECK(nvls_channels(GpuArch::kBlackwell, 29, false) == 24);
  CHECK(nvls_channels(GpuArch::kBlackwell, 29, true) == 32);
  // 32 MiB on 8 H100s: 2 MiB a channel ⇒ 32 KiB chunks, loop 16 · 8 · 32 KiB = 4 MiB, 8 iterations: fill
  // 4 MiB / algbw + 9 hand-overs of 2.04 µs. At 512 MiB (32 MiB a channel, 64 KiB, loop 8 MiB, 64
  // iterations): 8 MiB / algbw + 65 · 2.04 µs.
  const double algbw = 280.16e9;
  CHECK(nvls_pipeline_s(32 * kMiBd, 16, 8, algbw) == Approx(4 * kMiBd / algbw + 9 * 2.04e-6));
  CHECK(nvls_pipeline_s(512 * kMiBd, 16, 8, algbw) == Approx(8 * kMiBd / algbw + 65 * 2.04e-6));
  // A buffer smaller than one loop fills only itself: 1 MiB (64 KiB a channel, 16 KiB chunks, loop 2 MiB).
  CHECK(nvls_pipeline_s(kMiBd, 16, 8, algbw) == Approx(kMiBd / algbw + 2 * 2.04e-6));
  // In collective_cost: NCCL's tuner chooses without it (25 µs), the time carries it. 32 MiB on a DGX H100:
  // 25 µs + 32 MiB / 280.16e9 (119.77 µs) + 14.97 + 18.36 µs = 178.1 µs (the log measures 182.87 µs).
  Cluster node(load_cluster_spec("dgx-h100"), 8);
  const CollectiveCost c = collective_cost(CollectiveKind::kAllReduce, 32 * kMiBd, node.group(8, 1));
  CHECK(std::string(c.algorithm) == "nvls");
  CHECK(c.time_s == Approx(25e-6 + 32 * kMiBd / (370.8e9 * 0.85 * 8 / 9) +
                           nvls_pipeline_s(32 * kMiBd, 16, 8, 370.8e9 * 0.85 * 8 / 9))
                        .epsilon(1e-9));
  CHECK(c.time_s == Approx(178.1e-6).epsilon(1e-3));
}

TEST_CASE("tree all-reduce pipeline fill: chunk sizes and depth as NCCL's calcCollChunking",
          "[simulator][collective]") {
  // Simple: a tree chunk is one step of the 4 MiB buffer, 4 MiB / NCCL_STEPS (8) = 512 KiB, whatever the
  // size.
  CHECK(tree_chunk_bytes(2, 16 * kGiBd, 16, 10, 8) == 524288.0);
  CHECK(tree_chunk_bytes(2, 64.0 * 1024 * 1024, 16, 10, 8) == 524288.0);
  // LL: 8 lines x 512 threads x 8 steps x 16 B = 512 KiB buffer, 64 KiB a step, half of it data: 32 KiB.
  CHECK(tree_chunk_bytes(0, 16 * kGiBd, 16, 10, 8) == 32768.0);
  // LL128: 120 x 640 x 8 x 8 B = 4,915,200 B buffer, 614,400 a step, 15 of 16 words data: 576,000 B. With
  // 1 GiB per channel nothing halves it.
  CHECK(tree_chunk_bytes(1, 16 * kGiBd, 16, 10, 8) == 576000.0);
  // 32 MiB over 16 channels, 10 nodes x 8: nsteps = 1 + log2i(10) + 0.8 = 4.8; 2 MiB per channel holds
  // 3 chunks of 576,000 < 4.8 x 64 / 8 = 38.4, so it halves while above 128 KiB: 288,000 (7), 144,000 (14),
  // 72,000; then 29 chunks >= 4.8 x 16 / 8 = 9.6 keeps 72,000.
  CHECK(tree_chunk_bytes(1, 32.0 * 1024 * 1024, 16, 10, 8) == 72000.0);
  // Fill: 2 x depth x chunk / per-channel rate. GB200 NVL72 x 20 racks: depth = 71 + log2i(20) = 75, 512 KiB
  // chunks at 24 GB/s a channel (perChMaxTreeBw, Blackwell N4+): 150 x 21.845 us = 3.277 ms.
  CHECK(tree_fill_s(524288, 16 * kGiBd, 18, 20, 72, 24e9) == Approx(150 * 524288 / 24e9).epsilon(1e-12));
  // A channel's share below one chunk fills with its share: 1 MiB over 16 channels = 64 KiB.
  CHECK(tree_fill_s(524288, 1048576, 16, 2, 8, 40e9) == Approx(2.0 * 8 * 65536 / 40e9).epsilon(1e-12));
  // One rank per node on 2 nodes: depth 0 + 1.
  CHECK(tree_fill_s(524288, 16 * kGiBd, 8, 2, 1, 40e9) == Approx(2.0 * 524288 / 40e9).epsilon(1e-12));
}

TEST_CASE("NCCL 2.26 on GB200: no LL128 over C2C NICs, the tuner chooses with its own table",
          "[simulator][collective]") {
  // The CoreWeave GB200 runs used NCCL 2.26.2. Two mechanisms of that release (collective.cpp):
  //  - NICs on the Grace CPU behind NVLink-C2C are PATH_PHB to the GPU (NCCL_NET_GDR_C2C = 0 by default),
  //  beyond
  //    LL128's typeInter <= PATH_PXN: no LL128 across racks (2.27 added it).
  //  - NCCL 2.26 tuned Blackwell as twice Hopper (tree 2 x 36.0 GB/s a channel over 4+ nodes) and chooses
  //  with
  //    that; the time follows the measured row of 2.29/2.30 (24.0 GB/s a channel).
  ClusterSpec spec = load_cluster_spec("gb200-nvl72-multirack");
  REQUIRE(spec.node.nic_behind_c2c);
  spec.fabric.nccl_version = "2.26.2";
  Cluster old_nccl(spec, 1440), new_nccl(load_cluster_spec("gb200-nvl72-multirack"), 1440);
  const GroupView g26 = old_nccl.group(1440, 1), g30 = new_nccl.group(1440, 1);
  CHECK(g26.nccl_minor == 26);
  CHECK(g30.nccl_minor == 30);
  // Ring only, 1 GiB. 20 racks cross the spine: latencyInter 6 µs (see the tree test above).
  //   LL128 (2.30): 14 + (2878 − 38) · 1.9 + 38 · (4.0 + 6) = 5790 µs, busbw min(0.92 · 721.8e9, 18 · 40e9)
  //                 = 664.06e9 → algbw 664.06e9 · 1440 / 2878 = 332.26e9: 5.790 ms + 3.232 ms = 9.02 ms;
  //   Simple:       8.4 + 2840 · 3.4 + 38 · (14 + 2 · 6) = 10652.4 µs, algbw 721.8e9 · 1440 / 2878.
  CollectiveConstants ring;
  ring.algorithms = CollectiveAlgorithms::parse("ring");
  const double G = kGiBd;
  CollectiveCost r30 = collective_cost(CollectiveKind::kAllReduce, G, g30, ring);
  CHECK(std::string(r30.protocol) == "LL128");
  CHECK(r30.time_s == Approx(5790e-6 + G / (664.056e9 * 1440 / 2878)).epsilon(1e-4));
  CollectiveCost r26 = collective_cost(CollectiveKind::kAllReduce, G, g26, ring);
  CHECK(std::string(r26.protocol) == "Simple");
  CHECK(r26.time_s == Approx(10652.4e-6 + G / (721.8e9 * 1440 / 2878)).epsilon(1e-4));
  // Default algorithms, 16 GiB. Tree Simple: latency 8.4 + 2 · (71 · 4.0 + 4 · 26) µs + fill 2 · 75 · 512 KiB
  // / 24e9 = 0.7844 + 3.2768 = 4.061 ms.
  //   2.26 believes busbw min(664.06e9, 18 · 72e9) = 664.06e9: 4.061 + 17.18e9 / 332.03e9 = 55.8 ms, below
  //   the ring Simple's 10.652 + 17.18e9 / 361.15e9 = 58.2 ms: NCCL 2.26 runs the tree, which takes
  //   4.061 + 17.18e9 / 216e9 = 83.6 ms (measured 84.6 ms, all_reduce_1440ranks_gb200_coreweave.log).
  const double S = 16 * kGiBd;
  CollectiveCost t26 = collective_cost(CollectiveKind::kAllReduce, S, g26);
  CHECK(std::string(t26.algorithm) == "tree");
  CHECK(std::string(t26.protocol) == "Simple");
  CHECK(t26.latency_s == Approx((8.4 + 2 * (71 * 4.0 + 4 * 26.0)) * 1e-6 + 2.0 * 75 * 524288 / 24e9));
  CHECK(t26.time_s == Approx(t26.latency_s + S / 216e9).epsilon(1e-9));
  CHECK(t26.why.find("as NCCL 2.26's tuner chooses") != std::string::npos);
  // 2.30 knows the tree's 24 GB/s a channel and takes the ring (LL128, as above: 5.79 + 51.7 ms).
  CollectiveCost t30 = collective_cost(CollectiveKind::kAllReduce, S, g30);
  CHECK(std::string(t30.algorithm) == "ring");
  CHECK(t30.time_s < t26.time_s);
}

TEST_CASE("cluster nccl_version: the minor release, or one clear input error",
          "[simulator][collective][cluster]") {
  CHECK(nccl_minor_of("2.26.2") == 26);
  CHECK(nccl_minor_of("2.29") == 29);
  CHECK(nccl_minor_of("2.30.7-1") == 30);
  CHECK(nccl_minor_of("3.0") == -1);
  CHECK(nccl_minor_of("2.x") == -1);
  Json j = cluster_spec_to_json(load_cluster_spec("dgx-h100"));
  CHECK_FALSE(j["fabric"].contains("nccl_version"));  // optional: absent = the model's baseline (2.30)
  j["fabric"]["nccl_version"] = "2.26.2";
  CHECK(parse_cluster_spec(JsonObj(j, "c.json")).fabric.nccl_version == "2.26.2");
  j["fabric"]["nccl_version"] = "twenty-six";
  CHECK_THROWS_AS(parse_cluster_spec(JsonObj(j, "c.json")), InputError);
}

TEST_CASE("NCCL's ring graph across nodes: search channels, duplication and comm->nChannels",
          "[simulator][collective]") {
  // search.cc ncclTopoCompute / ncclTopoDupChannels and connect.cc ncclTopoPostset, NVIDIA/nccl v2.29.2.
  // DGX H100, 8 NICs at 48 GB/s, NVLink 370.8 GB/s per GPU; sm90SpeedArrayInter 48, 45, 42, 40, 30, 24, 22:
  //   48: min(8 NICs × 1, floor(370.8/48) = 7) = 7 channels, 336;  45: min(8, 8) = 8, 360 (best);
  //   42: 336; 40: 320; 30: 8, 240; 24: min(16, 15) = 15, 360 (a tie keeps 45); 22 <= 0.49 × 48 stops.
  //   Dup: bwIntra 45 < 50 with 8 > 4 channels on sm90: none. Postset doubles: 16; 45 is not > 45: 16.
  RingGraph h = ring_graph_across_nodes(GpuArch::kHopper, 8, 48.0, 370.8);
  CHECK(h.search_channels == 8);
  CHECK(h.search_GBps == 45.0);
  CHECK(h.channels == 16);
  // 4 NICs (4 GPUs per node): 48 → 4 channels, 192 (24: 8 channels, 192, a tie). Dup: 4 channels is not
  // > 4, so 8 × 24; Postset 16; 24 is not > 45: 16.
  RingGraph h4 = ring_graph_across_nodes(GpuArch::kHopper, 4, 48.0, 370.8);
  CHECK(h4.search_channels == 8);
  CHECK(h4.search_GBps == 24.0);
  CHECK(h4.channels == 16);
  // One NIC: 1 × 48 → dup 2 × 24 → Postset 4.
  CHECK(ring_graph_across_nodes(GpuArch::kHopper, 1, 48.0, 370.8).channels == 4);
  // A100, 8 HDR NICs at 24 GB/s, NVLink 240 GB/s; speedArrayInter: 24 → min(8, 10) = 8, 192 (12: 16 × 12,
  // a tie). 24 < 25: no dup; Postset 16; no sm90 doubling. 16 × SM80_NVLINK_BW 20 = 320e9 > NVLink 240e9,
  // so the A100 ring stays NVLink-bound.
  RingGraph a = ring_graph_across_nodes(GpuArch::kAmpere, 8, 24.0, 240.0);
  CHECK(a.search_channels == 8);
  CHECK(a.channels == 16);
}

TEST_CASE("80 H100 ranks on 10 nodes: the ring's 16 CTAs bound large buffers, NVLS-tree until 2 GiB",
          "[simulator][collective]") {
  Cluster cl(load_cluster_spec("dgx-h100"), 80);
  const GroupView g = cl.group(80, 1);
  // All-gather at 16 GiB: Simple ring, 16 CTAs × 20.6e9 = 329.6e9 busbw, latency 444.4 µs (test above).
  const double S = 16 * kGiBd;
  CollectiveCost ag = collective_cost(CollectiveKind::kAllGather, S, g);
  CHECK(ag.channels == 16);
  CHECK(ag.time_s == Approx(444.4e-6 + 79.0 / 80.0 * S / 329.6e9).epsilon(1e-9));
  CHECK(ag.why.find("CTAs") != std::string::npos);
  // All-reduce, tuner: NVLS-tree 150.4 µs + 158/80 · S / 364e9; ring (8.4 + 140 · 3.4 + 18 · 14) × 1.4 =
  // 1031.0 µs + 158/80 · S / 384e9. Crossover S = 880.6e-6 / (158/80 · (1/364e9 − 1/384e9)) = 3.12e9 B:
  // NVLS-tree at 2 GiB, the ring at 4 GiB (the 80-rank log's busbw falls from 337 to 314 GB/s there).
  CHECK(std::string(collective_cost(CollectiveKind::kAllReduce, 2 * kGiBd, g).algorithm) == "nvls_tree");
  CHECK(std::string(collective_cost(CollectiveKind::kAllReduce, 3.05e9, g).algorithm) == "nvls_tree");
  CHECK(std::string(collective_cost(CollectiveKind::kAllReduce, 3.20e9, g).algorithm) == "ring");
  CHECK(std::string(collective_cost(CollectiveKind::kAllReduce, 4 * kGiBd, g).algorithm) == "ring");
}

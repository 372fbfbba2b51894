// The NCCL-like collective cost model (collective.cpp, mechanics.md §4.4) on groups of real cluster presets:
// the large-buffer ring formula, all-reduce vs reduce-scatter, intra- vs inter-node, monotonicity in bytes.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "sim_helpers.hpp"

using namespace shardplan;

namespace {
constexpr double kGiBd = 1024.0 * 1024.0 * 1024.0;
}

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
  // LL (bw capped at 141e9 on Hopper) and LL128 (0.92 × bus) are slower for this size; all-gather has no NVLS.
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
}

TEST_CASE("ring all-gather across 8 nodes equals the NCCL-style formula", "[simulator][collective]") {
  Cluster cl(load_cluster_spec("dgx-h100"), 64);
  const GroupView g = cl.group(64, 1);
  const double S = 8 * kGiBd;
  // n = 64 ranks on 8 nodes: 63 steps of which 7 cross the network.
  //   bus = min(NVLink 450e9 × 0.824 = 370.8e9, inter 400e9 × nic_efficiency 0.92 = 368e9) = 368e9
  //   intra hop (Simple) = max(3.4, netOverhead 3.0) = 3.4 µs; inter hop = 14 + 2 × 4 µs path latency = 22 µs
  //   latency = 8.4 + 56 · 3.4 + 7 · 22 = 8.4 + 190.4 + 154 = 352.8 µs
  //   t = 352.8e-6 + (63/64) · 8 GiB / 368e9
  // LL128 (latency 14 + 56·1.9 + 7·(4 + 4) = 176.4 µs, bw 0.92 × 368e9) loses above ~0.76 GB; LL is capped at
  // 20.4e9 B/s (> 2 nodes).
  const double expected = 352.8e-6 + 63.0 / 64.0 * S / 368e9;
  CollectiveCost c = collective_cost(CollectiveKind::kAllGather, S, g);
  CHECK(c.time_s == Approx(expected).epsilon(1e-12));
  CHECK(std::string(c.protocol) == "Simple");
}

TEST_CASE("all-reduce costs about twice a reduce-scatter on large buffers", "[simulator][collective]") {
  // Ring all-reduce = reduce-scatter + all-gather: 2(n−1)/n · S / bus vs (n−1)/n · S / bus; the latencies
  // (2(n−1) hops vs n−1, ×1.4 multi-node plateau) are negligible at 16 GiB. Groups without NVLS:
  // an 8-GPU A100 node (nvls false) and 64 H100 ranks on 8 nodes (NVLS is single-node only here).
  const double S = 16 * kGiBd;
  Cluster a100(load_cluster_spec("dgx-a100-80g"), 8), h100(load_cluster_spec("dgx-h100"), 64);
  for (const GroupView& g : {a100.group(8, 1), h100.group(64, 1)}) {
    INFO("ranks " << g.ranks << " nodes " << g.nodes);
    const double ar = collective_cost(CollectiveKind::kAllReduce, S, g).time_s;
    const double rs = collective_cost(CollectiveKind::kReduceScatter, S, g).time_s;
    CHECK(ar / rs == Approx(2.0).epsilon(0.01));
  }
  // With NVLS inside an H100 node the switch reduces: the model gives the all-reduce 1.3× the ring bus
  // bandwidth (≈ 480 vs 370 GB/s, nccl-tests#212), so AR / RS → 2 / 1.3 ≈ 1.54 at large sizes.
  Cluster node(load_cluster_spec("dgx-h100"), 8);
  const GroupView g = node.group(8, 1);
  CollectiveCost ar = collective_cost(CollectiveKind::kAllReduce, S, g);
  CHECK(std::string(ar.algorithm) == "nvls");
  CHECK(ar.time_s / collective_cost(CollectiveKind::kReduceScatter, S, g).time_s == Approx(2.0 / 1.3).epsilon(0.01));
}

TEST_CASE("8 ranks in one node beat 64 ranks on 8 nodes for the same bytes per rank", "[simulator][collective]") {
  // Same per-rank shard b: the 8-way buffer is 8b, the 64-way one 64b. Intra: 32.2 µs + 7b / 370.8e9;
  // inter: 352.8 µs + 63b / 368e9 ⇒ strictly slower at every size (both terms larger).
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
  // which is then non-decreasing too. Sweep 1 B .. 64 GiB in 1/16-octave steps over several group shapes.
  Cluster h1(load_cluster_spec("dgx-h100"), 8), h8(load_cluster_spec("dgx-h100"), 64),
      big(load_cluster_spec("dgx-h100"), 512), a100(load_cluster_spec("dgx-a100-40g"), 16);
  std::vector<GroupView> groups = {h1.group(8, 1), h1.group(2, 1), h8.group(64, 1), h8.group(8, 8),
                                   h8.group(16, 1), big.group(512, 1), a100.group(16, 1), a100.group(2, 8)};
  for (const auto& g : groups)
    for (CollectiveKind k : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
      double prev = 0;
      for (double S = 1; S <= 64 * kGiBd; S *= std::pow(2.0, 1.0 / 16)) {
        const double t = collective_cost(k, S, g).time_s;
        if (t < prev) {
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
  // ⇒ tiny buffers cost 10.8 µs, and no buffer costs more than 27.3 µs (+ 1 GiB / 7.6e17 ≈ 1.4 ns).
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  spec.node.nvlink_Bps = spec.node.nic_Bps = spec.node.pcie_Bps = 1e18;
  spec.node.nvlink_latency_s = 0;
  spec.fabric.latency_s = 0;
  Cluster cl(spec, 8);
  const GroupView g = cl.group(8, 1);
  CHECK(collective_cost(CollectiveKind::kAllGather, 1024, g).time_s == Approx(10.8e-6).epsilon(1e-3));
  CHECK(collective_cost(CollectiveKind::kAllGather, kGiBd, g).time_s == Approx(27.3e-6).epsilon(1e-3));
  CHECK(collective_cost(CollectiveKind::kAllGather, 64 * kGiBd, g).time_s <= 27.4e-6);
}

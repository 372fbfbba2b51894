// The PCIe-only and AMD Instinct cluster presets (issue 32): each preset's datasheet numbers, and the
// collective model on a node without NVLink (L40S) and on an Infinity Fabric mesh (MI300X).
#include <catch2/catch.hpp>
#include <string>

#include "sim_helpers.hpp"

using namespace shardplan;

namespace {
constexpr double kGiBd = 1024.0 * 1024.0 * 1024.0;
}  // namespace

TEST_CASE("GPU presets carry their datasheet numbers", "[simulator][cluster][presets]") {
  // L40S datasheet: BF16 362.05 TFLOPS dense (733 is the sparse figure), FP8 733 dense, TF32 183, FP32 91.6,
  // 864 GB/s GDDR6; 46,068 MiB = 46,068 x 2^20 = 48,305,799,168 B; PCIe Gen4 x16 = 32 GB/s a direction.
  const ClusterSpec l40s = load_cluster_spec("l40s-pcie");
  CHECK(l40s.gpu.arch == GpuArch::kAda);
  CHECK(l40s.gpu.memory_bytes == 46068LL * 1048576);
  CHECK(l40s.gpu.peak_bf16_flops == 362.05e12);
  CHECK(l40s.gpu.peak_fp8_flops == 733e12);
  CHECK(l40s.gpu.peak_tf32_flops == 183e12);
  CHECK(l40s.gpu.peak_fp32_flops == 91.6e12);
  CHECK(l40s.gpu.hbm_Bps == 864e9);
  CHECK(l40s.node.nvlink_Bps == 0.0);
  CHECK_FALSE(l40s.node.nvswitch);
  CHECK(l40s.node.pcie_Bps == 32e9);
  // H20 (unofficial spec sheet): 148 / 296 TFLOPS, 4.0 TB/s, NVLink 900 GB/s bidirectional = 450 a direction.
  const ClusterSpec h20 = load_cluster_spec("hgx-h20");
  CHECK(h20.gpu.arch == GpuArch::kHopper);
  CHECK(h20.gpu.peak_bf16_flops == 148e12);
  CHECK(h20.gpu.peak_fp8_flops == 296e12);
  CHECK(h20.gpu.hbm_Bps == 4.0e12);
  CHECK(h20.node.nvlink_Bps == 450e9);
  // MI300X / MI325X (CDNA 3): 1,307.4 TFLOPS BF16 dense, 2,614.9 FP8; 5.3 / 6.0 TB/s; 192 / 256 GB;
  // Infinity Fabric 7 links x 64 GB/s a direction = 448 GB/s. MI355X (CDNA 4): 2,516.6 / 5,033.2 TFLOPS,
  // 8 TB/s, 288 GiB, 7 x 76.8 = 537.6 GB/s.
  const ClusterSpec mi300 = load_cluster_spec("mi300x-8"), mi325 = load_cluster_spec("mi325x-8"),
                    mi355 = load_cluster_spec("mi355x-8");
  CHECK(mi300.gpu.arch == GpuArch::kCdna3);
  CHECK(mi325.gpu.arch == GpuArch::kCdna3);
  CHECK(mi355.gpu.arch == GpuArch::kCdna4);
  CHECK(mi300.gpu.memory_bytes == 205822885888LL);
  CHECK(mi325.gpu.memory_bytes == 256LL << 30);
  CHECK(mi355.gpu.memory_bytes == 288LL << 30);
  CHECK(mi300.gpu.peak_bf16_flops == 1307.4e12);
  CHECK(mi325.gpu.peak_bf16_flops == 1307.4e12);
  CHECK(mi355.gpu.peak_bf16_flops == 2516.6e12);
  CHECK(mi300.gpu.peak_fp8_flops == 2614.9e12);
  CHECK(mi355.gpu.peak_fp8_flops == 5033.2e12);
  CHECK(mi300.gpu.hbm_Bps == 5.3e12);
  CHECK(mi325.gpu.hbm_Bps == 6.0e12);
  CHECK(mi355.gpu.hbm_Bps == 8.0e12);
  CHECK(mi300.node.nvlink_Bps == Approx(7 * 64e9));
  CHECK(mi355.node.nvlink_Bps == Approx(7 * 76.8e9));
  for (const ClusterSpec* s : {&mi300, &mi325, &mi355}) {
    CHECK_FALSE(s->node.nvswitch);  // a full mesh: no switch, no NVLS / SHARP
    CHECK_FALSE(s->node.nvls);
  }
}

TEST_CASE("L40S: collectives over PCIe, no LL128, bound by the PCIe link",
          "[simulator][collective][presets]") {
  Cluster cl(load_cluster_spec("l40s-pcie"), 8);
  const GroupView g = cl.group(8, 1);
  // GPU -PCIe 32e9- host switch -PCIe 32e9- GPU: the widest path is 32e9, not NVLink, no NVLS.
  CHECK(g.intra_Bps == 32e9);
  CHECK_FALSE(g.intra_nvlink);
  CHECK_FALSE(g.nvls);
  // 4 GiB all-gather over 8 ranks: bus bandwidth at most NCCL's PCI_BW share 12/16 of 32e9 = 24e9, so
  // t >= (7/8) x 4 GiB / 24e9 = 156.6 ms; LL128 needs NVLink on every intra path (NCCL tuning.cc).
  const double S = 4 * kGiBd;
  for (CollectiveKind k :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
    const CollectiveCost c = collective_cost(k, S, g);
    INFO(c.why);
    CHECK(std::string(c.protocol) != "LL128");
    CHECK(c.busbw_Bps <= 24e9 * (1 + 1e-12));
  }
  CHECK(collective_cost(CollectiveKind::kAllGather, S, g).time_s >= 7.0 / 8.0 * S / 24e9);
  // More PCIe bandwidth is never slower (Gen5 x16: 64e9).
  ClusterSpec fast = load_cluster_spec("l40s-pcie");
  fast.node.pcie_Bps = 64e9;
  Cluster cf(fast, 8);
  for (double bytes : {1.0 * 1048576, 64.0 * 1048576, S})
    for (CollectiveKind k :
         {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce})
      CHECK(collective_cost(k, bytes, cf.group(8, 1)).time_s <= collective_cost(k, bytes, g).time_s);
  // Across nodes: 2 nodes x 8 GPUs share the 2 NICs; still no LL128.
  Cluster two(load_cluster_spec("l40s-pcie"), 16);
  CHECK(std::string(collective_cost(CollectiveKind::kAllGather, S, two.group(16, 1)).protocol) != "LL128");
}

TEST_CASE("MI300X: the Infinity Fabric mesh as the 7 links' total, without NVLS",
          "[simulator][collective][presets]") {
  Cluster cl(load_cluster_spec("mi300x-8"), 8);
  const GroupView g = cl.group(8, 1);
  CHECK(g.intra_Bps == Approx(448e9));
  CHECK(g.intra_nvlink);
  CHECK_FALSE(g.nvls);
  CHECK(g.arch == GpuArch::kCdna3);
  // Bus bandwidth below the 7 links' line rate, above a single PCIe Gen5 link.
  const CollectiveCost c = collective_cost(CollectiveKind::kAllGather, 4 * kGiBd, g);
  CHECK(c.busbw_Bps <= 448e9);
  CHECK(c.busbw_Bps > 64e9);
  CHECK(std::string(c.algorithm) != "nvls");
  // MI355X's faster links are never slower.
  Cluster c355(load_cluster_spec("mi355x-8"), 8);
  CHECK(collective_cost(CollectiveKind::kAllGather, 4 * kGiBd, c355.group(8, 1)).time_s <= c.time_s);
}

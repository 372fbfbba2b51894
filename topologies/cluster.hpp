// Cluster: the GPUs, NVLink/NVSwitch domains, NICs and switches of a training cluster, read from a
// "shardplan.cluster/1" document and built into a Boost.Graph of devices and links. Group views answer, for a
// group of ranks placed the way torchrun/DeviceMesh places them (contiguous inside a node first), which
// levels the group spans and the bottleneck bandwidth its rings see.
#pragma once
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <string>

#include "core/json_reader.hpp"
#include "core/units.hpp"

namespace shardplan {

/// kAda: sm89 (L40S, PCIe only); kCdna3 / kCdna4: AMD Instinct MI300X, MI325X / MI355X (ROCm, RCCL).
enum class GpuArch { kVolta, kAmpere, kAda, kHopper, kBlackwell, kCdna3, kCdna4, kOther };
/// Every GpuArch, in the order messages list them.
inline constexpr GpuArch kGpuArchs[] = {GpuArch::kVolta,  GpuArch::kAmpere,    GpuArch::kAda,
                                        GpuArch::kHopper, GpuArch::kBlackwell, GpuArch::kCdna3,
                                        GpuArch::kCdna4,  GpuArch::kOther};
/// AMD Instinct (RCCL, ROCm builds of torch).
inline bool is_amd(GpuArch a) {
  return a == GpuArch::kCdna3 || a == GpuArch::kCdna4;
}
const char* to_string(GpuArch a);

struct GpuSpec {
  std::string model;
  Bytes memory_bytes = 0;  ///< usable device memory as torch.cuda reports total_memory
  GpuArch arch = GpuArch::kOther;
  double peak_bf16_flops = 0, peak_fp32_flops = 0, peak_tf32_flops = 0,
         peak_fp8_flops = 0;  ///< dense, FLOP/s
  /// Dense NVFP4 (e2m1, block-scaled) FLOP/s: Blackwell's fp4 tensor cores; 0 where the GPU has none.
  double peak_fp4_flops = 0;
  double hbm_Bps = 0;
};

struct NodeSpec {
  int gpus = 8;
  int nvlink_domain_gpus = 8;  ///< GPUs one NVLink fabric connects (8 in a DGX, 72 in an NVL72 rack)
  /// GPUs per host (operating-system instance, the unit nccl-tests' host names count). Optional, default
  /// `gpus`; an NVL72 rack has 18 compute trays of 4 GPUs, so host_gpus = 4 while the NVLink domain is 72.
  int host_gpus = 8;
  double nvlink_Bps = 0;  ///< per GPU per direction; 0 = GPUs talk over PCIe
  double nvlink_latency_s = 0;
  bool nvswitch = false, nvls = false;
  double pcie_Bps = 0;
  int nics = 0;
  double nic_Bps = 0;  ///< one NIC, one direction
  /// The NICs hang off the CPU's PCIe and the GPU reaches them over NVLink-C2C (GB200: Grace + Blackwell),
  /// so NCCL's GPU-to-NIC path is PHB unless NCCL_NET_GDR_C2C maps it to C2C/P2C (src/graph/paths.cc).
  /// Optional, default false.
  bool nic_behind_c2c = false;
  /// Host (CPU) memory of one node and its bandwidth, for CPU offload (DeepSpeed ZeRO-Offload/Infinity, FSDP
  /// CPU offload: optimizer state, master weights and gradients in host RAM, Adam on the CPU). 0 = unknown:
  /// offload plans are then not checked against host memory.
  Bytes host_memory_bytes = 0;
  double host_memory_Bps = 0;  ///< aggregate DRAM bandwidth of the node's CPUs (all sockets)
};

struct FabricSpec {
  double latency_s = 1e-6;  ///< one switch hop
  /// "infiniband" (default) or "roce". Carried for the output; the collective model treats both as the same
  /// rail network (NCCL's IB transport drives both through verbs, src/transport/net_ib.cc).
  std::string kind = "infiniband";
  /// Share of a NIC's line rate one NCCL connection reaches (optional, default 0.96: the 1-GPU-per-node
  /// nccl-tests runs of the development logs reach 48-49 GB/s busbw on a 400 Gb/s NIC, SOURCES.md).
  double nic_efficiency = 0.96;
  /// In-network reduction (IB SHARP) enabled for NCCL's CollNet algorithms (NCCL_COLLNET_ENABLE=1 with the
  /// SHARP plugin). Optional, default false: NCCL leaves CollNet off unless asked (src/graph/tuning.cc).
  bool sharp = false;
  /// NCCL release the cluster runs ("2.26.2"; optional, default the model's baseline 2.30). Only its minor
  /// version is used, for the few tuner defaults that changed between releases (collective.cpp).
  std::string nccl_version;
  int nodes_per_leaf = 32;
  double oversubscription = 1.0;
};

struct ClusterSpec {
  std::string name, description;
  GpuSpec gpu;
  NodeSpec node;
  FabricSpec fabric;
  Json sources;  ///< citations, kept verbatim
};

ClusterSpec parse_cluster_spec(JsonObj obj);
/// The minor version of an NCCL release string "2.<minor>[.<patch>...]", or -1 when it is not one.
int nccl_minor_of(const std::string& version);
Json cluster_spec_to_json(const ClusterSpec& s);

/// What a group of ranks sees of the topology.
struct GroupView {
  int ranks = 1;
  int nodes = 1;           ///< NVLink domains the group spans
  int ranks_per_node = 1;  ///< group members inside one NVLink domain
  int hosts = 1;           ///< hosts (operating-system instances) the group spans: what nccl-tests logs count
  int domain_gpus = 8;     ///< GPUs in one NVLink domain of the cluster
  int host_gpus = 8;       ///< GPUs in one host of the cluster
  int rails = 0;        ///< NICs one NVLink domain drives for this group (one per member, at most the NICs)
  double rail_Bps = 0;  ///< achievable bandwidth of one NIC, one direction (nic_Bps x nic_efficiency)
  bool sharp = false;   ///< IB SHARP (CollNet) available
  bool nvswitch = false;
  bool crosses_leaf = false;
  double intra_Bps = 0;  ///< per GPU per direction inside the domain (NVLink, or PCIe without NVLink)
  bool intra_nvlink = false;
  double inter_Bps = 0;  ///< per NVLink domain per direction across the network, available to this group
  double inter_latency_s = 0;
  bool nvls = false;
  bool nic_behind_c2c = false;  ///< NodeSpec::nic_behind_c2c
  int nccl_minor = 30;          ///< minor version of FabricSpec::nccl_version (2.<minor>), default 30
  GpuArch arch = GpuArch::kOther;
};

class Cluster {
 public:
  Cluster(ClusterSpec spec, int gpus);  ///< throws InputError if `gpus` does not fit the node size
  const ClusterSpec& spec() const { return spec_; }
  int gpus() const { return gpus_; }
  int nodes() const { return (gpus_ + spec_.node.gpus - 1) / spec_.node.gpus; }
  /// A group of `size` ranks whose consecutive members are `stride` ranks apart (TP innermost: stride = tp).
  GroupView group(int size, int stride) const;

  struct Device {
    enum Kind { kGpu, kNvSwitch, kNic, kLeaf, kSpine } kind = kGpu;
    int index = 0;
  };
  struct Link {
    double Bps = 0;
    double latency_s = 0;
  };
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, Device, Link>;
  /// The device graph of a representative slice of the cluster (up to two leaves' worth of nodes).
  const Graph& graph() const { return graph_; }

 private:
  void build_graph();
  /// Widest-path bandwidth and summed latency between two GPU vertices.
  std::pair<double, double> path(std::size_t a, std::size_t b) const;
  ClusterSpec spec_;
  int gpus_;
  Graph graph_;
  std::vector<std::size_t> gpu_vertex_;  // representative GPUs, node-major
  int graph_nodes_ = 0;
  // Derived once from the graph: bandwidth and latency same node / same leaf / across leaves.
  double intra_Bps_ = 0, leaf_Bps_ = 0, spine_Bps_ = 0, leaf_latency_s_ = 0, spine_latency_s_ = 0;
};

}  // namespace shardplan

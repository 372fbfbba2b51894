// Cluster spec parsing, the device graph, and group views derived from widest paths in that graph.
#include "topologies/cluster.hpp"

#include <algorithm>
#include <cctype>
#include <queue>

namespace shardplan {

/// Largest cluster shardplan models (2^24 GPUs); keeps rank and node arithmetic far from int overflow.
constexpr int kMaxGpus = 1 << 24;

const char* to_string(GpuArch a) {
  switch (a) {
    case GpuArch::kVolta:
      return "volta";
    case GpuArch::kAmpere:
      return "ampere";
    case GpuArch::kHopper:
      return "hopper";
    case GpuArch::kBlackwell:
      return "blackwell";
    case GpuArch::kAda:
      return "ada";
    case GpuArch::kCdna3:
      return "cdna3";
    case GpuArch::kCdna4:
      return "cdna4";
    case GpuArch::kOther:
      return "other";
  }
  return "other";
}

ClusterSpec parse_cluster_spec(JsonObj o) {
  ClusterSpec s;
  if (o.has("schema")) {
    std::string schema = o.str("schema");
    if (schema != "shardplan.cluster/1")
      o.fail("schema", "expected \"shardplan.cluster/1\", got \"" + schema + "\"");
  }
  o.allow({"notes"});
  s.name = o.str("name", "custom");
  s.description = o.str("description", "");
  if (auto* src = o.raw_optional("sources")) s.sources = *src;
  {
    JsonObj g = o.object("gpu");
    g.allow({"notes", "source"});
    s.gpu.model = g.str("model");
    s.gpu.memory_bytes = g.integer("memory_bytes", kMiB, std::int64_t{1} << 50);
    std::string arch = g.str("arch", "other");
    bool found = false;
    std::string names;
    for (GpuArch a : kGpuArchs) {
      if (arch == to_string(a)) s.gpu.arch = a, found = true;
      names += std::string(names.empty() ? "" : ", ") + to_string(a);
    }
    if (!found) g.fail("arch", "unknown arch \"" + arch + "\"; expected one of: " + names);
    JsonObj f = g.object("peak_flops");
    s.gpu.peak_bf16_flops = f.number("bf16", 1e9, 1e18);
    // The other precisions default to multiples of bf16 and are written out by `show cluster`: their range
    // holds every default (bf16 / 16 .. bf16 x 2), so that output is always accepted back.
    s.gpu.peak_fp32_flops = f.number("fp32", s.gpu.peak_bf16_flops / 16, 1e7, 1e19);
    s.gpu.peak_tf32_flops = f.number("tf32", s.gpu.peak_bf16_flops / 2, 1e7, 1e19);
    s.gpu.peak_fp8_flops = f.number("fp8", s.gpu.peak_bf16_flops * 2, 1e7, 1e19);
    // fp4: only Blackwell has fp4 tensor cores (default twice its fp8 rate, the B200 datasheet's ratio).
    s.gpu.peak_fp4_flops =
        f.number("fp4", s.gpu.arch == GpuArch::kBlackwell ? s.gpu.peak_fp8_flops * 2 : 0.0, 0.0, 1e19);
    f.finish();
    s.gpu.hbm_Bps = g.number("hbm_Bps", 1e9, 1e15);
    g.finish();
  }
  {
    JsonObj n = o.object("node");
    n.allow({"notes", "source"});
    s.node.gpus = static_cast<int>(n.integer("gpus", 1, 1024));
    s.node.nvlink_domain_gpus = static_cast<int>(n.integer("nvlink_domain_gpus", s.node.gpus, 1, 4096));
    s.node.host_gpus = static_cast<int>(n.integer("host_gpus", s.node.gpus, 1, 1024));
    s.node.nvlink_Bps = n.number("nvlink_Bps", 0.0, 0.0, 1e14);
    s.node.nvlink_latency_s = n.number("nvlink_latency_s", 1e-6, 0.0, 1.0);
    s.node.nvswitch = n.boolean("nvswitch", false);
    s.node.nvls = n.boolean("nvls", false);
    s.node.pcie_Bps = n.number("pcie_Bps", 32e9, 1e8, 1e13);
    s.node.nics = static_cast<int>(n.integer("nics", 0, 0, 1024));
    s.node.nic_Bps = n.number("nic_Bps", 0.0, 0.0, 1e13);
    s.node.host_memory_bytes = n.integer("host_memory_bytes", 0, 0, std::int64_t{1} << 50);
    s.node.host_memory_Bps = n.number("host_memory_Bps", 0.0, 0.0, 1e14);
    s.node.nic_behind_c2c = n.boolean("nic_behind_c2c", false);
    n.finish();
    if (s.node.nvlink_domain_gpus % s.node.gpus != 0 && s.node.nvlink_domain_gpus != s.node.gpus)
      n.fail("nvlink_domain_gpus", "must be a multiple of node.gpus");
    if (s.node.gpus % s.node.host_gpus != 0) n.fail("host_gpus", "must divide node.gpus");
    if (s.node.nics > 0 && s.node.nic_Bps <= 0) n.fail("nic_Bps", "must be > 0 when nics > 0");
    // The device graph holds every NIC of a few NVLink domains; bound them like the GPUs of a domain.
    const std::int64_t domain_nics =
        static_cast<std::int64_t>(s.node.nics) * (s.node.nvlink_domain_gpus / s.node.gpus);
    if (domain_nics > 4096)
      n.fail("nics", std::to_string(domain_nics) +
                         " NICs in one NVLink domain (nics x nvlink_domain_gpus / gpus); "
                         "at most 4096");
  }
  if (auto f = o.optional_object("fabric")) {
    f->allow({"notes", "source"});
    s.fabric.latency_s = f->number("latency_s", 1e-6, 0.0, 1.0);
    s.fabric.nodes_per_leaf = static_cast<int>(f->integer("nodes_per_leaf", 32, 1, 1 << 20));
    s.fabric.oversubscription = f->number("oversubscription", 1.0, 1.0, 1000.0);
    s.fabric.kind = f->str("kind", "infiniband");
    if (s.fabric.kind != "infiniband" && s.fabric.kind != "roce")
      f->fail("kind", "expected \"infiniband\" or \"roce\", got \"" + s.fabric.kind + "\"");
    s.fabric.nic_efficiency = f->number("nic_efficiency", 0.96, 0.05, 1.0);
    s.fabric.sharp = f->boolean("sharp", false);
    s.fabric.nccl_version = f->str("nccl_version", "");
    if (!s.fabric.nccl_version.empty() && nccl_minor_of(s.fabric.nccl_version) < 0)
      f->fail("nccl_version",
              "expected an NCCL 2.x release such as \"2.26.2\", got \"" + s.fabric.nccl_version + "\"");
    f->finish();
  }
  o.finish();
  return s;
}

int nccl_minor_of(const std::string& version) {
  // "2.<minor>" optionally followed by ".<patch>" (and anything after it, e.g. "-1").
  if (version.rfind("2.", 0) != 0) return -1;
  std::size_t i = 2;
  int minor = 0;
  while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i])) && minor < 1000)
    minor = minor * 10 + (version[i++] - '0');
  if (i == 2 || (i < version.size() && version[i] != '.')) return -1;
  return minor;
}

Json cluster_spec_to_json(const ClusterSpec& s) {
  Json j = {{"schema", "shardplan.cluster/1"},
            {"name", s.name},
            {"description", s.description},
            {"gpu",
             {{"model", s.gpu.model},
              {"memory_bytes", s.gpu.memory_bytes},
              {"arch", to_string(s.gpu.arch)},
              {"peak_flops",
               {{"bf16", s.gpu.peak_bf16_flops},
                {"fp32", s.gpu.peak_fp32_flops},
                {"tf32", s.gpu.peak_tf32_flops},
                {"fp8", s.gpu.peak_fp8_flops},
                {"fp4", s.gpu.peak_fp4_flops}}},
              {"hbm_Bps", s.gpu.hbm_Bps}}},
            {"node",
             {{"gpus", s.node.gpus},
              {"nvlink_domain_gpus", s.node.nvlink_domain_gpus},
              {"host_gpus", s.node.host_gpus},
              {"nvlink_Bps", s.node.nvlink_Bps},
              {"nvlink_latency_s", s.node.nvlink_latency_s},
              {"nvswitch", s.node.nvswitch},
              {"nvls", s.node.nvls},
              {"pcie_Bps", s.node.pcie_Bps},
              {"nics", s.node.nics},
              {"nic_Bps", s.node.nic_Bps},
              {"host_memory_bytes", s.node.host_memory_bytes},
              {"host_memory_Bps", s.node.host_memory_Bps}}},
            {"fabric",
             {{"latency_s", s.fabric.latency_s},
              {"nodes_per_leaf", s.fabric.nodes_per_leaf},
              {"oversubscription", s.fabric.oversubscription},
              {"kind", s.fabric.kind},
              {"nic_efficiency", s.fabric.nic_efficiency},
              {"sharp", s.fabric.sharp}}}};
  if (s.node.nic_behind_c2c) j["node"]["nic_behind_c2c"] = true;
  if (!s.fabric.nccl_version.empty()) j["fabric"]["nccl_version"] = s.fabric.nccl_version;
  if (!s.sources.is_null()) j["sources"] = s.sources;
  return j;
}

Cluster::Cluster(ClusterSpec spec, int gpus) : spec_(std::move(spec)), gpus_(gpus) {
  if (gpus <= 0) throw InputError::flag("--gpus", "must be > 0, got " + std::to_string(gpus));
  // Bounded so that node and rank arithmetic (gpus + node size - 1, ranks x tp) stays far inside int.
  if (gpus > kMaxGpus)
    throw InputError::flag("--gpus", std::to_string(gpus) + " GPUs is more than the " +
                                         std::to_string(kMaxGpus) + " shardplan models");
  const int domain = spec_.node.nvlink_domain_gpus;
  if (gpus > domain && gpus % domain != 0)
    throw InputError::flag("--gpus", std::to_string(gpus) + " GPUs is not a multiple of the " +
                                         std::to_string(domain) + "-GPU node of cluster \"" + spec_.name +
                                         "\" and does not fit in one node");
  if (gpus > spec_.node.gpus && spec_.node.nics == 0 && gpus > domain)
    throw InputError::flag("--gpus",
                           "cluster \"" + spec_.name + "\" has no NICs, so it cannot span several nodes");
  build_graph();
}

// Devices per NVLink domain: its GPUs, one NVSwitch (or none: PCIe), one NIC per `nics` (rail-aligned);
// NICs hang off leaf switches (nodes_per_leaf domains per leaf); leaves connect to one spine whose
// uplinks are oversubscribed.
void Cluster::build_graph() {
  const auto& n = spec_.node;
  const int domain = n.nvlink_domain_gpus;
  const int total_domains = std::max(1, (gpus_ + domain - 1) / domain);
  graph_nodes_ = std::min(total_domains, std::min(64, spec_.fabric.nodes_per_leaf + 1));
  const bool multi_leaf = total_domains > spec_.fabric.nodes_per_leaf;
  graph_.clear();
  gpu_vertex_.clear();
  auto spine = boost::add_vertex(Device{Device::kSpine, 0}, graph_);
  std::vector<std::size_t> leaves;
  const int n_leaves = multi_leaf ? 2 : 1;
  const double leaf_uplink_Bps =
      n.nics > 0 ? n.nics * n.nic_Bps * spec_.fabric.nodes_per_leaf / spec_.fabric.oversubscription : 0;
  for (int l = 0; l < n_leaves; ++l) {
    auto v = boost::add_vertex(Device{Device::kLeaf, l}, graph_);
    leaves.push_back(v);
    boost::add_edge(v, spine, Link{leaf_uplink_Bps, spec_.fabric.latency_s}, graph_);
  }
  const int gpus_here = std::min(domain, gpus_);
  for (int d = 0; d < graph_nodes_; ++d) {
    // The last representative domain sits under the second leaf when the cluster spans several leaves.
    int leaf = (multi_leaf && d == graph_nodes_ - 1) ? 1 : 0;
    std::size_t sw = 0;
    const bool nvlink = n.nvlink_Bps > 0;
    sw = boost::add_vertex(Device{Device::kNvSwitch, d}, graph_);
    std::vector<std::size_t> nics;
    for (int i = 0; i < n.nics * (domain / n.gpus); ++i) {
      auto nic = boost::add_vertex(Device{Device::kNic, i}, graph_);
      nics.push_back(nic);
      boost::add_edge(nic, leaves[leaf], Link{n.nic_Bps, spec_.fabric.latency_s}, graph_);
    }
    for (int g = 0; g < gpus_here; ++g) {
      auto gv = boost::add_vertex(Device{Device::kGpu, d * domain + g}, graph_);
      gpu_vertex_.push_back(gv);
      // Inside the domain: NVLink through the NVSwitch, or PCIe through the host.
      boost::add_edge(gv, sw, Link{nvlink ? n.nvlink_Bps : n.pcie_Bps, nvlink ? n.nvlink_latency_s : 2e-6},
                      graph_);
      if (!nics.empty()) {
        auto nic = nics[static_cast<std::size_t>(g) * nics.size() / static_cast<std::size_t>(gpus_here)];
        boost::add_edge(gv, nic, Link{n.pcie_Bps, 1e-6}, graph_);
      }
    }
  }
  auto [bw_intra, lat_intra] = gpus_here > 1 ? path(gpu_vertex_[0], gpu_vertex_[1]) : std::pair{0.0, 0.0};
  intra_Bps_ = bw_intra;
  if (graph_nodes_ > 1) {
    auto [bw_leaf, lat_leaf] = path(gpu_vertex_[0], gpu_vertex_[static_cast<std::size_t>(gpus_here)]);
    leaf_Bps_ = bw_leaf;
    leaf_latency_s_ = lat_leaf;
    spine_Bps_ = bw_leaf, spine_latency_s_ = lat_leaf;
    if (multi_leaf) {
      auto [bw_sp, lat_sp] = path(gpu_vertex_[0], gpu_vertex_[gpu_vertex_.size() - 1]);
      spine_Bps_ = bw_sp, spine_latency_s_ = lat_sp;
    }
  }
  (void)lat_intra;
}

std::pair<double, double> Cluster::path(std::size_t a, std::size_t b) const {
  // Widest path (maximise the bottleneck bandwidth), GPUs other than the endpoints are not transit nodes.
  const std::size_t nv = boost::num_vertices(graph_);
  std::vector<double> best(nv, -1.0), lat(nv, 0.0);
  std::priority_queue<std::pair<double, std::size_t>> pq;
  best[a] = 1e300;
  pq.push({best[a], a});
  while (!pq.empty()) {
    auto [bw, v] = pq.top();
    pq.pop();
    if (bw < best[v]) continue;
    if (v != a && graph_[v].kind == Device::kGpu) continue;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, graph_))) {
      auto u = boost::target(e, graph_);
      double nb = std::min(bw, graph_[e].Bps);
      if (nb > best[u]) {
        best[u] = nb;
        lat[u] = lat[v] + graph_[e].latency_s;
        pq.push({nb, u});
      }
    }
  }
  return {std::max(0.0, best[b]), lat[b]};
}

GroupView Cluster::group(int size, int stride) const {
  GroupView g;
  const auto& n = spec_.node;
  const int domain = n.nvlink_domain_gpus;
  g.ranks = std::max(1, size);
  g.arch = spec_.gpu.arch;
  stride = std::max(1, stride);
  g.ranks_per_node = std::clamp(domain / stride, 1, g.ranks);
  g.nodes = (g.ranks + g.ranks_per_node - 1) / g.ranks_per_node;
  g.intra_Bps = intra_Bps_ > 0 ? intra_Bps_ : n.nvlink_Bps;
  g.intra_nvlink = n.nvlink_Bps > 0;
  g.nvls = n.nvls && n.nvswitch && g.ranks_per_node > 2;
  g.nvswitch = n.nvswitch;
  g.domain_gpus = domain;
  g.host_gpus = n.host_gpus;
  g.sharp = spec_.fabric.sharp;
  g.rail_Bps = n.nic_Bps * spec_.fabric.nic_efficiency;
  g.nic_behind_c2c = n.nic_behind_c2c;
  if (!spec_.fabric.nccl_version.empty()) g.nccl_minor = nccl_minor_of(spec_.fabric.nccl_version);
  // Hosts: members of one host are `stride` ranks apart, so a host holds host_gpus / stride of them (at least
  // 1).
  const int per_host = std::clamp(n.host_gpus / stride, 1, g.ranks);
  g.hosts = (g.ranks + per_host - 1) / per_host;
  if (g.nodes > 1) {
    // A domain sends through at most one NIC per member of the group (rail-aligned rings); each NIC path's
    // bottleneck comes from the graph (leaf, or spine with oversubscription when the group crosses leaves).
    const int stride_domains = std::max(1, stride / domain);
    const std::int64_t span_domains = static_cast<std::int64_t>(g.nodes) * stride_domains;
    g.crosses_leaf = span_domains > spec_.fabric.nodes_per_leaf;
    const double per_path_Bps = g.crosses_leaf ? spine_Bps_ : leaf_Bps_;
    const int nics_in_domain = n.nics * (domain / n.gpus);
    // NICs per GPU (2 on hosts with 16 NICs for 8 GPUs): NCCL spreads a GPU's channels over its local NICs.
    const int nics_per_gpu = std::max(1, nics_in_domain / domain);
    const int rails = std::max(1, std::min(nics_in_domain, g.ranks_per_node * nics_per_gpu));
    double path_Bps = per_path_Bps;
    if (g.crosses_leaf) path_Bps = std::min(per_path_Bps, n.nic_Bps / spec_.fabric.oversubscription);
    g.inter_Bps = rails * path_Bps;
    g.rails = rails;
    if (g.crosses_leaf) g.rail_Bps = std::min(g.rail_Bps, path_Bps * spec_.fabric.nic_efficiency);
    g.inter_latency_s = g.crosses_leaf ? spine_latency_s_ : leaf_latency_s_;
  }
  return g;
}

}  // namespace shardplan

// Collective cost model after NCCL's own tuner (NVIDIA/nccl v2.30, src/graph/tuning.cc ncclTopoTuneModel and
// ncclTopoGetAlgoTime): for each algorithm NCCL would enable (ring, tree, NVLS, NVLS-tree, CollNet chain,
// PAT) and protocol (LL, LL128, Simple), t = latency + buffer / algbw, and the fastest wins, as NCCL's tuner
// picks. Bandwidths come from the traffic each algorithm puts on the bottleneck link (NVLink, or the domain's
// NICs); latencies are NCCL's tables. All-gather and reduce-scatter are sized by the whole buffer.
#pragma once
#include <string>

#include "core/collectives.hpp"
#include "core/units.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

struct CollectiveCost {
  double time_s = 0;
  const char* algorithm = "none";   ///< ring, tree, nvls, nvls_tree, collnet_chain, pat, or "calibrated"
  const char* protocol = "none";    ///< LL, LL128, Simple
  int channels = 0;                 ///< NCCL channels (rings/trees) assumed; 0 when calibrated
  double busbw_Bps = 0;             ///< the algorithm's bus-bandwidth ceiling the time was computed with
  double latency_s = 0;             ///< the algorithm x protocol latency
  std::string why;                  ///< one line: the bottleneck and why this algorithm won
  std::string source = "analytic";  ///< analytic | measured curve | scaled curve | alpha-beta
};

/// Algorithms the model may choose, like NCCL_ALGO. Default: what NCCL enables by itself on the group.
struct CollectiveAlgorithms {
  bool ring = true, tree = true, nvls = true, nvls_tree = true, collnet = true, pat = true;
  /// Parses NCCL_ALGO's spelling ("ring", "ring,tree", "^nvls", "collnetchain"); throws InputError on unknown
  /// names.
  static CollectiveAlgorithms parse(const std::string& list);
};

/// Kept for the CostModel interface; the model's constants are NCCL's and documented next to their use.
struct CollectiveConstants {
  CollectiveAlgorithms algorithms;
};

/// Analytic time of one collective on `buffer_bytes` (the whole buffer) over the group.
/// `explain` builds CollectiveCost::why (one line of text); the simulator's hot path leaves it off.
CollectiveCost collective_cost(CollectiveKind kind, double buffer_bytes, const GroupView& g,
                               const CollectiveConstants& c = {}, bool explain = true);

/// Bytes of one tree chunk per channel for protocol 0/1/2 (LL/LL128/Simple), as NCCL's calcCollChunking
/// (src/enqueue.cc, NCCL 2.26-2.30) sizes it for an all-reduce of `buffer_bytes` over `channels`.
double tree_chunk_bytes(int protocol, double buffer_bytes, int channels, int nodes, int ranks_per_node);

/// Pipeline fill of NCCL's tree all-reduce: a chain through the node's ranks under a double binary tree
/// across nodes, depth (ranks_per_node - 1) + log2(nodes), forwards store-and-forward chunks one step at a
/// time (prims waits for a whole step before passing it on, src/device/prims_simple.h), up then down, so the
/// last chunk finishes 2 x depth chunk times after a pipeline without depth would: 2 x depth x chunk /
/// channel_Bps, with the chunk no larger than the channel's share of the buffer.
double tree_fill_s(double chunk_bytes, double buffer_bytes, int channels, int nodes, int ranks_per_node,
                   double channel_Bps);

/// The ring NCCL builds across NVLink domains (several nodes): NCCL's graph search (src/graph/search.cc
/// ncclTopoCompute, NVIDIA/nccl v2.29.2) looks for rings that leave each domain through a NIC, at the highest
/// per-channel speed of its sm90/sm100 speed array that the NICs and each GPU's NVLink carry, then
/// ncclTopoDupChannels and ncclTopoPostset (src/graph/connect.cc) double the channels. `search_channels` x
/// `search_GBps` is what the tuner credits the ring with; `channels` is comm->nChannels, the CTAs that run.
struct RingGraph {
  int search_channels = 0;
  double search_GBps = 0;  ///< graphs[RING]->bwInter after ncclTopoDupChannels
  int channels = 0;        ///< comm->nChannels after ncclTopoPostset
};
/// `rails` NICs per domain at `nic_GBps` each; `nvlink_GBps` the usable NVLink bandwidth of one GPU.
RingGraph ring_graph_across_nodes(GpuArch arch, int rails, double nic_GBps, double nvlink_GBps);

/// NVLS channels NCCL runs (src/transport/nvls.cc): Hopper NVLS_NCHANNELS_SM90 16; Blackwell
/// NVLS_NCHANNELS_SM100 32, and from 2.27 NVLS_NCHANNELS_SM100_NVL 24 inside one NVLink domain
/// (v2.26.2-1 has only the 32; v2.27.3-1 .. v2.29.2-1 both).
int nvls_channels(GpuArch arch, int nccl_minor, bool multi_domain);

/// Bytes of one NVLS chunk per head as NCCL's calcCollChunking (src/enqueue.cc, identical in v2.26.2-1 and
/// v2.29.2-1) sizes it for `channel_bytes` of one channel (nChannels = 1 per channel part,
/// scheduleCollTasksToPlan) with `heads` NVLS heads: NVLS_CHUNKSIZE 128 KiB, 64 KiB under 64 x heads x 128
/// KiB, 32 KiB under 8 x heads x 64 KiB, 16 KiB under 2 x heads x 32 KiB.
double nvls_chunk_bytes(double channel_bytes, int heads);

/// Time a single-domain NVLS all-reduce spends beyond NCCL's latency + S / algbw. Each channel loops over
/// heads x chunk of its share (src/device/all_reduce.h, RunWorkColl<AllReduce, NVLS, Simple> oneNode:
/// scatter, reduce (multimem) and gather warps hand every chunk over through the NVLS buffers), so each
/// iteration costs a fixed hand-over on top of its bytes, and the last chunk's gather trails its reduction by
/// one iteration.
double nvls_pipeline_s(double buffer_bytes, int channels, int heads, double algbw_Bps);

/// nccl-tests' time per iteration when one thread drives `gpus_per_thread` GPUs (its -g / "nGpus" header).
/// Every iteration the thread issues the group's collective on each of its GPUs in turn (ncclGroupStart; one
/// ncclAllGather/... per GPU; ncclGroupEnd launches one kernel per GPU: src/group.cc, src/enqueue.cc
/// ncclLaunchKernel, NCCL 2.26-2.30), and nccl-tests synchronises only after all its timed iterations
/// (NVIDIA/nccl-tests src/common.cu BenchTime: `iters` x startColl, then one completeColl), so the host runs
/// ahead and the period is the longer of the GPU's collective time and the host's issue time gpus_per_thread
/// x `launch_s_per_gpu`.
double nccl_tests_iteration_s(double collective_s, int gpus_per_thread, double launch_s_per_gpu);

/// The group `g` with another rank count and the same per-domain shape (ranks per NVLink domain kept when it
/// divides, otherwise packed): used to scale a measured curve to another rank count with the model's shape.
GroupView with_ranks(const GroupView& g, int ranks);

}  // namespace shardplan

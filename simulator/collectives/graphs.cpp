// The shapes NCCL gives a collective: tree chunks and their pipeline fill, the ring graph across NVLink
// domains, NVLS channels and chunks (src/graph/search.cc, connect.cc, src/enqueue.cc; versions as noted).
#include <algorithm>
#include <cmath>
#include <span>

#include "simulator/collectives/collectives.hpp"
#include "simulator/collectives/nccl_tables.hpp"

namespace shardplan {

using namespace nccl;

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

}  // namespace shardplan

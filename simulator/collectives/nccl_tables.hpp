// NCCL's tuner constants (internal to collectives/). Unless stated otherwise every constant is NVIDIA/nccl
// v2.30 (github.com/NVIDIA/nccl, tree 5067397), src/graph/tuning.cc ncclTunerConstantsDefaults, in
// microseconds or GB/s.
#pragma once
#include <cmath>

#include "topologies/cluster.hpp"

namespace shardplan::nccl {

enum Proto { kLL = 0, kLL128 = 1, kSimple = 2 };
inline constexpr const char* kProtoNames[] = {"LL", "LL128", "Simple"};
// baseLatencies (us) per protocol LL/LL128/Simple.
inline constexpr double kTreeBase[] = {6.8, 14.0, 8.4};
inline constexpr double kRingBase[] = {6.6, 14.0, 8.4};
inline constexpr double kPatBase = 8.0;
// hwLatencies (us): NVLINK, PCI, NET rows; Tree and Ring per protocol, the others Simple only.
inline constexpr double kTreeNvlink[] = {0.6, 1.25, 4.0};
inline constexpr double kRingNvlink[] = {0.6, 1.9, 3.4};
inline constexpr double kTreePci[] = {1.0, 1.9, 4.0};
inline constexpr double kRingPci[] = {1.0, 2.5, 5.7};
inline constexpr double kTreeNet[] = {5.0, 8.5, 14.0};
inline constexpr double kRingNet[] = {2.7, 4.0, 14.0};
inline constexpr double kCollnetChainIntra = 2.8, kCollnetChainNet = 30.0;
inline constexpr double kNvlsIntra = 25.0, kNvlsTreeNet = 20.9;
inline constexpr double kPatNet = 14.0;
// getNetOverhead: 1 us on Intel x86 (and by default), x3 for Simple (tuning.cc).
inline constexpr double kNetOverhead = 1.0;

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
/// The architecture's row of NCCL's tables (nccl_tables.cpp).
const ArchConsts& arch_consts(GpuArch a);
/// NCCL 2.26's Blackwell rows, which its tuner chooses with (nccl_tables.cpp).
const ArchConsts& blackwell_nccl226();

// treeCorrectionFactor[proto][log2(bytes / 64)] for 64 B .. 256 MiB (ncclTopoGetAlgoTime, tuning.cc).
inline constexpr double kTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

inline int log2i(double x) {
  return x >= 1 ? static_cast<int>(std::floor(std::log2(x))) : 0;
}

}  // namespace shardplan::nccl

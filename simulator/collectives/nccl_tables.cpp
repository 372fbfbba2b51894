// NCCL's per-architecture tuner tables (src/graph/tuning.cc, src/graph/topo.h; versions as noted).
#include "simulator/collectives/nccl_tables.hpp"

namespace shardplan::nccl {

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
    case GpuArch::kAda:  // sm89: NCCL's tuner indexes its tables by compute capability, >= 80 and < 90 is
                         // AMPERE_COMPCAP_IDX (src/graph/tuning.cc ncclTopoTuneModel)
      return ampere;
    case GpuArch::kHopper:
      return hopper;
    case GpuArch::kBlackwell:
      return blackwell;
    default:  // CDNA 3/4 (RCCL: its own tuning model is not modelled, the plan warns) and other
      return ampere;
  }
}

// NCCL 2.26 (v2.26.2-1, src/graph/tuning.cc) tuned Blackwell as twice Hopper: perChMaxRingLL128Bws
// 2 x 36.7, perChMaxTreeLL128Bws 2 x {36.7, 36.7, 29.0}, perChMaxTreeBws 2 x {38.7, 41.4, 36.0}, llMaxBws
// 2 x Hopper; NVIDIA replaced them by the measured rows above (2.29/2.30: tree 24.0 GB/s per channel over 4+
// nodes, not 72). The tuner still *chooses* with its own release's table, while the hardware runs at what the
// later table records: collective_cost picks with these and times with the baseline (the choice/time split).
// 2.26 has no perChMaxNVLSTreeBws table (the NVLS-tree row is the baseline's and is not used for choosing).
const ArchConsts& blackwell_nccl226() {
  static const ArchConsts b{40.1, 50.0, 282.0, 73.4, {77.4, 82.8, 72.0}, {73.4, 73.4, 58.0}, {0, 96.0, 80.0},
                            0.74};
  return b;
}

}  // namespace shardplan::nccl

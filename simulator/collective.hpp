// Collective cost model after NCCL's own (mechanics.md §4.4, NCCL 2.30 src/graph/tuning.cc): for each enabled
// algorithm (ring, tree, NVLS) and protocol (LL, LL128, Simple), t = latency + bytes / bandwidth, and the fastest
// wins, as NCCL's tuner picks. All-gather and reduce-scatter are sized by the whole buffer.
#pragma once
#include <string>

#include "core/collectives.hpp"
#include "core/units.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

struct CollectiveCost {
  double time_s = 0;
  const char* algorithm = "none";  ///< ring, tree, nvls, or "calibrated"
  const char* protocol = "none";   ///< LL, LL128, Simple
};

/// Efficiency constants of the analytic model; each documented in docs/model.md.
struct CollectiveConstants {
  double nvlink_efficiency = 0.824;  ///< NCCL's usable NVLink busbw / line rate: 18 x 20.6 GB/s of 450 GB/s (H100)
  double nic_efficiency = 0.92;      ///< usable NIC busbw / line rate (NCCL inter speed 48 of 50 GB/s, less protocol)
  double pcie_efficiency = 0.8;
};

/// Analytic time of one collective on `buffer_bytes` (the whole buffer) over the group.
CollectiveCost collective_cost(CollectiveKind kind, double buffer_bytes, const GroupView& g,
                               const CollectiveConstants& c = {});

}  // namespace shardplan

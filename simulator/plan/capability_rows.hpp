// One capability table row as the runtimes' lists write it (capabilities.cpp), and the lists kept in files of
// their own: the token dispatch backends' rows (ep_backend.cpp).
#pragma once
#include <vector>

#include "simulator/plan/capabilities.hpp"

namespace shardplan {

struct CapabilityRow {
  Feature feature;
  Support support;
  const char* source;  ///< file and version
  const char* note;    ///< what the runtime does, or why it is refused and what to use instead
};

/// The rows of the token dispatch backend features (kEpAllGather, kEpDeepEp, kEpDeepEpWithoutEp) of runtime
/// `r`.
const std::vector<CapabilityRow>& ep_backend_capability_rows(Runtime r);

/// The dispatch backend runtime `r` uses when the plan names none: torchtitan's comm_backend "standard"
/// (all-to-all), DeepSpeed's _AllToAll, Megatron-core 0.8.0's moe_token_dispatcher_type "allgather".
EpBackend default_ep_backend(Runtime r);

}  // namespace shardplan

// Internal to simulator/plan/capabilities*.cpp and ep_backend.cpp: one row of the capability table, and the
// rows kept in files of their own (capabilities.cpp fills the table from all of them): activation offload
// (capabilities_activation_offload.cpp), the token dispatch backends (ep_backend.cpp), DeepSpeed ZeRO++
// (capabilities_zeropp.cpp).
#pragma once
#include <initializer_list>
#include <span>
#include <vector>

#include "simulator/plan/capabilities.hpp"

namespace shardplan {

struct Row {
  Feature feature;
  Support support;
  const char* source;  ///< file and version
  const char* note;    ///< what the runtime does, or why it is refused and what to use instead
};
using CapabilityRow = Row;

/// The activation-offload rows of runtime `r` (capabilities_activation_offload.cpp).
const std::initializer_list<Row>& activation_offload_rows(Runtime r);

/// The rows of DeepSpeed ZeRO++'s features (kHpz .. kZeroppWithEp) for runtime `r` (capabilities_zeropp.cpp).
std::span<const CapabilityRow> zeropp_rows(Runtime r);

/// The rows of the token dispatch backend features (kEpAllGather, kEpDeepEp, kEpDeepEpWithoutEp) of runtime
/// `r` (ep_backend.cpp).
const std::vector<CapabilityRow>& ep_backend_capability_rows(Runtime r);

/// The dispatch backend runtime `r` uses when the plan names none: torchtitan's comm_backend "standard"
/// (all-to-all), DeepSpeed's _AllToAll, Megatron-core 0.8.0's moe_token_dispatcher_type "allgather".
EpBackend default_ep_backend(Runtime r);

}  // namespace shardplan

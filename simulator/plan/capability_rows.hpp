// Internal to simulator/plan/capabilities*.cpp and ep_backend.cpp: one row of the capability table, and the
// rows kept in files of their own (capabilities.cpp fills the table from all of them): each runtime's own
// (capabilities_torch.cpp, capabilities_deepspeed_megatron.cpp), activation offload
// (capabilities_activation_offload.cpp), the token dispatch backends (ep_backend.cpp), DeepSpeed ZeRO++
// (capabilities_zeropp.cpp).
#pragma once
#include <span>

#include "simulator/plan/capabilities.hpp"

namespace shardplan {

struct Row {
  Feature feature;
  Support support;
  const char* source;  ///< file and version
  const char* note;    ///< what the runtime does, or why it is refused and what to use instead
};

/// Runtime `r`'s list among the four (in Runtime's order): how each file of rows answers for a runtime.
inline std::span<const Row> rows_of(Runtime r, std::span<const Row> fsdp2, std::span<const Row> fsdp1,
                                    std::span<const Row> deepspeed, std::span<const Row> megatron) {
  switch (r) {
    case Runtime::kFsdp2:
      return fsdp2;
    case Runtime::kFsdp1:
      return fsdp1;
    case Runtime::kDeepSpeed:
      return deepspeed;
    case Runtime::kMegatron:
      return megatron;
  }
  return fsdp2;
}

/// Each runtime's own rows: FSDP2 and FSDP1 (capabilities_torch.cpp), DeepSpeed and Megatron-core
/// (capabilities_deepspeed_megatron.cpp).
std::span<const Row> fsdp2_rows();
std::span<const Row> fsdp1_rows();
std::span<const Row> deepspeed_rows();
std::span<const Row> megatron_rows();

/// The activation-offload rows of runtime `r` (capabilities_activation_offload.cpp).
std::span<const Row> activation_offload_rows(Runtime r);

/// The rows of DeepSpeed ZeRO++'s features (kHpz .. kZeroppWithEp) for runtime `r` (capabilities_zeropp.cpp).
std::span<const Row> zeropp_rows(Runtime r);

/// The rows of the block-scaled recipes (kMxfp8, kNvfp4) for runtime `r` (capabilities_blockfp.cpp).
std::span<const Row> blockfp_rows(Runtime r);

/// The rows of the chunked loss (kChunkedLoss .. kChunkedLoss16) for runtime `r` (capabilities_loss.cpp).
std::span<const Row> chunked_loss_rows(Runtime r);

/// The rows of the expert capacity factor (kMoeCapacity, kMoeCapacityDispatcher) for runtime `r`
/// (capabilities_moe_capacity.cpp).
std::span<const Row> moe_capacity_rows(Runtime r);

/// The rows of the token dispatch backend features (kEpAllGather, kEpDeepEp, kEpDeepEpWithoutEp) and of the
/// expert loop under EP (kMoeLoopWithEp) of runtime
/// `r` (ep_backend.cpp).
std::span<const Row> ep_backend_capability_rows(Runtime r);

/// The dispatch backend runtime `r` uses when the plan names none: torchtitan's comm_backend "standard"
/// (all-to-all), DeepSpeed's _AllToAll, Megatron-core 0.8.0's moe_token_dispatcher_type "allgather".
EpBackend default_ep_backend(Runtime r);

}  // namespace shardplan

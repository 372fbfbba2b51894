// Lowering, context and expert parallelism of one unit: the ring attention's K/V exchange on the CP
// communicator (the share the attention compute does not hide blocks the compute stream, the rest runs beside
// it) and the MoE token dispatch and combine on the EP communicator (blocking; all-to-all, all-gather +
// reduce-scatter or DeepEP by --ep-backend), per pass (docs/model.md "Context
// parallelism", "Expert parallelism"; costs from context_parallel.cpp and expert_parallel.cpp).
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

namespace {
/// The trace name of one pass's dispatch + combine by backend (one comm kind, CommKind::kAllToAll, for all).
const char* ep_label(EpBackend b) {
  switch (b) {
    case EpBackend::kAllGather:
      return "ep dispatch all_gather + combine reduce_scatter";
    case EpBackend::kDeepEp:
      return "ep DeepEP dispatch + combine";
    case EpBackend::kAllToAll:
      break;
  }
  return "ep all_to_all";
}
}  // namespace

std::int32_t Lowering::cp_ep_collectives(int u, int mb, bool backward, std::int32_t gate) {
  const SimUnit& un = unit(u);
  if (un.cp_fwd_s <= 0 && un.a2a_s <= 0) return gate;
  // Full AC re-runs the block's forward in backward, ring attention and all-to-alls included. Selective AC
  // keeps the attention outputs when torchtitan's op-level policy saves the plan's SDPA op; without it
  // (cuDNN under the pre-0.2.1 save list) the ring attention, which the policy sees as that one SDPA op, runs
  // again in backward with its K/V exchange.
  const bool recompute_attention =
      p_.ac == AcMode::kFull || (p_.ac == AcMode::kSelective && !p_.sac_saves_sdpa());
  const bool recompute = backward && p_.ac == AcMode::kFull && un.blocks > 0;
  const bool recompute_ring = backward && recompute_attention && un.blocks > 0;
  auto add = [&](std::uint8_t lane, CommKind kind, double s, int n, std::int32_t dep, const char* what) {
    return unit_collective(lane, kind, s, n, dep, K_.collective_launch_s, u, mb, backward, what);
  };
  if (un.cp_fwd_s > 0) {
    const double s = backward ? un.cp_bwd_s + (recompute_ring ? un.cp_fwd_s : 0.0) : un.cp_fwd_s;
    const double exposed =
        backward ? un.cp_bwd_exposed_s + (recompute_ring ? un.cp_fwd_exposed_s : 0.0) : un.cp_fwd_exposed_s;
    const int n = backward ? un.cp_bwd_count + (recompute_ring ? un.cp_fwd_count : 0) : un.cp_fwd_count;
    out_.comm[static_cast<int>(CommKind::kCpRing)].bytes_per_rank +=
        backward ? un.cp_bwd_bytes + (recompute_ring ? un.cp_fwd_bytes : 0.0) : un.cp_fwd_bytes;
    const std::int32_t after = gate >= 0 ? gate : last_compute_;
    std::int32_t hidden_after = after;
    if (exposed > 0) gate = hidden_after = add(kLaneCp, CommKind::kCpRing, exposed, n, after, "cp ring");
    if (s - exposed > 0)
      add(kLaneCp, CommKind::kCpRing, s - exposed, exposed > 0 ? 0 : n, hidden_after, "cp ring (overlapped)");
  }
  if (un.a2a_s > 0) {
    const double reps = recompute ? 2.0 : 1.0;
    out_.comm[static_cast<int>(CommKind::kAllToAll)].bytes_per_rank += reps * un.a2a_bytes;
    gate = add(kLaneEp, CommKind::kAllToAll, reps * un.a2a_s, static_cast<int>(reps) * un.a2a_count,
               gate >= 0 ? gate : last_compute_, ep_label(p_.ep_dispatch()));
  }
  return gate;
}

}  // namespace shardplan::detail

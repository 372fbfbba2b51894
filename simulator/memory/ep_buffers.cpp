// DeepEP v2's ElasticBuffer sized as DeepEP computes it (deepseek-ai/DeepEP at dd758ca:
// csrc/elastic/buffer.hpp calculate_buffer_size, get_dispatch_buffer_size, get_combine_buffer_size; the token
// layouts of csrc/kernels/elastic/dispatch.hpp and combine.hpp; deep_ep/include/deep_ep/common/layout.cuh
// TokenLayout, BufferLayout), with torchtitan 0.3.0's arguments (torchtitan/distributed/deepep/deepep.py
// get_buffer).
#include "simulator/memory/ep_buffers.hpp"

#include <algorithm>

#include "core/checked.hpp"
#include "simulator/cost/cost.hpp"

namespace shardplan {

namespace {

/// TokenLayout::get_num_bytes<false>: each part aligned to 32 bytes. Metadata: top-k indices and weights
/// (4 + 4 bytes each), and with `with_metadata` (dispatch) the source rank/token and top-k slots
/// ((1 + top_k) x 4).
std::int64_t token_bytes(std::int64_t hidden_bytes, int top_k, bool with_metadata) {
  const std::int64_t a = fw::kDeepEpTmaAlignBytes;
  const std::int64_t meta = std::int64_t{top_k} * 8 + (with_metadata ? (1 + std::int64_t{top_k}) * 4 : 0);
  return round_up(hidden_bytes, a) + round_up(meta, a);
}

/// BufferLayout::get_num_bytes: ranks x tokens per rank x bytes per token.
std::int64_t layout(std::int64_t token, std::int64_t ranks, std::int64_t tokens) {
  return mul_checked(mul_checked(token, ranks, "DeepEP buffer"), tokens, "DeepEP buffer");
}

}  // namespace

DeepEpBuffer deepep_buffer(std::int64_t hidden, int top_k, std::int64_t max_tokens_per_rank,
                           int scaleout_ranks, int scaleup_ranks) {
  DeepEpBuffer b;
  const std::int64_t C = max_tokens_per_rank, S = scaleout_ranks, U = scaleup_ranks, R = S * U;
  const std::int64_t k = top_k == 0 ? 32 : top_k;  // DeepEP: num_topk 0 is sized as 32
  const std::int64_t hidden_bytes = mul_checked(hidden, 2, "DeepEP buffer");  // bf16 dispatch and combine
  const std::int64_t D = token_bytes(hidden_bytes, static_cast<int>(k), true);
  const std::int64_t Cb = token_bytes(hidden_bytes, static_cast<int>(k), false);
  const std::int64_t channels = fw::kDeepEpMaxChannels;
  if (S == 1) {
    // Direct mode over NVLink: no send buffer; receive slots for every rank's C tokens. Combine with
    // multiple reductions: min(ranks, top_k) slots of C tokens.
    b.dispatch_bytes = layout(D, R, C);
    b.combine_bytes = layout(Cb, std::min(R, k), C);
  } else {
    // Hybrid mode: scale-up receive (U ranks x S x C), scale-out send (C), scale-out receive (S x (C +
    // channels)); combine: scale-up receive min(U, k) x S x C, scale-out receive min(S, k) x C, scale-out
    // send S x (C + channels).
    b.dispatch_bytes =
        add_checked(add_checked(layout(D, U, S * C), layout(D, 1, C)), layout(D, S, C + channels));
    b.combine_bytes =
        add_checked(add_checked(layout(Cb, std::min(U, k), S * C), layout(Cb, std::min(S, k), C)),
                    layout(Cb, 1, S * (C + channels)));
  }
  b.buffer_bytes = round_up(std::max(b.dispatch_bytes, b.combine_bytes), fw::kDeepEpBufferAlignBytes);
  b.workspace_bytes = fw::kDeepEpWorkspaceBytes;
  return b;
}

std::int64_t deepep_max_tokens_per_rank(const Plan& p) {
  // Not the busiest rank's routed rows (moe_expert_rows, which the all-to-all and DeepEP's traffic follow,
  // --moe-imbalance included): the buffer is sized once for the tokens each rank may dispatch
  // (torchtitan 0.3.0 distributed/deepep/deepep.py get_buffer, `num_max_tokens_per_rank`, "the buffer is
  // sized statically"), with a receive slot for every rank's C tokens (deepep_buffer), so no routing
  // imbalance can overflow it.
  const std::int64_t local_batch = p.pp > 1 ? std::int64_t{p.mbs} * p.grad_accum : p.mbs;
  return mul_checked(local_batch, p.seq, "DeepEP tokens per rank") / (std::int64_t{p.cp} * p.tp);
}

Bytes ep_dispatch_buffer_bytes(const Plan& p, const ModelGraph& model, const Cluster& cluster) {
  if (p.ep <= 1 || p.ep_dispatch() != EpBackend::kDeepEp) return 0;
  int top_k = 0;
  for (const Layer* l : model.order())
    if (l->moe_experts > 0) top_k = std::max(top_k, l->moe_top_k);
  if (top_k == 0) return 0;
  // The EP group: ep ranks, tp apart (torchtitan's sparse mesh). DeepEP's scale-up domain is the ranks its
  // NCCL communicator can reach by load/store (ncclTeamLsa: one NVLink domain); without NVLink each rank is
  // its own domain.
  const GroupView g = cluster.group(p.ep, p.tp);
  const int scaleup = g.intra_nvlink ? g.ranks_per_node : 1;
  const int scaleout = g.ranks / scaleup;
  // One buffer per process (get_buffer reuses it for every MoE layer: same group, same size).
  return deepep_buffer(model.spec().hidden, top_k, deepep_max_tokens_per_rank(p), scaleout, scaleup).total();
}

}  // namespace shardplan

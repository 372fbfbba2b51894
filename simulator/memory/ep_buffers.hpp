// Buffers the token dispatch backend holds for the whole run outside PyTorch's caching allocator
// (docs/model.md "Token dispatch backends"): DeepEP v2's ElasticBuffer, which torchtitan 0.3.0 creates once
// per process (torchtitan/distributed/deepep/deepep.py get_buffer) in NCCL symmetric memory.
#pragma once
#include <cstdint>

#include "core/units.hpp"
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

/// One rank's DeepEP v2 ElasticBuffer, in bytes: `buffer_bytes` is ElasticBuffer.get_buffer_size_hint(group,
/// num_max_tokens_per_rank, hidden, num_topk) with bf16 dispatch and DeepEP's defaults (hybrid mode, multiple
/// reductions), the larger of the dispatch and combine layouts aligned to 2 MiB (csrc/elastic/buffer.hpp
/// calculate_buffer_size); `workspace_bytes` the symmetric-memory workspace in front of it.
struct DeepEpBuffer {
  Bytes dispatch_bytes = 0, combine_bytes = 0;  ///< the two layouts before alignment
  Bytes buffer_bytes = 0, workspace_bytes = 0;
  Bytes total() const { return buffer_bytes + workspace_bytes; }
};
/// `scaleout_ranks`: NVLink domains the EP group spans (DeepEP's RDMA ranks); `scaleup_ranks`: its ranks in
/// one domain (NVLink ranks); `max_tokens_per_rank`: tokens one rank dispatches per forward.
DeepEpBuffer deepep_buffer(std::int64_t hidden, int top_k, std::int64_t max_tokens_per_rank,
                           int scaleout_ranks, int scaleup_ranks);

/// Tokens one rank dispatches per MoE forward as torchtitan 0.3.0 sizes DeepEP's buffer
/// (models/common/token_dispatcher.py: training.local_batch_size x seq_len / (cp x tp); local_batch_size is
/// the micro-batch, or under PP the rank's whole local batch).
std::int64_t deepep_max_tokens_per_rank(const Plan& p);

/// The dispatch backend's persistent buffers of one rank (bytes): DeepEP's ElasticBuffer with --ep-backend
/// deepep, ep > 1 and MoE layers in the model; 0 otherwise (the all-to-all and all-gather backends use NCCL
/// collectives on PyTorch-allocated tensors).
Bytes ep_dispatch_buffer_bytes(const Plan& p, const ModelGraph& model, const Cluster& cluster);

}  // namespace shardplan

// The chunked loss's plan checks (docs/model.md "Chunked loss").
#include "simulator/plan/loss_plan.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace shardplan {

void check_loss_chunks(const Plan& p) {
  if (p.loss() != LossImpl::kChunked) {
    if (p.loss_chunks != 0)
      throw InputError::flag("--loss-chunks", "applies only to --loss-impl chunked (the loss is " +
                                                  std::string(to_string(p.loss())) + ")");
    return;
  }
  // ChunkedLossWrapper._chunk_local splits the local sequence into equal chunks (GradAccumulator writes
  // each at chunk index x chunk length).
  if (p.seq % p.chunks() != 0)
    throw InputError::flag("--loss-chunks",
                           "sequence " + std::to_string(p.seq) + " does not divide into " +
                               std::to_string(p.chunks()) +
                               " chunks (torchtitan's ChunkedLossWrapper needs equal chunks)");
}

LossDims loss_dims(const Plan& p, const ModelSpec& s, double tokens) {
  LossDims x;
  x.tokens = tokens;
  x.vocab = static_cast<double>(s.vocab) / p.tp;
  x.hidden = static_cast<double>(s.hidden);
  x.chunks = p.loss() == LossImpl::kChunked ? p.chunks() : 1;
  x.mbs = p.mbs;
  x.shard = std::max(p.fsdp_ranks(), 1);
  x.compute_bytes = p.compute_bytes();
  x.loss_bytes = p.loss_dtype == Dtype::kFp32 ? 4.0 : p.compute_bytes();
  x.reduce_bytes = p.reduce() == Dtype::kFp32 ? 4.0 : 2.0;
  return x;
}

}  // namespace shardplan

// The chunked loss's plan checks (--loss-impl chunked, --loss-chunks; docs/model.md "Chunked loss").
#pragma once
#include "simulator/model/model.hpp"
#include "simulator/plan/plan_types.hpp"

namespace shardplan {

/// --loss-chunks only with --loss-impl chunked, and the sequence divisible by the chunk count (torchtitan
/// 0.3.0 components/loss.py:670 torch._check(seq_len % num_chunks == 0)); InputError naming the flag.
void check_loss_chunks(const Plan& p);

/// The sizes of the loss tensors of plan `p` on model `s` for `tokens` tokens of this rank (the vocabulary
/// and the output projection split by TP, the chunk count, the dtypes' bytes).
LossDims loss_dims(const Plan& p, const ModelSpec& s, double tokens);

}  // namespace shardplan

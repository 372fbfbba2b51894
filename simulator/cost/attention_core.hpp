// Materialised attention cores (Megatron's fused scale-mask-softmax, Hugging Face eager attention): the
// b x heads x s x s score tensor each attention layer writes, the memory-bound passes over it, what autograd
// saves of it and its backward's transient, counted from the frameworks' code (docs/model.md "Materialised
// attention"). Flash attention (Plan::attention == kFlash) has none of these: every function answers 0.
#pragma once
#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

class CostModel;

/// Per element of one layer's score tensor (bytes): HBM traffic of the memory-bound kernels of one forward
/// and one backward, the tensors saved for backward (one entry per tensor, 0 = none), and the bytes live at
/// the backward's worst op (the saved ones included).
struct ScorePasses {
  double fwd_bytes = 0, bwd_bytes = 0;
  double saved[3] = {0, 0, 0};
  double bwd_peak_bytes = 0;
  double saved_bytes() const { return saved[0] + saved[1] + saved[2]; }
};

/// The passes of the plan's attention core; `alibi` = the model adds ALiBi biases through baddbmm's input
/// (Megatron-DeepSpeed). All zero for flash attention.
ScorePasses score_passes(const Plan& p, bool alibi);

/// Score elements one attention layer writes on one rank for `tokens` tokens (micro-batch x seq): tokens x
/// heads / tp x seq (each query row holds every key position: the causal half is masked, not skipped). 0 for
/// flash attention and for layers without an attention core.
double score_elems(const Layer& l, const Plan& p, double tokens);

/// Bytes one attention layer saves of its score tensors (score_elems x ScorePasses::saved).
double score_saved_bytes(const Layer& l, const Plan& p, double tokens);

/// Forward time of the materialised core of one attention layer: the two batched GEMMs over whole s x s rows
/// (QK^T: s x s x head_dim, PV: s x v_head_dim x s per batch of micro-batch x heads / tp; CostModel::gemm_s)
/// and the forward passes at the HBM bandwidth (CostModel::memory_s). `gemm_s` receives the GEMM part alone
/// (the backward runs two GEMMs of each shape).
double score_core_fwd_s(const Layer& l, const Plan& p, bool alibi, const CostModel& costs, double tokens,
                        double* gemm_s = nullptr);
/// Backward time: twice the forward GEMMs plus the backward passes.
double score_core_bwd_s(const Layer& l, const Plan& p, bool alibi, const CostModel& costs, double tokens);

}  // namespace shardplan

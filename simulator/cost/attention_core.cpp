// Materialised attention cores: pass counts, saved tensors and time of the s x s score tensor (docs/model.md
// "Materialised attention"; the counts are read from the code cited at each term).
#include "simulator/cost/attention_core.hpp"

#include <algorithm>

#include "simulator/cost/cost_model.hpp"

namespace shardplan {

ScorePasses score_passes(const Plan& p, bool alibi) {
  ScorePasses r;
  if (p.attention == AttentionCore::kFlash) return r;
  const double bc = p.compute_bytes();  // the scores' dtype (the compute dtype)
  const bool drop = p.attention_dropout;
  // torch.nn.Dropout on CUDA (at::native_dropout, fused): reads the probabilities, writes the dropped ones
  // and a 1-byte bool mask, which its backward reads with the gradient to write the input gradient.
  const double drop_fwd = drop ? 2 * bc + 1 : 0.0, drop_bwd = drop ? 2 * bc + 1 : 0.0;
  if (p.attention == AttentionCore::kFusedSoftmax) {
    // bigscience-workshop/Megatron-DeepSpeed 1cb76a64 (2022-03), megatron/model/transformer.py
    // ParallelAttention.forward: scores = baddbmm(alibi or empty, Q, K^T, beta, alpha = 1/sqrt(d)) into a
    // new [b*np, s, s] tensor; probs = FusedScaleMaskSoftmax (GPT: the causal kernel
    // ScaledUpperTriangMaskedSoftmax); attention_dropout; context = bmm(probs, V).
    // ALiBi (beta != 0): aten baddbmm_out_cuda_impl copies the expanded [b*np, 1, s] bias into the result
    // (writes s^2) and cuBLAS bgemm reads it back as C (reads s^2); without ALiBi beta = 0 and C is not read.
    const double alibi_fwd = alibi ? 2 * bc : 0.0;
    // scaled_upper_triang_masked_softmax.h: each row i reads its i + 1 unmasked scores and writes the whole
    // row (zeros above the diagonal): (s + 1) / 2s of the elements read on average; the backward reads the
    // gradient and the softmax output over the same triangle and writes the input gradient in place over the
    // whole row ("backward pass is completely in-place", scaled_upper_triang_masked_softmax_cuda.cu).
    const double s = static_cast<double>(p.seq);
    const double tri = (s + 1) / (2 * s);
    r.fwd_bytes = alibi_fwd + (tri * bc + bc) + drop_fwd;
    r.bwd_bytes = drop_bwd + (2 * tri * bc + bc);
    // Saved: the softmax output (ScaledUpperTriangMaskedSoftmax.forward ctx.save_for_backward), and with
    // dropout its mask and the dropped probabilities (bmm's saved input). The raw scores are not saved
    // (baddbmm's backward needs Q and K only).
    r.saved[0] = bc;
    if (drop) r.saved[1] = 1, r.saved[2] = bc;
    // Backward, op by op: bmm's backward writes the probabilities' gradient (bc) beside the whole saved set;
    // dropout's backward writes its input gradient once the dropped probabilities are freed; the softmax
    // backward works in place. Worst: saved + bc.
    r.bwd_peak_bytes = r.saved_bytes() + bc;
    return r;
  }
  // Hugging Face transformers GPT2Attention._attn (2022, commit 0010f602, the module the Lightning GPT-2 rows
  // ran): w = matmul(Q, K^T); w = w / full([], sqrt(d)); w = where(causal_mask, w, min); w = w +
  // attention_mask; w = softmax(w, -1); w = w.type(V.dtype); w = dropout(w); matmul(w, V). Each op is its
  // own kernel. Under autocast (bf16-mixed) the fp32 extended attention mask (GPT2Model: cast to the fp32
  // parameters' dtype) promotes the sum to fp32, so softmax runs in fp32 (a = 4) and .type casts back; with
  // the model in 16 bits (bf16, bf16-true: DeepSpeed fp16) everything stays 16-bit and .type is a no-op.
  const double a = p.mixed() ? 4.0 : bc;
  const bool cast = a != bc;
  // div (read bc, write bc), where (bc, bc; the broadcast bool mask is a 1 x 1 x s x s buffer), mask add
  // (bc in, a out; the [b, 1, 1, s] mask is broadcast), softmax (a, a), .type (a in, bc out), dropout.
  r.fwd_bytes = 2 * bc + 2 * bc + (bc + a) + 2 * a + (cast ? a + bc : 0.0) + drop_fwd;
  // Backward: dropout; .type's backward casts the gradient to a; softmax backward (_softmax_backward_data:
  // reads the gradient and the output, writes the input gradient); the add passes the gradient through and
  // autograd casts it back to the 16-bit input's dtype (a in, bc out); where writes where(mask, grad, 0);
  // the division grad / sqrt(d).
  r.bwd_bytes = drop_bwd + (cast ? a + bc : 0.0) + 3 * a + (cast ? a + bc : 0.0) + 2 * bc + 2 * bc;
  // Saved: softmax's output (a), and what matmul(w, V) saves: the dropped probabilities with their mask, or
  // without dropout the cast copy (the softmax output itself when no cast).
  r.saved[0] = a;
  if (drop)
    r.saved[1] = 1, r.saved[2] = bc;
  else if (cast)
    r.saved[1] = bc;
  // Worst op of the backward: matmul's (saved + its bc gradient), .type's (softmax output, the bc gradient
  // and its a copy) or softmax's (output, gradient and input gradient, a each).
  r.bwd_peak_bytes = std::max({r.saved_bytes() + bc, 2 * a + bc, 3 * a});
  return r;
}

double score_elems(const Layer& l, const Plan& p, double tokens) {
  if (p.attention == AttentionCore::kFlash || l.attn_heads <= 0) return 0;
  // resolve_plan rejects context parallelism with a materialised core: every rank holds whole rows.
  return tokens * static_cast<double>(l.attn_heads) / p.tp * static_cast<double>(p.seq);
}

double score_saved_bytes(const Layer& l, const Plan& p, double tokens) {
  const double e = score_elems(l, p, tokens);
  return e > 0 ? e * score_passes(p, false).saved_bytes() : 0.0;
}

double score_core_fwd_s(const Layer& l, const Plan& p, bool alibi, const CostModel& costs, double tokens,
                        double* gemm_out) {
  if (gemm_out) *gemm_out = 0;
  const double e = score_elems(l, p, tokens);
  if (e <= 0) return 0;
  const bool fp32 = p.precision == Precision::kFp32;
  const double s = static_cast<double>(p.seq);
  const double batches = tokens / s * static_cast<double>(l.attn_heads) / p.tp;
  // One GEMM per (sequence, head): [s x d] @ [d x s] and [s x s] @ [s x dv] (torch.baddbmm / bmm /
  // matmul over the batch), whole rows: the causal mask is applied after the product.
  const double gemm = batches * (costs.gemm_s(s, s, static_cast<double>(l.attn_head_dim), fp32) +
                                 costs.gemm_s(s, static_cast<double>(l.v_head_dim()), s, fp32));
  if (gemm_out) *gemm_out = gemm;
  return gemm + costs.memory_s(e * score_passes(p, alibi).fwd_bytes);
}

double score_core_bwd_s(const Layer& l, const Plan& p, bool alibi, const CostModel& costs, double tokens) {
  double gemm = 0;
  score_core_fwd_s(l, p, alibi, costs, tokens, &gemm);
  const double e = score_elems(l, p, tokens);
  if (e <= 0) return 0;
  return 2 * gemm + costs.memory_s(e * score_passes(p, alibi).bwd_bytes);
}

}  // namespace shardplan

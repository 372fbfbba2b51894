// The chunked loss's tensors (--loss-impl chunked; docs/model.md "Chunked loss"): torchtitan 0.3.0
// torchtitan/components/loss.py ChunkedLossWrapper (lines 567-835) over FSDP2 (torch 2.15), checked on the
// real wrapper by tools/reference/chunked_loss.py.
//
// The model returns the final norm's output h [B, L, D] (models/common/decoder.py:245, _skip_lm_head) and
// the whole chunk loop runs inside the loss call, in the training loop's forward: for each of the N chunks,
// lm_head on the chunk's hidden states, the cross-entropy, and that chunk's backward (loss.py:742-766). The
// lists model one chunk in the middle of the loop (the loop's steady state, where its peak is) and the
// loop's own buffers around it; the loss's backward only hands the assembled gradient of h to the decoder.
//
// Ops of the eager inner loss (kChunked), with T = this rank's tokens, Tc = T / N, V the vocabulary, D the
// hidden size:
//   0  loop entry: the contiguous chunk copies of h (loss.py:676 `c.contiguous()` of a split along the
//      sequence: a copy when B > 1, a view of h when B = 1), GradAccumulator's fp32 [B, L, D] buffer
//      (loss.py:498 `zeros_like(local, dtype=float32)`), FSDP2's unreduced lm_head gradient held since the
//      first chunk (set_requires_gradient_sync(False), loss.py:731; torch 2.15 _fsdp_param_group.py:712-714
//      keeps it, upcast to the reduce dtype, as the unsharded parameter's .grad), the previous chunk's logits
//      (the `logits` name still binds them, loss.py:748)
//   1  `logits = lm_head(h_chunk)`: Tc x V in the compute dtype; the rebinding frees the previous chunk's
//   2  cross_entropy_loss's `.float()` (loss.py:61): Tc x V fp32, dead when F.cross_entropy returns
//   3  log_softmax's output, saved for its backward (Tc x V fp32)
//   4  chunk_loss.backward() (loss.py:762): nll_loss_backward's gradient (fp32)
//   5  _log_softmax_backward_data's (fp32); the saved output and nll's gradient die with it
//   6  the `.float()`'s backward casts it to the compute dtype
//   7  lm_head's backward: the chunk input's gradient (Tc x D, h_chunk.grad) and the weight's (V x D,
//      compute dtype), the cast gradient freed after it
//   8  AccumulateGrad adds it to the held gradient through an upcast copy (grad_dtype = the reduce dtype,
//      _fsdp_param_group.py:947); the first chunk's becomes the held one. (With a single chunk there is no
//      held gradient: the compute-dtype .grad waits for the reduce-scatter's copy-in at op 9.)
//   9  the last chunk's post-backward (gradient sync back on, loss.py:743-746): FSDP2 copies the held
//      gradient into its reduce-scatter input (V x D, reduce dtype) and frees it. The input outlives the
//      call: post_backward appends it to comm_ctx.reduce_scatter_states (_fsdp_param_group.py:837) and the
//      chunk backwards end no backward iteration (the lm_head call's group post-forward does not run, the
//      norm not having run: no pre-backward hook, no root final callback), so the next post-backward, the
//      head unit's own in the decoder's backward, releases it (rs_wait, max_input_buffers 1): the
//      lowering's held reduce-scatter input (kLossHeldRs). Checked by logging FSDP2's calls on a real
//      one-rank run; the reference lane's FSDPMemTracker replaces the group's hooks by per-module ones and
//      ends an iteration per chunk, so tools/reference/run.py --loss-impl chunked restores them.
//  10  the reduce-scatter output, this rank's V x D / shard: the head weight's sharded gradient (FSDP2 views
//      it), kept to zero_grad (kLossToGrads); GradAccumulator.add `chunk_grad.to(float32)` (loss.py:531),
//      copied into the buffer; h_chunk.grad = None (loss.py:766)
//  11  `grad_accumulator.result().to(hidden_states.dtype)` (loss.py:777): T x D in the compute dtype,
//      saved by _DecoderOutputGradientBackProp (loss.py:858) and returned to the decoder at backward (the
//      head's input gradient). The call returns: the buffer, the chunk copies and the last chunk's logits
//      die.
// (Measured on the real wrapper: tools/reference/chunked_loss.py; the whole step on the reference lane.)
// One representative chunk carries both the steady chunks' peak (ops 5, 8) and the last chunk's reduction
// (ops 9, 10). The compiled inner loss (kChunkedCompiled) replaces ops 2-6 by inductor's forward (two Tc fp32
// statistics, the logits saved) and backward (one Tc x V gradient in the compute dtype), as kCompiled.
#include "simulator/model/loss_tensors.hpp"

namespace shardplan {

namespace {

struct ChunkBuilder {
  std::vector<LossTensor>& out;
  LossKernel k;
  void add(std::string name, LossExtent e, LossDtype d, int made, int freed) {
    LossTensor t;
    t.name = std::move(name);
    t.kernel = k;
    t.vocab = e == LossExtent::kChunkVocab;
    t.dtype = d;
    t.made = static_cast<std::int8_t>(made);
    t.freed = static_cast<std::int8_t>(freed);
    t.extent = e;
    out.push_back(std::move(t));
  }
};

/// The loop's buffers and the previous chunk's logits (op 0), the chunk's logits (op 1); `head_bwd` = the
/// op of lm_head's backward, `end` = the op the call returns at.
void chunk_loop_entry(ChunkBuilder& b, int head_bwd, int end) {
  b.add("h chunks (contiguous copies)", LossExtent::kHiddenCopy, LossDtype::kCompute, 0, end);
  b.add("GradAccumulator buffer", LossExtent::kHidden, LossDtype::kFp32, 0, end);
  b.add("lm_head grad held unreduced (FSDP2 no-sync)", LossExtent::kHeadWeightHeld, LossDtype::kGradHeld, 0,
        head_bwd);
  b.add("previous chunk logits", LossExtent::kChunkVocab, LossDtype::kCompute, 0, 1);
  b.add("chunk logits", LossExtent::kChunkVocab, LossDtype::kCompute, 1, end);
}

/// lm_head's backward at op `f` (the inner loss's gradient freed after it), AccumulateGrad's upcast at
/// f + 1, the last chunk's reduce-scatter input at f + 2 (held past the call) and output at f + 3 (the
/// sharded gradient) with the accumulator's copy, the assembled gradient at f + 4.
void chunk_head_backward(ChunkBuilder& b, int f) {
  b.add("h_chunk.grad", LossExtent::kChunkHidden, LossDtype::kCompute, f, f + 3);
  b.add("lm_head dW (chunk)", LossExtent::kHeadWeightHeld, LossDtype::kCompute, f, f + 1);
  b.add("lm_head dW (single chunk: the .grad reduced)", LossExtent::kHeadWeightSingle, LossDtype::kCompute, f,
        f + 2);
  b.add("dW upcast (AccumulateGrad)", LossExtent::kHeadWeightHeld, LossDtype::kGradHeld, f + 1, f + 1);
  b.add("reduce-scatter input (last chunk)", LossExtent::kHeadWeight, LossDtype::kGradHeld, f + 2,
        kLossHeldRs);
  b.add("reduce-scatter output (last chunk): the sharded grad", LossExtent::kHeadWeightShard,
        LossDtype::kGradHeld, f + 3, kLossToGrads);
  b.add("h_chunk.grad.float", LossExtent::kChunkHidden, LossDtype::kFp32, f + 3, f + 3);
  b.add("accumulated_grad", LossExtent::kHidden, LossDtype::kCompute, f + 4, kLossToHead);
}

void chunked_eager(std::vector<LossTensor>& out) {
  ChunkBuilder b{out, LossKernel::kChunked};
  chunk_loop_entry(b, 9, 11);
  b.add("logits.float", LossExtent::kChunkVocab, LossDtype::kFp32, 2, 3);
  b.add("log_softmax.out", LossExtent::kChunkVocab, LossDtype::kFp32, 3, 5);
  b.add("nll_loss.grad", LossExtent::kChunkVocab, LossDtype::kFp32, 4, 5);
  b.add("log_softmax.grad", LossExtent::kChunkVocab, LossDtype::kFp32, 5, 6);
  b.add("cast.grad", LossExtent::kChunkVocab, LossDtype::kCompute, 6, 7);
  chunk_head_backward(b, 7);
}

void chunked_compiled(std::vector<LossTensor>& out) {
  ChunkBuilder b{out, LossKernel::kChunkedCompiled};
  chunk_loop_entry(b, 6, 8);
  b.add("row_max", LossExtent::kChunkToken, LossDtype::kFp32, 2, 3);
  b.add("log_sum_exp", LossExtent::kChunkToken, LossDtype::kFp32, 2, 3);
  b.add("grad", LossExtent::kChunkVocab, LossDtype::kCompute, 3, 4);
  chunk_head_backward(b, 4);
}

}  // namespace

void add_chunked_loss_tensors(std::vector<LossTensor>& out) {
  chunked_eager(out);
  chunked_compiled(out);
}

}  // namespace shardplan

// The loss layer's tensor lists, one per loss implementation, each entry from the framework source it cites
// and checked on the real loss (tools/reference/loss_tensors.py: the eager and compiled losses on CPU
// tensors, every allocation and free recorded; docs/model.md "Logits and loss").
#include "simulator/model/loss_tensors.hpp"

#include <algorithm>

namespace shardplan {

const char* to_string(LossKernel k) {
  switch (k) {
    case LossKernel::kEager:
      return "eager";
    case LossKernel::kEagerModelUpcast:
      return "eager-model-upcast";
    case LossKernel::kEager16:
      return "eager-16bit";
    case LossKernel::kEagerParallel:
      return "eager-loss-parallel";
    case LossKernel::kEagerModelUpcastParallel:
      return "eager-model-upcast-loss-parallel";
    case LossKernel::kEagerParallel16:
      return "eager-loss-parallel-16bit";
    case LossKernel::kCompiled:
      return "compiled";
    case LossKernel::kCompiledParallel:
      return "compiled-loss-parallel";
    case LossKernel::kMegatron:
      return "megatron-vocab-parallel";
    case LossKernel::kChunked:
      return "chunked";
    case LossKernel::kChunkedCompiled:
      return "chunked-compiled";
  }
  return "?";
}

namespace {

constexpr bool kVocab = true, kPerToken = false;

struct Builder {
  std::vector<LossTensor>& out;
  LossKernel k;
  LossTensor& add(std::string name, bool vocab, LossDtype d, int made, int freed, bool held = false) {
    out.push_back({std::move(name), k, vocab, d, static_cast<std::int8_t>(made),
                   static_cast<std::int8_t>(freed), held});
    return out.back();
  }
};

// ---- forward parts; each returns its op count, the saved output freed at `saved_freed` ----

// torchtitan 0.3.0 components/loss.py cross_entropy_loss, HF transformers 5.23 ForCausalLMLoss: the head's
// logits (compute dtype; the loop's `pred`, deleted after the loss), `.float()` (loss dtype), F.cross_entropy
// = log_softmax (saves its output) + nll_loss. The copy dies when cross_entropy returns, the logits at `del
// pred`.
int eager_forward(Builder& b, int saved_freed) {
  b.add("logits", kVocab, LossDtype::kCompute, 0, 2);
  b.add("logits.float", kVocab, LossDtype::kLoss, 1, 2);
  b.add("log_softmax.out", kVocab, LossDtype::kLoss, 2, saved_freed);
  return 3;
}
// The model returns `output(h).float()` and the loop holds it (torchtitan until mid-2024): the compute-dtype
// logits die inside the model's forward; rebinding `pred` frees the previous micro-step's.
int model_upcast_forward(Builder& b, int saved_freed) {
  b.add("logits", kVocab, LossDtype::kCompute, 0, 1);
  b.add("logits.float", kVocab, LossDtype::kLoss, 1, 2, /*held=*/true);
  b.add("previous logits.float", kVocab, LossDtype::kLoss, kLossCarried, 1);
  b.add("log_softmax.out", kVocab, LossDtype::kLoss, 2, saved_freed);
  return 3;
}
// 16-bit logits read as they are: no copy; log_softmax saves its 16-bit output.
int eager16_forward(Builder& b, int saved_freed) {
  b.add("logits", kVocab, LossDtype::kLoss, 0, 1, /*held=*/true);
  b.add("previous logits", kVocab, LossDtype::kLoss, kLossCarried, 0);
  b.add("log_softmax.out", kVocab, LossDtype::kLoss, 1, saved_freed);
  return 2;
}

// ---- backward parts, from op `f` (the forward's op count); each frees the saved output ----

// Eager: nll_loss_backward writes the log-softmax output's gradient, _log_softmax_backward_data the loss
// input's while both and the saved output are alive; with an upcast loss the `.float()`'s backward casts it.
void eager_backward(Builder& b, int f, bool cast) {
  b.add("nll_loss.grad", kVocab, LossDtype::kLoss, f, f + 1);
  b.add("log_softmax.grad", kVocab, LossDtype::kLoss, f + 1, cast ? f + 2 : kLossToHead);
  if (cast) b.add("cast.grad", kVocab, LossDtype::kCompute, f + 2, kLossToHead);
}

// Loss parallel (torch 2.15 torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward):
// `grad_input = zeros_like(x)` with -1 scattered at the targets, `exp(x)`, their sum, then the product with
// grad_output: four T x V/tp buffers of the loss dtype live together; the `.float()`'s cast after it.
void parallel_backward(Builder& b, int f, bool cast) {
  b.add("exp", kVocab, LossDtype::kLoss, f + 1, f + 2);
  b.add("grad_input.add", kVocab, LossDtype::kLoss, f + 2, f + 3);
  b.add("zeros_like", kVocab, LossDtype::kLoss, f, f + 3);
  b.add("grad_input.mul", kVocab, LossDtype::kLoss, f + 3, cast ? f + 4 : kLossToHead);
  if (cast) b.add("cast.grad", kVocab, LossDtype::kCompute, f + 4, kLossToHead);
}

void eager_kernel(std::vector<LossTensor>& out, LossKernel k) {
  Builder b{out, k};
  const bool parallel = k == LossKernel::kEagerParallel || k == LossKernel::kEagerModelUpcastParallel ||
                        k == LossKernel::kEagerParallel16;
  const bool is16 = k == LossKernel::kEager16 || k == LossKernel::kEagerParallel16;
  const bool model_upcast = k == LossKernel::kEagerModelUpcast || k == LossKernel::kEagerModelUpcastParallel;
  // The saved output's free op: after the backward's input gradient exists (eager: its second op; loss
  // parallel: with the product, its fourth).
  const int f = is16 ? 2 : 3;
  const int saved_freed = parallel ? f + 3 : f + 1;
  if (is16)
    eager16_forward(b, saved_freed);
  else if (model_upcast)
    model_upcast_forward(b, saved_freed);
  else
    eager_forward(b, saved_freed);
  if (parallel)
    parallel_backward(b, f, !is16);
  else
    eager_backward(b, f, !is16);
}

// torch.compile'd cross-entropy (torchtitan since bbb1b616e, 2025-04-02, components/loss.py; torch 2.15
// inductor, checked on the CPU at (1, 64, 202,048) and (1, 64, 1,000) bf16: saved tensors the (T, V) bf16
// logits, the labels and two (T, 1) fp32 statistics; the backward's output code allocates one (T, V) bf16
// buffer, the `.float()` cast fused). The logits are the loop's `pred` and the saved input at once.
void compiled_kernel(std::vector<LossTensor>& out) {
  Builder b{out, LossKernel::kCompiled};
  b.add("logits", kVocab, LossDtype::kCompute, 0, 1, /*held=*/true);
  b.add("row_max", kPerToken, LossDtype::kFp32, 0, 1);
  b.add("log_sum_exp", kPerToken, LossDtype::kFp32, 0, 1);
  b.add("previous logits", kVocab, LossDtype::kCompute, kLossCarried, 0);
  b.add("grad", kVocab, LossDtype::kCompute, 1, kLossToHead);
}

// Compiled under loss_parallel(): inductor traces the DTensor handlers' local ops (torch 2.15, CPU inductor,
// fake process group, T = 64, V/tp = 500): the forward writes two T x V/tp fp32 buffers, a temporary and a
// saved one (with a per-token bool mask), while the logits, not saved, are alive; the backward one T x V/tp
// gradient in the compute dtype.
void compiled_parallel_kernel(std::vector<LossTensor>& out) {
  Builder b{out, LossKernel::kCompiledParallel};
  b.add("logits", kVocab, LossDtype::kCompute, 0, 0, /*held=*/true);
  b.add("fp32.tmp", kVocab, LossDtype::kFp32, 0, 0);
  b.add("fp32.saved", kVocab, LossDtype::kFp32, 0, 1);
  b.add("mask", kPerToken, LossDtype::kBool, 0, 1);
  b.add("previous logits", kVocab, LossDtype::kCompute, kLossCarried, 0);
  b.add("grad", kVocab, LossDtype::kCompute, 1, kLossToHead);
}

// Megatron-core (megatron/core/tensor_parallel/cross_entropy.py, NVIDIA/Megatron-LM 00611e6e;
// models/common/language_module/language_module.py compute_language_model_loss): the output layer's logits
// [s, b, V/tp] in the compute dtype live until GPTModel.forward returns; calculate_logits_max's `.float()` is
// the one fp32 copy, made the softmax in place and saved with target_mask (bool) and masked_target_1d
// (int64); logits_max, predicted_logits and sum_exp_logits are fp32 per-token temporaries. The backward
// computes the gradient in the saved softmax's storage (`grad_input = softmax`; `grad_2d[...] -= ...`;
// `mul_`); the
// `.float()`'s backward casts it to the compute dtype for the output layer.
void megatron_kernel(std::vector<LossTensor>& out) {
  Builder b{out, LossKernel::kMegatron};
  b.add("logits", kVocab, LossDtype::kCompute, 0, 1, /*held=*/true);
  b.add("previous logits", kVocab, LossDtype::kCompute, kLossCarried, 0);
  b.add("logits.float (softmax, in place)", kVocab, LossDtype::kFp32, 1, 2);
  b.add("logits_max", kPerToken, LossDtype::kFp32, 1, 1);
  b.add("target_mask", kPerToken, LossDtype::kBool, 1, 2);
  b.add("masked_target_1d", kPerToken, LossDtype::kInt64, 1, 2);
  b.add("predicted_logits", kPerToken, LossDtype::kFp32, 1, 1);
  b.add("sum_exp_logits", kPerToken, LossDtype::kFp32, 1, 1);
  b.add("cast.grad", kVocab, LossDtype::kCompute, 2, kLossToHead);
}

}  // namespace

LossOps loss_ops(LossKernel k) {
  switch (k) {
    case LossKernel::kEager:
    case LossKernel::kEagerModelUpcast:
      return {3, 6};
    case LossKernel::kEager16:
      return {2, 4};
    case LossKernel::kEagerParallel:
    case LossKernel::kEagerModelUpcastParallel:
      return {3, 8};
    case LossKernel::kEagerParallel16:
      return {2, 6};
    case LossKernel::kCompiled:
    case LossKernel::kCompiledParallel:
      return {1, 2};
    case LossKernel::kMegatron:
      return {2, 3};
    case LossKernel::kChunked:
      return {12, 13};
    case LossKernel::kChunkedCompiled:
      return {9, 10};
  }
  return {};
}

void add_loss_tensors(std::vector<LossTensor>& out) {
  for (LossKernel k :
       {LossKernel::kEager, LossKernel::kEagerModelUpcast, LossKernel::kEager16, LossKernel::kEagerParallel,
        LossKernel::kEagerModelUpcastParallel, LossKernel::kEagerParallel16})
    eager_kernel(out, k);
  compiled_kernel(out);
  compiled_parallel_kernel(out);
  megatron_kernel(out);
  add_chunked_loss_tensors(out);
}

double loss_dtype_bytes(LossDtype d, double compute_bytes, double loss_bytes) {
  switch (d) {
    case LossDtype::kCompute:
      return compute_bytes;
    case LossDtype::kLoss:
      return loss_bytes;
    case LossDtype::kFp32:
      return 4.0;
    case LossDtype::kInt64:
      return 8.0;
    case LossDtype::kBool:
      return 1.0;
    case LossDtype::kGradHeld:
      return compute_bytes;
  }
  return compute_bytes;
}

double loss_dtype_bytes(LossDtype d, const LossDims& x) {
  if (d == LossDtype::kGradHeld) return std::max(x.reduce_bytes, x.compute_bytes);
  return loss_dtype_bytes(d, x.compute_bytes, x.loss_bytes);
}

double loss_tensor_elems(const LossTensor& t, const LossDims& x) {
  const double n = x.chunks;
  switch (t.extent) {
    case LossExtent::kWhole:
      return t.vocab ? x.tokens * x.vocab : x.tokens;
    case LossExtent::kChunkVocab:
      return x.tokens / n * x.vocab;
    case LossExtent::kChunkToken:
      return x.tokens / n;
    case LossExtent::kHidden:
      return x.tokens * x.hidden;
    case LossExtent::kHiddenCopy:
      return x.mbs > 1 ? x.tokens * x.hidden : 0.0;
    case LossExtent::kChunkHidden:
      return x.tokens / n * x.hidden;
    case LossExtent::kHeadWeight:
      return x.vocab * x.hidden;
    case LossExtent::kHeadWeightHeld:
      return x.chunks >= 2 ? x.vocab * x.hidden : 0.0;
    case LossExtent::kHeadWeightShard:
      return x.vocab * x.hidden / x.shard;
    case LossExtent::kHeadWeightSingle:
      return x.chunks == 1 ? x.vocab * x.hidden : 0.0;
  }
  return 0.0;
}

double loss_tensor_bytes(const LossTensor& t, const LossDims& x) {
  return loss_tensor_elems(t, x) * loss_dtype_bytes(t.dtype, x);
}

std::vector<const LossTensor*> loss_tensors_of(const std::vector<LossTensor>& all, LossKernel k) {
  std::vector<const LossTensor*> r;
  for (const LossTensor& t : all)
    if (t.kernel == k) r.push_back(&t);
  return r;
}

}  // namespace shardplan

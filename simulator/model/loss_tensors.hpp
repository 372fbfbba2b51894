// The loss layer's tensors: the logits, their upcast copy, the cross-entropy's saved buffers and the
// gradients of its backward, as each runtime's loss allocates them, with when each is made and freed
// (docs/model.md "Logits and loss"). The lowering allocates and frees exactly these (lowering.cpp
// loss_forward_effects, loss_backward_effects), the lower bound sums the ones saved across forward and
// backward (memory/accounting.cpp), the pipeline stage's cost adds the saved vocabulary-sized ones.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardplan {

/// Which loss implementation allocates the tensors.
enum class LossKernel : std::uint8_t {
  /// torchtitan 0.3.0 components/loss.py cross_entropy_loss (`F.cross_entropy(pred.flatten(0, 1).float(),
  /// ...)`) and Hugging Face transformers 5.23 loss/loss_utils.py ForCausalLMLoss (`logits = logits.float()`,
  /// then nn.functional.cross_entropy): the logits in the compute dtype, an upcast copy in the loss dtype,
  /// the
  /// log-softmax output saved; backward writes nll_loss's and log_softmax's gradients, then the cast.
  kEager,
  /// The same with the loop holding an fp32 model output (torchtitan until mid-2024: the model returned
  /// `output(h).float()`, so the compute-dtype logits die inside the model, before the loss).
  kEagerModelUpcast,
  /// The cross-entropy on 16-bit logits, no upcast (loss dtype = the compute dtype).
  kEager16,
  /// Eager under torchtitan's loss_parallel() (vocab-sharded DTensor logits): the forward as kEager, the
  /// backward torch 2.15 torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward.
  kEagerParallel,
  kEagerModelUpcastParallel,
  kEagerParallel16,
  /// torch.compile'd cross-entropy (torchtitan since bbb1b616e): inductor saves the logits and two per-token
  /// statistics, its backward writes one gradient in the compute dtype.
  kCompiled,
  /// Compiled under loss_parallel(): inductor traces the DTensor handlers' local ops.
  kCompiledParallel,
  /// Megatron-core megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy: one fp32 copy
  /// of the logits (calculate_logits_max's `.float()`) made the softmax in place (`-=`, `exp(out=)`, `div_`)
  /// and saved; its backward writes the gradient into the saved softmax in place (`grad_input = softmax`,
  /// `-=`, `mul_`); the `.float()`'s backward casts it to the compute dtype.
  kMegatron,
  /// torchtitan 0.3.0 components/loss.py ChunkedLossWrapper (--loss-impl chunked): lm_head, the eager
  /// cross-entropy and its backward per sequence chunk inside the loss call (chunked_loss_tensors.cpp).
  kChunked,
  /// The same with the inner loss torch.compile'd (--compile: BaseLoss._maybe_compile, loss.py:309-316).
  kChunkedCompiled,
};
const char* to_string(LossKernel k);

/// Element type of a loss tensor.
enum class LossDtype : std::uint8_t {
  kCompute,  ///< the plan's compute dtype
  kLoss,     ///< the plan's loss dtype (fp32 when upcast, else the compute dtype)
  kFp32,
  kInt64,
  kBool,
  /// FSDP2's held unsharded gradient: the reduce dtype when wider than the compute dtype, else the compute
  /// dtype (torch 2.15 _fsdp_param_group.py _set_unsharded_grad_dtypes, unsharded_grad_dtype).
  kGradHeld,
};

/// What a loss tensor's element count is (T: this rank's tokens, V/tp: its vocabulary, D: hidden size, N:
/// the chunk count).
enum class LossExtent : std::uint8_t {
  kWhole,             ///< T x V/tp when `vocab`, else T
  kChunkVocab,        ///< T/N x V/tp: one chunk's logits
  kChunkToken,        ///< T/N
  kHidden,            ///< T x D
  kHiddenCopy,        ///< T x D when a micro-batch holds more than one sequence (mbs > 1), else 0
  kChunkHidden,       ///< T/N x D
  kHeadWeight,        ///< V/tp x D: the output projection's weight
  kHeadWeightHeld,    ///< V/tp x D when N >= 2, else 0 (FSDP2 holds no gradient across a single chunk)
  kHeadWeightShard,   ///< V/tp x D / shard: this rank's shard of the output projection's gradient
  kHeadWeightSingle,  ///< V/tp x D when N == 1, else 0 (a single chunk's .grad waits for the reduction)
};

/// The sizes a loss tensor's bytes depend on.
struct LossDims {
  double tokens = 0, vocab = 0, hidden = 0;  ///< T, V/tp, D
  int chunks = 1, mbs = 1;
  int shard = 1;  ///< the FSDP ranks the head's gradient is reduce-scattered over
  double compute_bytes = 2, loss_bytes = 4, reduce_bytes = 4;
};

/// One buffer of the loss. Ops are numbered in the loss's issue order, forward then backward; at op k the
/// lowering allocates the tensors made at k (list order), then frees those freed after k (list order; with
/// hold_logits the held one is kept and the carried one freed last).
struct LossTensor {
  std::string name;
  LossKernel kernel = LossKernel::kEager;
  /// Vocabulary-sized: T x V/tp elements (this rank's tokens, the TP rank's vocabulary shard); otherwise
  /// T elements, not divided by TP (per-token statistics, masks, target indices).
  bool vocab = true;
  LossDtype dtype = LossDtype::kLoss;
  std::int8_t made = 0;
  /// The op after which it is freed; kToHead: the gradient the head's backward reads (the head frees it);
  /// kCarried: the previous micro-step's held model output (freed, not made, at `freed`), see `held`.
  std::int8_t freed = 0;
  /// The model output the training loop references (`pred`): with hold_logits it is not freed in this step
  /// (the next micro-step's rebinding frees it: a kCarried entry of the same kernel).
  bool held = false;
  LossExtent extent = LossExtent::kWhole;
  bool operator==(const LossTensor&) const = default;
};

inline constexpr std::int8_t kLossToHead = -1;
inline constexpr std::int8_t kLossCarried = -2;
/// The chunked loss's last reduce-scatter input: kept by FSDP2 past the loss call, released by the next
/// post-backward's reduce-scatter (the lowering's held reduce-scatter input).
inline constexpr std::int8_t kLossHeldRs = -4;
/// The chunked loss's reduce-scatter output: the output projection's sharded gradient, kept to the
/// optimizer step (the step's first micro-batch; a later one's is added into it and freed).
inline constexpr std::int8_t kLossToGrads = -3;

/// The loss's ops: forward ops are [0, forward_ops), backward ops [forward_ops, ops).
struct LossOps {
  int forward_ops = 0, ops = 0;
};
LossOps loss_ops(LossKernel k);

/// Appends every kernel's tensors to a loss layer's list (vocabulary-sized entries are per token of V).
void add_loss_tensors(std::vector<LossTensor>& out);

/// Bytes of one element at the plan's compute and loss dtype sizes.
double loss_dtype_bytes(LossDtype d, double compute_bytes, double loss_bytes);

/// Bytes of one element of dtype `d` at sizes `x`.
double loss_dtype_bytes(LossDtype d, const LossDims& x);

/// Elements of `t` at sizes `x`.
double loss_tensor_elems(const LossTensor& t, const LossDims& x);

/// Bytes of `t` at sizes `x`.
double loss_tensor_bytes(const LossTensor& t, const LossDims& x);

/// Whether `t` is a gradient of the output projection's weight (a gradient, not an activation).
inline bool loss_head_grad(const LossTensor& t) {
  return t.extent == LossExtent::kHeadWeight || t.extent == LossExtent::kHeadWeightHeld ||
         t.extent == LossExtent::kHeadWeightShard || t.extent == LossExtent::kHeadWeightSingle;
}

/// The chunked loss's lists (chunked_loss_tensors.cpp).
void add_chunked_loss_tensors(std::vector<LossTensor>& out);

/// The tensors of kernel `k` in a loss layer's list, in list order (allocation and free order within an op).
std::vector<const LossTensor*> loss_tensors_of(const std::vector<LossTensor>& all, LossKernel k);

/// Whether `t` is saved for the backward: made in forward, freed in backward, not the carried entry.
inline bool loss_saved(const LossTensor& t, const LossOps& o) {
  return t.made < o.forward_ops && (t.freed == kLossToHead || t.freed >= o.forward_ops) &&
         t.freed != kLossCarried;
}

}  // namespace shardplan

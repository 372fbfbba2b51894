// The activation tensors of one layer: every tensor its forward saves for backward or creates and frees, with
// its shape per token, dtype, how tensor parallelism divides it, which activation-checkpointing regimes keep
// it and when it dies otherwise (docs/model.md "Activations: one list of tensors per layer"). The builders in
// activations.cpp derive each entry from torchtitan 0.3.0's model code and torch 2.15's saved tensors; every
// per-token sum, unit cost, lower bound and the allocator replay's activation tensors are sums and filters
// over these lists (simulator/memory/layer_memory.cpp, simulator/lowering/lowering_tensors.cpp).
#pragma once
#include <cstdint>
#include <string>

namespace shardplan {

/// An activation's element type.
enum class ActDtype : std::uint8_t {
  kCompute,  ///< the plan's compute dtype (2 bytes in bf16/fp16, 4 in fp32)
  kFp32,     ///< 4 bytes whatever the compute dtype (statistics: rstd, log-sum-exp; upcast copies, router
             ///< logits)
  kInt64,    ///< 8 bytes (indices, RNG state)
  kBool,     ///< 1 byte (masks)
};

/// How tensor parallelism (torchtitan's plans: sequence parallel between the blocks' layers) divides it.
enum class ActSplit : std::uint8_t {
  kTp,        ///< head- or FFN-sharded: divided by the TP degree (q, k, v, the SDPA outputs, w1 / w3 outputs)
  kSequence,  ///< the residual stream: replicated over TP ranks, divided under sequence parallelism (norm
              ///< inputs, block inputs, reduce-scatter outputs)
  kNone,  ///< never divided: a row-parallel GEMM's output before its reduce-scatter is the partial sum over
          ///< the whole sequence
  /// A MoE layer's token side (its input as the router reads it, the router's, dispatch's and combine's
  /// tensors): on the tokens the MoE code gives each TP rank, moe_token_divisor (layer_memory.cpp).
  kMoeTokens,
};

/// What torchtitan's op-level selective AC does with it (torchtitan 0.3.0
/// distributed/activation_checkpoint.py SelectiveAC: the outputs of the ops in `_get_default_save_ops()` are
/// MUST_SAVE, except every second mm/linear of a checkpointed block; everything else PREFER_RECOMPUTE).
enum class ActSac : std::uint8_t {
  kRecompute,  ///< not saved: recomputed in backward
  kSave,  ///< saved (an odd mm output, the SDPA op's outputs, a reduce-scatter output, the block's input)
  kHalf,  ///< an mm output whose parity in the block's mm count is not tracked (MoE, MLA, post-norm and
          ///< sandwich blocks): counted at half its bytes, the expected share of every-second-mm
};

/// A role that sizes or keeps the tensor by a rule of its own.
enum class ActRole : std::uint8_t {
  kPlain,
  kSdpaOut,  ///< the SDPA kernel's output O; op-level SAC keeps it only when its save list has the plan's
             ///< SDPA op
  kSdpaLse,  ///< its fp32 log-sum-exp per head and query; memory-efficient attention pads the queries to 32
  kBlockInput,  ///< the transformer block's input: the checkpoint's one saved tensor under full AC
};

/// A condition under which the tensor exists at all.
enum class ActOnly : std::uint8_t {
  kAlways,
  kFp32Norm,    ///< only with --fp32-norm (torchtitan's Python fp32 RMSNorm before 3b39d7ab0), eager
  kTp,          ///< only with TP > 1 (the sequence-parallel reduce-scatter outputs)
  kTpGathered,  ///< only where the runtime's TP plan saves a column-parallel input all-gathered over the
                ///< sequence (tp_saves_gathered_input: torchtitan's ColwiseParallel from a Shard(1) input)
  kMoeGrouped,  ///< only with --moe-impl grouped (torchtitan's dispatcher and combine over all routed rows)
  kMoeLoop,     ///< only with --moe-impl loop (Hugging Face's loop over the experts)
  kMoeEp,       ///< only with --moe-impl grouped and --ep > 1 (torchtitan's AllToAllTokenDispatcher)
  // The same tensor under several implementations (docs/model.md "MoE implementations"):
  kMoeHfRouter,     ///< loop, hf-grouped-mm, hf-eager: transformers' TopKRouter (topk values, renormalised)
  kMoeSorted,       ///< grouped, hf-grouped-mm: every routed row sorted by expert, grouped GEMMs
  kMoeExpertLoop,   ///< loop, hf-eager: a Python loop over the experts, index_add_ into zeros
  kMoeHfGroupedMm,  ///< only with --moe-impl hf-grouped-mm (transformers 5.23 grouped_mm_experts_forward)
  kMoeHfEager,      ///< only with --moe-impl hf-eager (transformers 5.23's loop over the 3-D weights)
  kMoeDeepSpeed,    ///< only with --moe-impl deepspeed (DeepSpeed 0.19.8 MOELayer, TopKGate)
};

/// When an eager forward frees it where the regime does not keep it: when Python drops the last reference
/// (docs/model.md "Eager forward transients"; checked against the reference lane's traces of a Llama 3 8B
/// block without AC, under selective and under full AC). A tensor the regime keeps lives until its backward.
enum class ActLife : std::uint8_t {
  kLayer,   ///< a local of the layer's forward: freed when it returns (its input, SDPA's q, k, v and output)
  kAtOnce,  ///< held by nothing but autograd: freed as soon as it is made (rstd, the log-sum-exp)
  kTransient,  ///< freed once the layer's tensor `consumer` has been made (-1: when the layer returns): the
               ///< rotary's temporaries when apply_rotary_emb returns, an MLP operand once its consumer ran
  kBlock,      ///< the residual stream between a block's two residual adds: freed when the block returns
  kOutput,     ///< the layer's output before the residual add: freed once the sum (the next layer's input)
               ///< exists
  kUntracked,  ///< where not saved, not lowered (a reduce-scatter output feeding the residual add)
};

/// The stream whose caching-allocator pool serves it. Every activation is allocated on the default (compute)
/// stream: functional collectives (TP's reduce-scatters) allocate their outputs on the current stream (torch
/// 2.15 torch/distributed/_functional_collectives.py).
enum class ActStream : std::uint8_t { kCompute };

/// One activation tensor of a layer, per token of the layer's input (this rank's tokens under context
/// parallelism) at TP = 1.
struct ActTensor {
  std::string name;      ///< the op output it is ("wq.out", "rope.q", "sdpa.lse"; "input": the layer's input)
  double per_token = 0;  ///< elements per token
  ActDtype dtype = ActDtype::kCompute;
  ActSplit split = ActSplit::kTp;
  /// Saved for backward without activation checkpointing: by eager autograd (and by full AC's recomputation),
  /// by inductor's min-cut partitioner under torch.compile (docs/model.md "Compiled saved tensors").
  bool eager = true, compiled = true;
  ActSac sac = ActSac::kRecompute;
  /// Under torch.compile with op-level SAC the partitioner saves only what backward reads: a saved tensor
  /// read by nothing but a residual add (the output projection's output, a reduce-scatter output) is dropped.
  bool sac_compiled_unread = false;
  ActRole role = ActRole::kPlain;
  ActOnly only = ActOnly::kAlways;
  ActLife life = ActLife::kLayer;
  /// ActLife::kTransient: the index in the layer's list of the tensor after which it dies.
  std::int16_t consumer = -1;
  /// The layer's input: made by the previous layer (a norm's output, a residual add), so the lowering
  /// allocates it there, before the previous layer's output dies.
  bool input = false;
  /// The layer's input that its column-parallel linears save: where the runtime's TP plan all-gathers it
  /// first (ActOnly::kTpGathered), they save the gathered copy (the layer's "all_gather.out") instead of
  /// this sequence shard, which is then not saved (unless it is the checkpoint's block input).
  bool saved_gathered = false;
  ActStream stream = ActStream::kCompute;
  bool expert = false;  ///< a routed expert's tensor (per token: the top_k experts it passes through)
  /// Rows per token on the experts' side of the dispatch (top_k; 0: the token side). Under expert
  /// parallelism such a tensor has one row per row this rank's experts receive after the dispatch all-to-all
  /// (torchtitan 0.3.0 models/common/token_dispatcher.py AllToAllTokenDispatcher.dispatch: routed_input_RD,
  /// R = the received rows; GroupedExperts.forward's grouped GEMMs run on it), not per (token, choice) of
  /// this rank's tokens: the busiest EP rank holds --moe-imbalance times the mean rows (act_rows_scale,
  /// simulator/memory/layer_memory.cpp). Token-side routed tensors (the argsort, the token indices, the
  /// combine's tensors after the return all-to-all) are `expert` with no expert rows.
  std::int32_t expert_rows = 0;
  /// The routed experts of its layer (an expert-side tensor's; 0 elsewhere): an expert capacity is per
  /// expert, so the capped rows are experts x capacity (ep_busiest_rows).
  std::int32_t expert_count = 0;
  /// Saved only as the input of linear layers, for their weight gradients: autograd saves an mm's input
  /// only when the weight requires grad (torch 2.15 derivatives.yaml `mm`: mat2's gradient reads `self`;
  /// the generated autograd saves a variable only for an input that requires grad). `weight_grad_of`: bits
  /// over the layer's tensors (Layer::tensors indices) of those weights; none where the weight lives in
  /// another layer (a tied LM head). A frozen base keeps it only where one of them carries a LoRA adapter,
  /// whose lora_A reads the same x (simulator/model/lora.cpp).
  bool weight_grad_only = false;
  std::uint32_t weight_grad_of = 0;
  /// The layer GEMM whose output it is (index into Layer::gemms, and which of its `count` calls); -1: not a
  /// GEMM output. Op-level SAC's mm parity walks these.
  std::int16_t gemm = -1, call = 0;
  /// How many times torch's save_on_cpu copies it to the host: its pack hook runs once per saved variable,
  /// i.e. once per op that saves the tensor (torch 2.15 torch/csrc/autograd/saved_variable.cpp
  /// SavedVariable::SavedVariable -> set_hooks_and_pack_data; torch/autograd/graph.py save_on_cpu
  /// pack_to_cpu makes a new pinned tensor each time). The attention's input, saved by the mm of wq, wk and
  /// wv: 3. On the device the saved variables share one storage whatever the count: only the host copies and
  /// the D2H / H2D bytes multiply (layer_repacked_bytes).
  std::int8_t packs = 1;
  /// No device storage of its own in the list: a module buffer (the rotary table), the batch (the token
  /// ids), an expanded view of a listed tensor (the MoE combine's scatter index). Listed because torch's
  /// save_on_cpu packs it like any saved tensor, at its own shape: it counts in save_on_cpu's host copies
  /// (layer_repacked_bytes) and in no device sum (act_exists is false).
  bool pack_only = false;
  /// One row per sequence position of this rank (seq / cp), not per token: a buffer the micro-batch's
  /// sequences share by broadcasting (the rotary table). Only with pack_only.
  bool per_position = false;
  bool operator==(const ActTensor&) const = default;
};

/// Bytes of one element of `dtype` at a compute dtype of `compute_bytes`.
inline double act_dtype_bytes(ActDtype dtype, double compute_bytes) {
  switch (dtype) {
    case ActDtype::kCompute:
      return compute_bytes;
    case ActDtype::kFp32:
      return 4.0;
    case ActDtype::kInt64:
      return 8.0;
    case ActDtype::kBool:
      return 1.0;
  }
  return compute_bytes;
}

const char* to_string(ActDtype v);
const char* to_string(ActSplit v);
const char* to_string(ActSac v);
const char* to_string(ActRole v);
const char* to_string(ActOnly v);
const char* to_string(ActLife v);

}  // namespace shardplan

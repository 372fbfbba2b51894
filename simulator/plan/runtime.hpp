// RuntimeTraits: what a training runtime (FSDP2, FSDP1, DeepSpeed ZeRO) does to memory and to the timeline of
// one step, as data. The lowering (lowering.cpp) reads these fields and never asks which runtime it is; a new
// runtime is a new set of traits. Each field cites the mechanism it describes (docs/mechanics.md sections).
#pragma once
#include <cstdint>
#include <vector>

#include "simulator/model/model.hpp"
#include "simulator/plan/plan_types.hpp"

namespace shardplan {

/// CUDA streams that allocate, each with its own caching-allocator pool (docs/mechanics.md §6).
/// kPoolOffloadCopy: the side stream of activation offload's copies (DeepSpeed's offload engine stream `s1`,
/// Megatron's `h2d_stream`), under which the reloaded activations are allocated.
enum Pool : std::uint8_t {
  kPoolDefault = 0,
  kPoolAllGather = 1,
  kPoolReduceScatter = 2,
  kPoolOffloadCopy = 3
};
inline constexpr int kPools = 4;

/// Event-engine lanes: the compute stream, one per NCCL communicator (a communicator serialises its kernels,
/// §3.1), the PCIe copy engines used by CPU offload, and the host CPU running an offloaded optimizer.
enum Lane : std::uint8_t {
  kLaneCompute = 0,
  kLaneShard = 1,    ///< shard-group communicator: FSDP all-gather AND reduce-scatter (one communicator)
  kLaneReplica = 2,  ///< replicate communicator (HSDP all-reduce), or the data-parallel all-reduce
  kLaneTp = 3,       ///< tensor-parallel communicator (sequence-parallel all-gather / reduce-scatter)
  kLanePcie = 4,     ///< host<->device copies of CPU offload
  kLaneHost = 5,     ///< the host CPUs (CPU Adam of an offloaded optimizer)
  kLaneCp = 6,       ///< context-parallel communicator (ring attention's K/V and dK/dV exchange)
  kLaneEp = 7,       ///< expert-parallel communicator (MoE token dispatch / combine all-to-alls)
};
inline constexpr int kLanes = 8;
/// Lanes a plan without context or expert parallelism uses (its traces list only these).
inline constexpr int kLanesWithoutCpEp = 6;

/// How a runtime pads the sharded parameters (§1.8).
enum class Padding : std::uint8_t {
  kPerTensorDim0,  ///< FSDP2: each tensor's dim 0 padded to a multiple of the shard group
  kPerTensor,      ///< DeepSpeed ZeRO-3: each tensor's numel padded to a multiple of the shard group
  kFlatUnit,       ///< FSDP1: one flat parameter per unit padded to a multiple of the shard group
};

/// Which completed task the CPU waits for before issuing the next all-gather (§3.3, §3.4); FSDP2 has none.
enum class GatherLimiter : std::uint8_t {
  kNone,
  kComputeTwoBack,  ///< FSDP1 limit_all_gathers: the compute of the unit that freed two gathers ago
  kFetchTwoBack,    ///< DeepSpeed: at most two fetch events in flight
};

/// How the runtime offloads saved activations to host memory (--activation-offload; docs/model.md
/// "Activation offload").
enum class ActOffloadStyle : std::uint8_t {
  /// torch 2.15 torch/autograd/graph.py save_on_cpu(pin_memory=True): each saved tensor is packed by a copy
  /// into pinned host memory on the current (compute) stream, so the compute stream runs the copy in order;
  /// the GPU tensor is no longer referenced by autograd; unpack copies it back on the compute stream when
  /// its backward node runs (no prefetch).
  kSaveOnCpu,
  /// deepspeed 0.19.8 activation_checkpointing cpu_checkpointing (offload_activations.py
  /// _ActivationOffloadEngine(keep_last_count=1), max_fwd_stash_count=2): the checkpoint inputs of full AC
  /// are copied on a side stream; the newest stays on the GPU, the one before it in the forward stash (its
  /// GPU reference dropped when the next block is offloaded); restore copies back on the side stream when
  /// the block's backward runs and the compute stream waits.
  kCheckpointInputs,
  /// megatron-core 0.8.0 cpu_offload.py AsyncDoubleBufferGroupOffloadHandler: per layer (group) the saved
  /// tensors are copied into a GPU double buffer, the group is copied to the host on a D2H stream at the
  /// next commit after torch.cuda.synchronize(), and in backward each group is reloaded on an H2D stream
  /// one group ahead (num_prefetch_group=1).
  kLayerGroups,
};

/// What fp16-mixed's dynamic loss scaler checks for inf/nan before the step, and the tensors it makes.
enum class ScalerCheck : std::uint8_t {
  /// torch's (Sharded)GradScaler.unscale_: the optimizer's gradients (FSDP: this rank's shards) in the reduce
  /// dtype; found_inf and inv_scale, one fp32 element each (torch 2.15 torch/amp/grad_scaler.py).
  kReducedGrads,
  /// Megatron-core's optimizer: its fp32 main gradients of the distributed optimizer's shard; found_inf.
  kMainGrads,
  /// DeepSpeed: the 16-bit gradients of its partition (ZeRO-0: all of them, copied to fp32 and flattened
  /// by FP16_Optimizer).
  kPartitionGrads,
};

struct RuntimeTraits {
  Runtime runtime = Runtime::kFsdp2;
  // --- tensor parallelism (the capability table, capabilities.hpp) ---
  /// TP activations between the TP regions split along the sequence (all-gather before, reduce-scatter
  /// after each region; torchtitan's SequenceParallel, Megatron's sequence_parallel). False: DeepSpeed
  /// AutoTP, whose activations there are full on every TP rank (memory/layer_memory.cpp
  /// sequence_parallel_divisor).
  bool tp_sequence_parallel = true;
  /// TP collectives are all-reduces: each row-parallel output in forward and each column-parallel input
  /// gradient in backward (deepspeed 0.19.8 module_inject/layers.py LinearAllreduce / ColumnParallel).
  bool tp_all_reduce = false;
  // --- parameters ---
  bool gathers_params =
      false;  ///< parameters sharded at rest and all-gathered per unit (ZeRO-3, FSDP ZeRO-2)
  Padding padding = Padding::kPerTensorDim0;
  bool copy_out = false;  ///< gathered flat buffer copied into per-parameter tensors (FSDP2, DeepSpeed)
  bool hold_forward_ag_output = false;  ///< FSDP2: AG output of unit i kept until unit i+1's copy-out (§1.4)
  bool ag_after_prev_copy_out = false;  ///< FSDP2: AG streams wait for the previous unit's copy-out (§3.2)
  bool cast_buffer_on_ag_stream =
      false;                           ///< mixed precision: the shard cast into a bf16 buffer before the AG
  Pool unsharded_pool = kPoolDefault;  ///< where the unsharded parameters live (FSDP1: the AG output itself)
  bool root_gathered_through_step = false;  ///< FSDP1: root flat parameter (embedding + head) kept (§1.9)
  bool head_not_resharded = false;          ///< FSDP2 (torchtitan): [norm, output] not resharded (§1.9)
  /// FSDP2 with the head as one fully_shard([norm, output]) group: its post-backward fires after the output
  /// projection's backward and the norm's output gradient re-runs its pre-backward, which gathers the unit a
  /// second time (docs/model.md "FSDP2's grouped head in backward").
  bool head_group_regathered = false;
  /// FSDP2 (torchtitan 0.3.0 distributed/fsdp.py, `if model.enable_weight_tying`): with tied embeddings the
  /// embedding, final norm and output projection are ONE fully_shard([tok_embeddings, norm, lm_head]) group,
  /// not resharded after forward: gathered at the embedding's forward and kept to the head's backward, then
  /// gathered again for the norm's backward and for the embedding's (docs/model.md "Tied embeddings").
  bool tied_weight_group = false;
  /// FSDP1: the backward prefetch of the last block is issued from the root's pre-backward hook, which
  /// torch/distributed/fsdp/_runtime_utils.py `_register_pre_backward_hooks` registers on the root's outputs
  /// (the logits): it fires when the logits' gradient is ready, after the loss's backward.
  bool bwd_prefetch_after_loss = false;
  GatherLimiter gather_limiter = GatherLimiter::kNone;
  // --- gradients ---
  bool grads_persistent = false;  ///< gradient partitions live across steps (DeepSpeed ZeRO-2/3)
  bool reduce_scatter = false;    ///< gradients reduce-scattered per unit (ZeRO-2/3); else all-reduced
  bool rs_waits_prev_rs = false;  ///< FSDP2: default stream waits the previous RS before dropping its input
  bool rs_input_held = false;     ///< FSDP2: RS input kept until the next unit's post-backward (§1.4)
  bool rs_cpu_limiter = false;    ///< DeepSpeed: at most two reduce events pending (§3.4)
  Pool rs_input_pool = kPoolReduceScatter;
  /// FSDP2 before pytorch PR 129721: the sharded gradients are views into the reduce-scatter output (one
  /// allocation under the reduce-scatter stream, no copy) when the reduce dtype is the parameters' dtype.
  bool rs_grads_view_output = false;
  bool reduce_only_at_boundary = false;  ///< DeepSpeed ZeRO-1: gradients reduced at the accumulation boundary
  bool grad_kept_until_boundary =
      false;  ///< DDP, DeepSpeed ZeRO-1: full .grad created in backward, kept to the step
  bool allreduce_in_compute_dtype = false;  ///< DeepSpeed ZeRO-1/2 bucket all-reduce in the 16-bit dtype
  bool ipg_bucket_per_backward = false;  ///< DeepSpeed ZeRO-1/2: IPG bucket allocated each backward (§1.6)
  bool ipg_bucket_persistent = false;    ///< DeepSpeed ZeRO-3: IPG bucket allocated at init (§1.6)
  bool ddp_reducer_buckets = false;      ///< DDP Reducer buckets: a second copy of every gradient (§1.2)
  bool autocast_weight_copies = false;   ///< DDP under autocast: bf16 weight copies live fwd -> bwd
  bool param_all_gather_after_step = false;  ///< DeepSpeed ZeRO-1/2: updated 16-bit params all-gathered
  // --- Megatron-core DistributedDataParallel + distributed optimizer (core_r0.8.0) ---
  /// The persistent gradient buffer is reduced in buckets at the last micro-batch: a bucket's collective is
  /// issued when the backward has produced its last gradient (param_and_grad_buffer.py register_grad_ready,
  /// is_last_microbatch; overlap_grad_reduce), in place on the buffer (no extra buffer): a reduce-scatter
  /// over the data-parallel x context-parallel ranks with the distributed optimizer, an all-reduce without.
  bool grad_buffer_buckets = false;
  /// Bucket size in elements (distributed_data_parallel.py: max(40,000,000, 1,000,000 x dp)); a bucket closes
  /// once it holds at least this many (parameters are never split); 0 = one bucket.
  double grad_bucket_elems = 0;
  bool grad_buffer_reduce_scatter = false;  ///< distributed optimizer: reduce-scatter (else all-reduce)
  /// Distributed optimizer with overlap_param_gather: the updated bf16 parameters are all-gathered bucket by
  /// bucket after the step and the next step's forward pre-hook of each module waits for its bucket
  /// (distrib_optimizer.py _dispatch_gather_model_params, _make_forward_pre_hook): the gathers overlap the
  /// first micro-batch's forward.
  bool param_gather_before_forward = false;
  // --- kernels, optimizer and pipeline engine ---
  /// Elementwise work runs fused as the runtime's kernels do (Megatron-core with Transformer Engine: the norm
  /// inside LayerNormLinear / LayerNormMLP, apply_rope_fusion, fused bias-SwiGLU / GELU and bias-dropout-add,
  /// core_r0.8.0 megatron/core/fusions/): eager PyTorch's per-op traffic and forward transients do not occur.
  bool fused_kernels = false;
  /// Float8 through Transformer Engine (delayed scaling: amax fused into the casts, weights cast once per
  /// step; units.cpp te_fp8_cast_bytes) rather than torchao's Float8Linear.
  bool te_fp8 = false;
  /// Megatron-core / TE overlap the column-parallel input re-gather with the dgrad GEMM and the input
  /// gradient's reduce-scatter with the wgrad GEMM (tensor_parallel/layers.py
  /// LinearWithGradAccumulationAndAsyncCommunication.backward).
  bool tp_backward_overlap = false;
  /// The optimizer steps flat partitions (one per parameter group) made at initialisation, keeping its step
  /// count in the group (DeepSpeed ZeRO's fp32 partitions, Megatron's distributed optimizer), not
  /// torch.optim's per-parameter state made lazily at the first step.
  bool optimizer_flat_partitions = false;
  /// Gradients reach the host in fp32 under CPU offload (DeepSpeed accumulates them there in fp32) and an
  /// offloaded optimizer is DeepSpeed's CPUAdam (AVX), which copies the updated 16-bit partition back.
  bool native_cpu_adam = false;
  /// The pipeline is torch.distributed.pipelining's stages (FSDP/DDP stages: gradient-reduction waits, the
  /// multi-stage runtime's residency and receive placement), not Megatron's or DeepSpeed's own engines.
  bool torch_pipeline_stages = true;
  /// DeepSpeed's PipelineEngine receives in an instruction of its own just before the pass that needs it.
  bool recv_in_own_instruction = false;
  /// The loss is Megatron-core's vocab-parallel cross-entropy, in place on one fp32 copy of the logits
  /// (LossKernel::kMegatron), not PyTorch's cross_entropy.
  bool vocab_parallel_loss_inplace = false;
  /// The runtime's activation offload mechanism (used only with --activation-offload).
  ActOffloadStyle act_offload = ActOffloadStyle::kSaveOnCpu;
  // --- the state's layout and dtypes (memory/accounting.cpp, memory/optimizer_state.cpp, cost/constants.cpp)
  /// The fp32 master weights are optimizer state beside 16-bit parameters and gradients, stepped as an fp32
  /// partition that writes the 16-bit parameters back: DeepSpeed under bf16/fp16 mixed precision (ZeRO's fp32
  /// partitions, bf16_optimizer, FP16_Optimizer) and Megatron-core's distributed optimizer, whatever the
  /// precision (shard_main_param = shard_model_param.clone().float()). false: the parameters themselves are
  /// the fp32 master, cast per unit (FSDP's mixed precision, DDP under autocast).
  bool master_weights_in_optimizer = false;
  /// Gradients live in the reduce dtype (Megatron-core's grad buffer: grad_reduce_in_fp32), fp32 by default.
  bool grads_in_reduce_dtype = false;
  /// DeepSpeed ZeRO-1/2: the optimizer partitions (and ZeRO-2's gradient partitions) cut one flat group of
  /// the parameters, padded to a multiple of 2 x F (nccl_start_alignment_factor; docs/mechanics.md §1.8), not
  /// each tensor.
  bool flat_group_partitions = false;
  /// Parameters and gradients are each one contiguous buffer (Megatron-core param_and_grad_buffer.py), not
  /// one tensor per parameter.
  bool contiguous_param_grad_buffers = false;
  /// A gradient whose placement differs from its parameter's is redistributed to it before the reduce-scatter
  /// (FSDP2's DTensor parameters, _fsdp_param.py: the TP-partial embedding gradient becomes a vocab-sharded
  /// copy while the partial one is alive).
  bool redistributes_partial_grads = false;
  /// --optimizer adamw8bit is torchao's AdamW8bit (what torchtitan / FSDP2 jobs use: blockwise codes for
  /// tensors of at least 4,096 elements) rather than bitsandbytes' (memory/optimizer_state.cpp).
  bool adamw8bit_torchao = false;
  /// fp16-mixed's loss scaler: what its inf/nan check reads (lowering_loss_scaler.cpp).
  ScalerCheck scaler_check = ScalerCheck::kReducedGrads;
};

/// Which loss implementation allocates the loss layer's tensors under plan `p` (loss_tensors.hpp): the
/// runtime's own (Megatron-core), else torch.compile'd or eager cross-entropy by loss_impl, vocabulary-
/// parallel under TP, on upcast or 16-bit logits by loss_dtype; hold_logits with an upcast loss is the
/// training loop of a model that returned `output(h).float()`.
LossKernel loss_kernel(const Plan& p, const RuntimeTraits& rt);

/// The traits of the plan's runtime at its ZeRO stage and precision (the plan is already resolved).
RuntimeTraits runtime_traits(const Plan& p);

/// The model code a plan runs, whose modules own the model's buffers (memory/model_buffers.cpp) and place a
/// MoE layer's tokens under TP (memory/layer_memory.cpp moe_token_divisor): Megatron-core's GPTModel under
/// the megatron runtime; Hugging Face transformers' models under fsdp1 and deepspeed (Trainer / accelerate)
/// and wherever the MoE runs Hugging Face's experts (--moe-impl loop, hf-grouped-mm, hf-eager); torchtitan's
/// decoder under fsdp2 otherwise (the fsdp2 runtime's wrapping, head and grouped MoE are torchtitan's).
enum class ModelCode : std::uint8_t { kTorchtitan, kHuggingFace, kMegatron };
ModelCode model_code(const Plan& p);

/// Megatron-core's bucketing of the grad buffer (param_and_grad_buffer.py ParamAndGradBuffer.__init__,
/// core_r0.8.0): parameters in backward order fill the current bucket; once it holds at least `bucket_elems`
/// elements the next parameter opens a new one (`bucket_elems` <= 0: one bucket). `elems_backward` lists the
/// gradient elements of each piece in backward order (the simulator's units: a unit is never split); returns
/// each piece's bucket index (0 = the first reduced).
std::vector<int> grad_buffer_bucket_index(const std::vector<std::int64_t>& elems_backward,
                                          double bucket_elems);

}  // namespace shardplan

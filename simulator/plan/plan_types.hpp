// Plan: every knob of a sharded training run. One immutable value flows from the CLI (or the planner) through
// memory accounting, lowering and simulation into the report. `resolve_plan` fills defaults and refuses
// impossible plans with an InputError naming the knob.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_reader.hpp"

namespace shardplan {

class ModelGraph;
class Cluster;

/// kMegatron: Megatron-core's DistributedDataParallel with the distributed optimizer (megatron/core/
/// distributed/, megatron/core/optimizer/distrib_optimizer.py, core_r0.8.0): a persistent contiguous gradient
/// buffer reduce-scattered in buckets at the last micro-batch, fp32 main parameters and Adam state sharded
/// over the data-parallel x context-parallel ranks, the updated parameters all-gathered before the next
/// forward.
enum class Runtime { kFsdp2, kFsdp1, kDeepSpeed, kMegatron };
/// kFp16Mixed: fp16 compute over fp32 parameters (the bytes of bf16-mixed) with dynamic loss scaling:
/// torch.amp GradScaler / FSDP's ShardedGradScaler, DeepSpeed's fp16 DynamicLossScaler, Megatron's
/// DynamicGradScaler (docs/model.md "fp16 mixed precision"). The only 16-bit mode of Volta, which has no
/// bf16.
enum class Precision { kBf16Mixed, kBf16, kBf16True, kFp32, kFp16Mixed };
enum class AcMode { kNone, kSelective, kFull };
enum class Dtype { kFp32, kBf16 };
/// CPU offload. kOptimizer: DeepSpeed ZeRO-Offload (`offload_optimizer`: fp32 master weights, Adam state and
/// the gradient partitions on the host, Adam on the CPU). kParams: parameters, gradients and optimizer state
/// on the host, optimizer on the CPU (DeepSpeed ZeRO-3 `offload_param` + `offload_optimizer`, FSDP1
/// `CPUOffload(offload_params=True)`, FSDP2 `CPUOffloadPolicy`).
enum class Offload { kNone, kOptimizer, kParams };
/// Float8 training of the transformer blocks' linear layers (torchao Float8Linear recipes): GEMMs in fp8 with
/// dynamic scales per tensor (`tensorwise`, cuBLAS) or per row (`rowwise`, CUTLASS row-scaled kernels);
/// block-scaled on Blackwell (docs/model.md "Block-scaled fp8/fp4"): `mxfp8` (torchao MXFP8Linear, e4m3
/// values with an e8m0 scale per 32 elements) and `nvfp4` (torchao NVFP4Linear, e2m1 values with an e4m3
/// scale per 16 elements and an fp32 scale per tensor).
enum class Fp8 { kNone, kTensorwise, kRowwise, kMxfp8, kNvfp4 };
/// Block-scaled recipes (MX / NV formats), which need Blackwell's block-scaled tensor cores.
constexpr bool block_scaled(Fp8 f) {
  return f == Fp8::kMxfp8 || f == Fp8::kNvfp4;
}
/// Pipeline schedule (torch.distributed.pipelining, torch 2.15 schedules.py): ScheduleGPipe, Schedule1F1B,
/// ScheduleInterleaved1F1B, ScheduleZBVZeroBubble, ScheduleDualPipeV.
enum class PpSchedule { kGpipe, k1F1B, kInterleaved1F1B, kZbv, kDualPipeV };
/// PyTorch's CUDA caching allocator mode (PYTORCH_CUDA_ALLOC_CONF): `default` = cudaMalloc'd segments,
/// `expandable` = expandable_segments:True (one growing virtual range per stream and pool).
enum class AllocatorMode { kDefault, kExpandable };
/// How the cross-entropy runs: `eager` = aten log_softmax + nll_loss (fp32 log-softmax output saved, its
/// gradients T x V), `compiled` = torch.compile'd loss (torchtitan components/loss.py since bbb1b616e,
/// 2025-04-02): inductor saves the logits and two per-token statistics, its backward writes one gradient;
/// `chunked` = torchtitan 0.3.0's ChunkedLossWrapper (components/loss.py:559-835): the output projection and
/// the cross-entropy (eager, or compiled with --compile) run per sequence chunk inside the loss call, each
/// chunk's backward at once (docs/model.md "Chunked loss").
enum class LossImpl { kEager, kCompiled, kChunked };
/// torchtitan 0.3.0 components/loss.py:610 ChunkedLossWrapper.Config.num_chunks (default 8).
inline constexpr int kTorchtitanLossChunks = 8;
/// The attention core: `flash` = a flash-attention kernel (no s x s tensor, the log-sum-exp saved);
/// `fused-softmax` = Megatron-LM / Megatron-DeepSpeed's materialised scores (batched GEMMs, fused scale-mask-
/// softmax CUDA kernel; bigscience Megatron-DeepSpeed 1cb76a64, 2022); `eager` = Hugging Face eager attention
/// (GPT2Attention._attn, transformers 2022: matmul, divide, where, mask add, softmax, cast, dropout op by
/// op). docs/model.md "Materialised attention".
enum class AttentionCore { kFlash, kFusedSoftmax, kEager };
/// How a mixture-of-experts layer runs its routed experts: `grouped` = torchtitan 0.3.0's MoE (all T·top_k
/// routed rows reordered at once, torch._grouped_mm, one combine over all rows: models/common/moe.py,
/// token_dispatcher.py); `loop` = Hugging Face's MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock (transformers
/// modeling_mixtral.py MixtralExperts.forward: a Python loop over the experts, each gathering its tokens,
/// running its MLP, scaling and index_add_-ing them into a zeroed output; transformers 4's ModuleList of
/// per-expert nn.Linear layers); `hf-grouped-mm` and `hf-eager` = transformers 5.23's
/// `@use_experts_implementation` experts (one 3-D parameter per projection, integrations/moe.py):
/// grouped_mm_experts_forward (sort by expert, two grouped GEMMs, weight, un-permute, sum over the top-k; the
/// default of every model with the decorator: modeling_utils.py get_correct_experts_implementation) and
/// `experts_implementation="eager"` (the model's own per-expert loop indexing the 3-D weights, e.g.
/// modeling_mixtral.py MixtralExperts.forward); `deepspeed` = DeepSpeed 0.19.8's DeepSpeed-MoE layer
/// (deepspeed/moe/layer.py MoE -> sharded_moe.py MOELayer, TopKGate: every expert padded to its capacity C,
/// a fixed [E, C, M] dispatch buffer; docs/model.md "Capacity factor"). docs/model.md "MoE implementations".
enum class MoeImpl { kGrouped, kLoop, kHfGroupedMm, kHfEager, kDeepSpeed };
/// The fused scaled-dot-product-attention kernel F.scaled_dot_product_attention runs (torch's SDPBackend):
/// FlashAttention-2 (`_scaled_dot_product_flash_attention`; AOTriton on ROCm), cuDNN
/// (`_scaled_dot_product_cudnn_attention`) or memory-efficient attention
/// (`_scaled_dot_product_efficient_attention`). Each saves its output and an fp32 log-sum-exp per head and
/// query for its backward (docs/model.md "Attention backends").
enum class SdpaBackend { kFlash, kCudnn, kEfficient };
/// The SDPA ops in torchtitan's op-level selective-AC save list: `all` = flash, efficient, cuDNN, math and
/// overrideable (torchtitan b39377f9f, 2025-12-01; v0.2.1 on), `flash-efficient` = flash and efficient only
/// (torchtitan before it): under it cuDNN attention is recomputed in backward, not saved.
enum class SacSdpaOps { kAll, kFlashEfficient };
/// The parameters of FSDP2's root unit, `fully_shard(model)` (docs/model.md "FSDP2's root unit"): `none` =
/// torchtitan since 83e694105 (2025-07-28; 0.3.0), which wraps tok_embeddings and [norm, output] as units of
/// their own; `embedding-head` = torchtitan before it, whose root keeps the embedding, final norm and output
/// projection, and which FSDP2 before pytorch PR 154704 (2025-06) never resharded after forward.
enum class RootParams { kNone, kEmbeddingHead };
/// The optimizer and the implementation whose state and step are modelled (docs/model.md "Optimizers"):
/// torch.optim AdamW / Adam / SGD (momentum) / Adafactor (torch 2.15), 8-bit AdamW (torchao 0.18
/// `torchao.optim.AdamW8bit` under the fsdp2 runtime, bitsandbytes 0.50 `bnb.optim.AdamW8bit` under the
/// others), Lion (lucidrains/lion-pytorch 0.2.5: one moment), Muon (torch.optim.Muon on the blocks' 2-D
/// matrices with AdamW for the rest; sharded matrices gathered to orthogonalise, Moonlight's distributed
/// Muon, arXiv:2502.16982 Algorithm 1).
enum class Optimizer { kAdamW, kAdam, kSgd, kAdafactor, kAdamW8bit, kLion, kMuon };
/// How LoRA's frozen base weights are stored (docs/model.md "LoRA and QLoRA"): bf16, LLM.int8 (bitsandbytes
/// Linear8bitLt: int8 codes and an fp32 scale per row) or NF4 (QLoRA: bitsandbytes Linear4bit, blocks of 64
/// with double quantisation, bf16 quant storage).
enum class LoraBase { kBf16, kInt8, kNf4 };
/// How a MoE layer's tokens reach the ranks holding their experts under expert parallelism, and come back
/// (docs/model.md "Token dispatch backends"): `alltoall` = all-to-all of the routed rows with variable splits
/// (torchtitan 0.3.0 AllToAllTokenDispatcher, comm_backend "standard"; DeepSpeed 0.19.8 deepspeed/moe/
/// sharded_moe.py _AllToAll; Megatron-core moe_token_dispatcher_type "alltoall"); `allgather` = Megatron-core
/// 0.8.0's MoEAllGatherTokenDispatcher (every rank all-gathers the EP x TP group's tokens, keeps its local
/// experts' rows, and the combine reduce-scatters); `deepep` = DeepEP's dispatch/combine kernels over
/// preallocated NVLink/RDMA buffers (torchtitan 0.3.0 DeepEPTokenDispatcher, comm_backend "deepep", DeepEP v2
/// ElasticBuffer).
enum class EpBackend { kAllToAll, kAllGather, kDeepEp };

const char* to_string(Runtime r);
const char* to_string(Precision p);
const char* to_string(AcMode a);
const char* to_string(Dtype d);
const char* to_string(Offload o);
const char* to_string(Fp8 f);
const char* to_string(PpSchedule s);
const char* to_string(AllocatorMode a);
const char* to_string(LossImpl l);
const char* to_string(AttentionCore a);
const char* to_string(MoeImpl m);
const char* to_string(SdpaBackend b);
const char* to_string(SacSdpaOps o);
const char* to_string(RootParams r);
const char* to_string(Optimizer o);
const char* to_string(LoraBase b);
const char* to_string(EpBackend b);

/// Every value of a plan enum, in the order error messages and help texts list them. parse_enum, enum_names
/// and parse_enum_or_throw below are the one place a knob's spelling is read, for flags, `--fix` and run
/// records.
template <class E>
struct EnumValues;
template <>
struct EnumValues<Runtime> {
  static constexpr std::array v{Runtime::kFsdp2, Runtime::kFsdp1, Runtime::kDeepSpeed, Runtime::kMegatron};
};
template <>
struct EnumValues<Precision> {
  static constexpr std::array v{Precision::kBf16Mixed, Precision::kBf16, Precision::kBf16True,
                                Precision::kFp32, Precision::kFp16Mixed};
};
template <>
struct EnumValues<AcMode> {
  static constexpr std::array v{AcMode::kNone, AcMode::kSelective, AcMode::kFull};
};
template <>
struct EnumValues<Dtype> {
  static constexpr std::array v{Dtype::kFp32, Dtype::kBf16};
};
template <>
struct EnumValues<Offload> {
  static constexpr std::array v{Offload::kNone, Offload::kOptimizer, Offload::kParams};
};

template <>
struct EnumValues<Fp8> {
  static constexpr std::array v{Fp8::kNone, Fp8::kTensorwise, Fp8::kRowwise, Fp8::kMxfp8, Fp8::kNvfp4};
};
template <>
struct EnumValues<PpSchedule> {
  static constexpr std::array v{PpSchedule::kGpipe, PpSchedule::k1F1B, PpSchedule::kInterleaved1F1B,
                                PpSchedule::kZbv, PpSchedule::kDualPipeV};
};
template <>
struct EnumValues<AllocatorMode> {
  static constexpr std::array v{AllocatorMode::kDefault, AllocatorMode::kExpandable};
};
template <>
struct EnumValues<LossImpl> {
  static constexpr std::array v{LossImpl::kEager, LossImpl::kCompiled, LossImpl::kChunked};
};
template <>
struct EnumValues<AttentionCore> {
  static constexpr std::array v{AttentionCore::kFlash, AttentionCore::kFusedSoftmax, AttentionCore::kEager};
};
template <>
struct EnumValues<MoeImpl> {
  static constexpr std::array v{MoeImpl::kGrouped, MoeImpl::kLoop, MoeImpl::kHfGroupedMm, MoeImpl::kHfEager,
                                MoeImpl::kDeepSpeed};
};
template <>
struct EnumValues<SdpaBackend> {
  static constexpr std::array v{SdpaBackend::kFlash, SdpaBackend::kCudnn, SdpaBackend::kEfficient};
};
template <>
struct EnumValues<SacSdpaOps> {
  static constexpr std::array v{SacSdpaOps::kAll, SacSdpaOps::kFlashEfficient};
};
template <>
struct EnumValues<RootParams> {
  static constexpr std::array v{RootParams::kNone, RootParams::kEmbeddingHead};
};
template <>
struct EnumValues<Optimizer> {
  static constexpr std::array v{Optimizer::kAdamW,     Optimizer::kAdam,      Optimizer::kSgd,
                                Optimizer::kAdafactor, Optimizer::kAdamW8bit, Optimizer::kLion,
                                Optimizer::kMuon};
};

template <>
struct EnumValues<LoraBase> {
  static constexpr std::array v{LoraBase::kBf16, LoraBase::kInt8, LoraBase::kNf4};
};
template <>
struct EnumValues<EpBackend> {
  static constexpr std::array v{EpBackend::kAllToAll, EpBackend::kAllGather, EpBackend::kDeepEp};
};

template <class E>
std::optional<E> parse_enum(std::string_view s) {
  for (E e : EnumValues<E>::v)
    if (s == to_string(e)) return e;
  return std::nullopt;
}
/// "fsdp2, fsdp1, deepspeed, megatron"
template <class E>
std::string enum_names() {
  std::string out;
  for (E e : EnumValues<E>::v) out += (out.empty() ? "" : ", ") + std::string(to_string(e));
  return out;
}
/// `s` read as an E, or InputError naming `flag` (a CLI flag, "--fix KEY") and the valid values.
template <class E>
E parse_enum_or_throw(const std::string& s, const std::string& flag) {
  if (auto e = parse_enum<E>(s)) return *e;
  throw InputError::flag(flag, "unknown value \"" + s + "\"; expected one of: " + enum_names<E>());
}

std::optional<Runtime> parse_runtime(const std::string& s);
std::optional<Precision> parse_precision(const std::string& s);
std::optional<AcMode> parse_ac(const std::string& s);
std::optional<Dtype> parse_dtype(const std::string& s);
std::optional<Offload> parse_offload(const std::string& s);

/// Plan::activation_offload's "all".
inline constexpr int kActivationOffloadAll = -1;

struct Plan {
  Runtime runtime = Runtime::kFsdp2;
  int zero = 3;          ///< 0 = plain data parallel, 1 optimizer, 2 + gradients, 3 + parameters sharded
  int shard_group = 0;   ///< ranks that shard the state; 0 = all data-parallel ranks (HSDP when smaller)
  int tp = 1;            ///< tensor parallel degree, inside one NVLink domain
  std::int64_t seq = 0;  ///< sequence length; 0 = the model's default
  int mbs = 1;           ///< micro-batch: sequences per GPU per micro-step
  int grad_accum = 1;    ///< micro-batches per optimizer step
  AcMode ac = AcMode::kNone;
  int wrap = 1;                               ///< transformer blocks per FSDP unit
  int prefetch = 1;                           ///< units all-gathered ahead of the one computing
  std::optional<bool> reshard_after_forward;  ///< default: true for ZeRO-3, false for ZeRO-2
  Precision precision = Precision::kBf16Mixed;
  std::optional<Dtype> reduce_dtype;  ///< default: fp32 for bf16-mixed and fp32, bf16 otherwise
  Offload offload = Offload::kNone;
  /// The optimizer (its state per parameter, its step's traffic, Muon's gathers and Newton-Schulz GEMMs).
  Optimizer optimizer = Optimizer::kAdamW;
  /// LoRA adapter rank; 0 = full fine-tuning. With r > 0 every base parameter is frozen and the targeted
  /// linear weights get trainable adapters (simulator/model/lora.hpp; the model is transformed by
  /// lora_model before it is simulated).
  int lora_rank = 0;
  /// Comma-separated module names the adapters wrap; empty = PEFT's default for the model type.
  std::string lora_targets;
  LoraBase lora_base = LoraBase::kBf16;
  /// Activation offload to pinned host memory (docs/model.md "Activation offload"): 0 = none,
  /// kActivationOffloadAll = every block the runtime's mechanism offloads (torch save_on_cpu around the
  /// model's forward; DeepSpeed cpu_checkpointing's checkpoint inputs), N > 0 = the first N transformer
  /// blocks (Megatron-core cpu_offloading_num_layers; the last blocks stay on the GPU).
  int activation_offload = 0;
  bool async_tp = false;  ///< TP collectives overlapped with GEMMs
  bool fused_optimizer = true;
  bool compile = false;  ///< torch.compile: elementwise ops fused (less HBM traffic)
  /// The training loop keeps the model output (fp32 logits) referenced through backward and the optimizer
  /// step, until the next forward replaces it (torchtitan before mid-2024 had no `del pred`; mechanics §2.3).
  bool hold_logits = false;
  /// Eager RMSNorm as torchtitan's Python module before 3b39d7ab0 (2025-03-19): normalised in fp32 from
  /// `x.float()`, saving an fp32 copy of its input per norm (docs/model.md "Compiled saved tensors").
  bool fp32_norm = false;
  /// FSDP2 as in PyTorch before pytorch PR 129721 (mid-2024 nightlies, e.g. torchtitan's runs of June 2024):
  /// `foreach_reduce` allocates the reduce-scatter input under the reduce-scatter stream (its pool) and frees
  /// it when it returns, and the sharded gradients are views into the reduce-scatter output
  /// (torch/distributed/_composable/fsdp/_fsdp_collectives.py at pytorch 415cc262; docs/model.md "FSDP2
  /// before pytorch PR 129721"). Default: the reduce-scatter input on the default stream (torch >= 2.5).
  bool rs_input_rs_stream = false;
  /// The loop zeroes gradients in place (`optimizer.zero_grad(set_to_none=False)`, torch < 2.0's default, and
  /// Lightning 1.x's `optimizer_zero_grad`): under ZeRO-0 (DDP) every `.grad` then lives across steps. The
  /// default (false) is torch >= 2.0's `set_to_none=True`: gradients are created in backward.
  bool zero_grad_in_place = false;
  /// Dtype the loss (log-softmax, its gradients) runs in: fp32 when the logits are upcast (torchtitan, HF
  /// Llama, autocast's log_softmax), bf16 (= the 16-bit compute dtype, fp16 included) when a model without
  /// autocast computes cross-entropy on its half-precision logits (DeepSpeed/Megatron fp16 or bf16, 2022 HF
  /// GPT-2).
  Dtype loss_dtype = Dtype::kFp32;
  /// Eager or compiled cross-entropy; default: compiled with --compile (torchtitan >= 2025-04-02 compiles the
  /// loss with the model), eager otherwise.
  std::optional<LossImpl> loss_impl;
  /// --loss-impl chunked: sequence chunks (torchtitan's loss.num_chunks); 0 = unset = kTorchtitanLossChunks.
  int loss_chunks = 0;
  /// The SDPA kernel; unset = the one torch picks on the cluster's GPU (resolve_plan: sdpa_auto).
  std::optional<SdpaBackend> sdpa_backend;
  /// Which SDPA ops torchtitan's selective-AC policy saves (the torchtitan version decides).
  SacSdpaOps sac_sdpa_ops = SacSdpaOps::kAll;
  /// FSDP2: the embedding, final norm and output projection are the root unit's parameters (the torchtitan
  /// version decides).
  RootParams root_params = RootParams::kNone;
  /// FSDP2 ZeRO-3: the last block is not resharded after forward (torchtitan's default reshard policy before
  /// 83e694105, 2025-07-28: `reshard_after_forward = int(layer_id) < len(model.layers) - 1`).
  bool keep_last_block = false;
  /// Float8 linear layers in the transformer blocks (embedding, LM head, attention core and MoE experts stay
  /// in the compute dtype, as torchao/torchtitan convert them).
  Fp8 fp8 = Fp8::kNone;
  /// FSDP2 all-gathers the blocks' linear weights in float8 (torchao enable_fsdp_float8_all_gather;
  /// tensorwise).
  bool fp8_all_gather = false;
  /// The attention core's kernels (flash, or materialised s x s scores: Megatron's fused softmax, HF eager).
  AttentionCore attention = AttentionCore::kFlash;
  /// Dropout on the attention probabilities (p > 0: Megatron's --attention-dropout default 0.1, GPT-2's
  /// attn_pdrop 0.1). With a materialised core a 1-byte mask and the dropped probabilities are saved; flash
  /// attention regenerates its mask from the RNG state and saves nothing more (not modelled in its time).
  bool attention_dropout = false;
  /// How MoE layers run their routed experts (which routing tensors exist: simulator/model/moe_tensors.cpp).
  MoeImpl moe_impl = MoeImpl::kGrouped;
  /// The caching allocator's mode (reserved memory comes from replaying the step through it).
  AllocatorMode allocator = AllocatorMode::kDefault;
  /// PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold in (0, 1); 0 = off (PyTorch's default). PyTorch
  /// collects only under torch.cuda.set_per_process_memory_fraction; the replay takes the memory the
  /// allocator may use (the device's less the runtime overhead) as that allowed maximum.
  double allocator_gc_threshold = 0.0;

  // ---- DeepSpeed ZeRO++ (deepspeed 0.19.8 runtime/zero/config.py; docs/model.md "ZeRO++") ----
  /// zero_hpz_partition_size (hpZ): ZeRO-3 keeps a secondary copy of its 16-bit parameters partitioned over
  /// this many consecutive ranks (inside a node), and every all-gather after the step's first forward
  /// gathers from it within that group; 1 = off.
  int hpz_partition = 1;
  /// zero_quantized_weights (qwZ): ZeRO-3's parameter all-gathers move int8 blocks and fp32 scales.
  bool quantized_weights = false;
  /// zero_quantized_gradients (qgZ): ZeRO-3's gradient reduce-scatter is replaced by int4 all-to-alls,
  /// inside each node then across nodes (with more than one node).
  bool quantized_gradients = false;

  // ---- pipeline parallelism (simulator/simulate/pipeline_step.hpp) ----
  int pp = 1;  ///< pipeline-parallel degree (ranks of one pipeline), the outermost mesh dimension
  PpSchedule pp_schedule = PpSchedule::k1F1B;
  /// Stages per pipeline rank; 0 = the schedule's (1 for gpipe and 1f1b, 2 for the others, as torchtitan).
  int virtual_stages = 0;
  /// Transformer blocks per stage, in stage order (pp x virtual_stages entries); empty = torchtitan's split.
  std::vector<int> pp_layers;

  // ---- context and expert parallelism (simulator/parallel/context_parallel.cpp,
  // simulator/parallel/expert_parallel.cpp) ----
  /// Context-parallel degree: each sequence split over `cp` ranks (ring attention, load-balanced sharding).
  int cp = 1;
  /// Expert-parallel degree: each MoE layer's routed experts split over `ep` ranks carved out of the
  /// dp_shard x cp ranks (torchtitan's sparse mesh); takes no extra GPUs.
  int ep = 1;
  /// Routed tokens of the busiest EP rank over the mean (1 = perfectly balanced router; a capacity factor
  /// bounds it from above): scales the busiest rank's expert compute and all-to-all bytes.
  double moe_imbalance = 1.0;
  /// Megatron-core's expert capacity factor (--moe-expert-capacity-factor, megatron-core 0.8.0
  /// transformer_config.py moe_expert_capacity_factor): each expert keeps at most ceil(T x top_k / E x F)
  /// of a rank's routed rows (moe_expert_capacity), the rest are dropped; 0 = dropless (None).
  double moe_capacity_factor = 0.0;
  /// Megatron-core's moe_pad_expert_input_to_capacity: every expert gets exactly its capacity of rows (the
  /// dropped slots padded), so the rows no longer depend on the routing; needs moe_capacity_factor > 0.
  bool moe_pad_to_capacity = false;
  /// The token dispatch backend; unset = the runtime's default (default_ep_backend; resolve_plan fills it
  /// when ep > 1).
  std::optional<EpBackend> ep_backend;

  // Derived by resolve_plan (mesh order pp, dp_replicate, dp_shard, cp, tp; tp innermost):
  int dp = 1;        ///< data-parallel ranks (batch) = gpus / (tp x cp x pp)
  int replicas = 1;  ///< dp / shard_group
  /// The SDPA backend torch selects on the cluster's GPU and the plan's precision (resolve_plan).
  SdpaBackend sdpa_auto = SdpaBackend::kFlash;

  /// Ranks that FSDP-shard the dense parameters: dp_shard x cp (torchtitan's `fsdp` mesh: CP ranks hold the
  /// same parameters, so FSDP shards over them too).
  int fsdp_ranks() const { return shard_group * cp; }
  /// Ranks that FSDP-shard one EP rank's experts: dp_shard x cp / ep (torchtitan's `efsdp` mesh).
  int efsdp_ranks() const { return shard_group * cp / ep; }
  /// Data-parallel gradient-reduction ranks of the dense parameters (every rank with another data shard):
  /// dp x cp.
  int dp_cp() const { return dp * cp; }

  /// Bytes per element of the compute dtype (activations, gathered parameters, TP/CP/EP buffers): 4 under
  /// fp32, else 2 (bf16).
  double compute_bytes() const { return precision == Precision::kFp32 ? 4.0 : 2.0; }
  /// 16-bit compute over fp32 parameters (bf16-mixed, fp16-mixed): the same bytes per parameter.
  bool mixed() const { return precision == Precision::kBf16Mixed || precision == Precision::kFp16Mixed; }
  /// fp16 compute with dynamic loss scaling (fp16-mixed): the scaler's passes before the optimizer step.
  bool fp16() const { return precision == Precision::kFp16Mixed; }
  bool reshard() const { return reshard_after_forward.value_or(zero >= 3); }
  int stages() const { return pp * std::max(virtual_stages, 1); }
  Dtype reduce() const { return reduce_dtype.value_or(Dtype::kFp32); }
  LossImpl loss() const { return loss_impl.value_or(compile ? LossImpl::kCompiled : LossImpl::kEager); }
  int chunks() const { return loss_chunks > 0 ? loss_chunks : kTorchtitanLossChunks; }
  SdpaBackend sdpa() const { return sdpa_backend.value_or(sdpa_auto); }
  /// The token dispatch backend the plan runs (its runtime's default when unset).
  EpBackend ep_dispatch() const;
  /// Op-level selective AC saves the attention kernel's outputs: its op is in the policy's save list (a
  /// materialised core calls no SDPA kernel: its score tensors are handled by attention_core.cpp).
  bool sac_saves_sdpa() const {
    return attention != AttentionCore::kFlash || sac_sdpa_ops == SacSdpaOps::kAll ||
           sdpa() != SdpaBackend::kCudnn;
  }
  std::int64_t global_batch() const { return static_cast<std::int64_t>(dp) * mbs * grad_accum; }
  bool operator==(const Plan&) const = default;
};

/// Fills defaults against the model and cluster and checks the plan is possible; InputError otherwise.
/// `global_batch` > 0 derives grad_accum (global = dp x mbs x grad_accum).
Plan resolve_plan(Plan p, const ModelGraph& model, const Cluster& cluster, std::int64_t global_batch = 0);

/// The run-record plan keys (docs/formats.md): every knob of the knob table (simulator/plan/knobs.hpp) plus
/// the derived `dp`, `replicas` and `global_batch`.
Json plan_to_json(const Plan& p);
/// Reads run-record plan keys (the knob table's; derived keys are accepted and ignored); unknown keys are
/// rejected.
Plan plan_from_json(JsonObj o);

}  // namespace shardplan

// Plan defaults, validation against the model and the cluster, and the run-record JSON form.
#include <type_traits>

#include "simulator/model/model.hpp"
#include "simulator/plan/capabilities.hpp"
#include "simulator/plan/capability_rows.hpp"
#include "simulator/plan/knobs.hpp"
#include "simulator/plan/loss_plan.hpp"
#include "simulator/plan/pipeline_plan.hpp"
#include "simulator/plan/plan_types.hpp"
#include "topologies/cluster.hpp"

namespace shardplan {

// The message is built only when the check fails: `why` is a string, or a callable returning one
// (resolve_plan runs on every candidate of a search; its messages name layers and degrees).
template <class Why>
static void need(bool ok, const char* knob, Why&& why) {
  if (ok) return;
  if constexpr (std::is_invocable_v<Why>)
    throw InputError::flag(knob, why());
  else
    throw InputError::flag(knob, std::string(why));
}

// Context parallelism: torch's load-balanced sharding (torch/distributed/tensor/experimental/_attention.py,
// _context_parallel_shard with the head-tail balancer) cuts each sequence into 2 x cp chunks and gives rank r
// chunks r and 2cp-1-r, so the sequence must divide by 2 x cp.
static void check_context_parallel(const Plan& p) {
  if (p.cp == 1) return;
  need(p.seq % (2 * static_cast<std::int64_t>(p.cp)) == 0, "--cp", [&] {
    return "sequence " + std::to_string(p.seq) + " is not divisible by 2 x cp = " + std::to_string(2 * p.cp) +
           " (load-balanced sharding gives each rank two chunks)";
  });
}

// Expert parallelism as torchtitan builds it (torchtitan/distributed/parallel_dims.py at 08da451f2,
// 2026-04, expert TP = TP: efsdp = dp_shard x cp x tp / (etp x ep) = dp_shard x cp / ep): the EP ranks are
// carved out of the dp_shard x cp ranks, so ep divides dp_shard x cp; each EP rank holds experts / ep of
// every MoE layer, so ep divides the expert count.
static void check_expert_parallel(const Plan& p, const ModelGraph& model) {
  need(p.moe_imbalance >= 1.0, "--moe-imbalance", "must be >= 1 (the busiest rank over the mean)");
  // megatron-core 0.8.0 transformer_config.py __post_init__: "moe_expert_capacity_factor must be set to use
  // moe_pad_expert_input_to_capacity".
  need(!p.moe_pad_to_capacity || p.moe_capacity_factor > 0, "--moe-pad-to-capacity",
       "needs --moe-capacity-factor > 0 (padding is to the experts' capacity)");
  if (p.moe_capacity_factor > 0) {
    bool moe = false;
    for (const Layer* l : model.order()) moe = moe || l->moe_experts > 0;
    need(moe, "--moe-capacity-factor",
         "the model has no mixture-of-experts layers (a capacity is an expert's)");
  }
  if (p.ep == 1) return;
  int experts = 0;
  for (const Layer* l : model.order()) {
    if (l->moe_experts == 0) continue;
    need(l->moe_experts >= p.ep, "--ep", [&] {
      return "ep " + std::to_string(p.ep) + " exceeds the " + std::to_string(l->moe_experts) +
             " experts of " + l->name;
    });
    need(l->moe_experts % p.ep == 0, "--ep", [&] {
      return "ep " + std::to_string(p.ep) + " does not divide the " + std::to_string(l->moe_experts) +
             " experts of " + l->name;
    });
    experts = l->moe_experts;
  }
  need(experts > 0, "--ep", "the model has no mixture-of-experts layers (expert parallelism needs experts)");
  need(p.fsdp_ranks() % p.ep == 0, "--ep", [&] {
    return "ep " + std::to_string(p.ep) +
           " does not divide dp_shard x cp = " + std::to_string(p.shard_group) + " x " +
           std::to_string(p.cp) + " (torchtitan carves the EP ranks out of them)";
  });
}

namespace {
/// A materialised attention core the model covers: no ring attention over it, and Megatron's fused kernel
/// only where Megatron runs it (bigscience Megatron-DeepSpeed 1cb76a64 megatron/model/fused_softmax.py
/// is_kernel_available, and the causal kernel's TORCH_INTERNAL_ASSERT(seq_len <= 2048) in
/// fused_kernels/scaled_upper_triang_masked_softmax_cuda.cu; BLOOM ran with
/// --abort-on-unmet-fused-kernel-constraints). Its fallback, torch softmax in fp32, is not modelled.
void check_attention_core(const Plan& p, const ModelGraph& model) {
  if (p.attention == AttentionCore::kFlash) return;
  need(p.cp == 1, "--attention", [&] {
    return std::string(to_string(p.attention)) +
           " attention materialises the s x s scores; context parallelism "
           "(ring attention) is modelled for flash attention only";
  });
  if (p.attention != AttentionCore::kFusedSoftmax) return;
  const std::int64_t s = p.seq, heads = model.spec().heads / p.tp;
  need(p.precision != Precision::kFp32, "--attention",
       "fused-softmax: Megatron's kernel takes fp16/bf16 scores only (fp32 falls back to torch softmax, not "
       "modelled)");
  need(s > 16 && s <= 2048 && s % 4 == 0, "--attention", [&] {
    return "fused-softmax: Megatron's causal softmax kernel needs 16 < seq <= 2048 and seq % 4 == 0, got "
           "seq " +
           std::to_string(s);
  });
  // batches_per_block (scaled_masked_softmax.h get_batch_per_block): 128 threads over warps of min(2^k, 32)
  // lanes, 2 rows per warp up to 128 keys.
  std::int64_t pow2 = 1;
  while (pow2 < s) pow2 *= 2;
  const std::int64_t per_block = (128 / std::min<std::int64_t>(pow2, 32)) * (pow2 <= 128 ? 2 : 1);
  const std::int64_t batches = static_cast<std::int64_t>(p.mbs) * heads;
  need(batches % 4 == 0 && batches % per_block == 0, "--attention", [&] {
    return "fused-softmax: Megatron's causal softmax kernel needs mbs x heads / tp (" +
           std::to_string(batches) + ") divisible by 4 and by its " + std::to_string(per_block) +
           " rows per block";
  });
}

// The SDPA kernel F.scaled_dot_product_attention picks for the blocks' causal attention when the caller names
// none (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, torch 2.15 priority_order and the use_*
// filters): cuDNN first where check_prefer_cudnn_attention holds (cuDNN > 9.15, compute capability 9.0 /
// 10.0 / 10.3: Hopper and Blackwell; torch 2.15's wheels ship cuDNN 9.26), else FlashAttention-2 (sm80 and
// newer), else memory-efficient attention (Volta). Flash and cuDNN take fp16/bf16 inputs only: fp32 compute
// runs the memory-efficient kernel. Arch "other" (the AMD Instinct clusters of the records): ROCm builds have
// no cuDNN, and torch's ROCm flash backend (AOTriton, hip/flash_attn/aot/mha_all_aot.hip) covers MI200/MI300.
// torchtitan 0.3.0 asks for [cuDNN, flash, math] with set_priority (models/common/attention.py
// ScaledDotProductAttention): the same choice on these GPUs.
SdpaBackend default_sdpa_backend(GpuArch arch, Precision precision) {
  if (precision == Precision::kFp32) return SdpaBackend::kEfficient;
  switch (arch) {
    case GpuArch::kHopper:
    case GpuArch::kBlackwell:
      return SdpaBackend::kCudnn;
    case GpuArch::kVolta:
      return SdpaBackend::kEfficient;
    case GpuArch::kAmpere:
    case GpuArch::kAda:    // sm89: FlashAttention-2 (sm80+); cuDNN attention needs sm90+
    case GpuArch::kCdna3:  // ROCm: AOTriton flash, no cuDNN (see above)
    case GpuArch::kCdna4:
    case GpuArch::kOther:
      return SdpaBackend::kFlash;
  }
  return SdpaBackend::kFlash;
}

// Volta (sm70) has no bf16 arithmetic (its tensor cores take fp16: the V100 datasheet lists FP16 and FP32
// only) and no float8; FlashAttention-2 and cuDNN attention need sm80 / sm90+ (torch 2.15
// aten/src/ATen/native/transformers/cuda/sdp_utils.cpp check_sm_version): V100s train in fp16 with loss
// scaling (or fp32) and attend with the memory-efficient kernel.
void check_volta(const Plan& p, const GpuSpec& gpu) {
  if (gpu.arch != GpuArch::kVolta) return;
  need(p.precision == Precision::kFp16Mixed || p.precision == Precision::kFp32, "--precision", [&] {
    return std::string(to_string(p.precision)) + " needs bf16, which Volta GPUs (" + gpu.model +
           ") do not have: use --precision fp16-mixed (loss-scaled) or fp32";
  });
  need(p.fp8 == Fp8::kNone, "--fp8", "Volta GPUs have no float8 tensor cores");
  need(!p.sdpa_backend || *p.sdpa_backend == SdpaBackend::kEfficient, "--sdpa-backend",
       "FlashAttention-2 and cuDNN attention need sm80 / sm90 or newer; Volta runs efficient");
}

// MXFP8 and NVFP4 GEMMs are the block-scaled tcgen05 MMAs of sm100 / sm103 (cuBLAS 12.8 "block-scaled
// matmul"); torchtitan 0.3.0 components/quantization/mx.py and nvfp4.py raise unless has_cuda_capability(10,
// 0).
void check_block_scaled(const Plan& p, const GpuSpec& gpu) {
  // torchao's Float8Linear runs torch._scaled_mm, which torch 2.15 refuses below sm89 ("torch._scaled_mm is
  // only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+", libtorch_cuda
  // _scaled_mm_out_cuda): no float8 GEMM on Volta or Ampere.
  need(p.fp8 == Fp8::kNone || (gpu.arch != GpuArch::kVolta && gpu.arch != GpuArch::kAmpere), "--fp8", [&] {
    return std::string("--fp8 ") + to_string(p.fp8) + " needs float8 tensor cores (sm89 or newer); " +
           gpu.model + " is " + to_string(gpu.arch) + ": use --fp8 none";
  });
  if (!block_scaled(p.fp8)) return;
  need(gpu.arch == GpuArch::kBlackwell, "--fp8", [&] {
    return std::string("--fp8 ") + to_string(p.fp8) + " needs Blackwell (sm100) block-scaled tensor cores; " +
           gpu.model + " is " + to_string(gpu.arch) + ": use --fp8 tensorwise or rowwise";
  });
  need(p.fp8 != Fp8::kNvfp4 || gpu.peak_fp4_flops > 0, "--fp8",
       "--fp8 nvfp4 needs the cluster's gpu peak_flops.fp4 (dense fp4 FLOP/s), which is 0");
}

/// Tensor parallelism: within one NVLink domain, dividing the GPUs, heads, KV heads, FFN width and
/// vocabulary.
void check_tensor_parallel(const Plan& p, const ModelSpec& s, const Cluster& cluster) {
  const int gpus = cluster.gpus();
  need(p.tp >= 1, "--tp", "must be >= 1");
  need(p.tp <= cluster.spec().node.nvlink_domain_gpus, "--tp", [&] {
    return "tp " + std::to_string(p.tp) + " exceeds the " +
           std::to_string(cluster.spec().node.nvlink_domain_gpus) + " GPUs of one NVLink domain";
  });
  need(gpus % p.tp == 0, "--tp",
       [&] { return "tp " + std::to_string(p.tp) + " does not divide " + std::to_string(gpus) + " GPUs"; });
  if (p.tp > 1) {
    need(s.heads % p.tp == 0, "--tp", [&] {
      return "tp " + std::to_string(p.tp) + " does not divide the " + std::to_string(s.heads) +
             " attention heads";
    });
    need(s.kv_heads % p.tp == 0 || p.tp % s.kv_heads == 0, "--tp", [&] {
      return "tp " + std::to_string(p.tp) + " and the " + std::to_string(s.kv_heads) +
             " KV heads do not divide";
    });
    need(s.ffn_hidden % p.tp == 0, "--tp", [&] {
      return "tp " + std::to_string(p.tp) + " does not divide the FFN width " + std::to_string(s.ffn_hidden);
    });
    need(s.vocab % p.tp == 0, "--tp", [&] {
      return "tp " + std::to_string(p.tp) + " does not divide the vocabulary " + std::to_string(s.vocab) +
             " (pad the vocabulary)";
    });
  }
}

/// The mesh (pp, dp_replicate, dp_shard, cp, tp; tp innermost, torchtitan ParallelDims): the data-parallel
/// ranks, the shard group and replicas, hpZ's partition; the runtime's capabilities checked first.
void resolve_mesh(Plan& p, int gpus) {
  need(p.cp >= 1 && (gpus / (p.tp * p.pp)) % p.cp == 0, "--cp", [&] {
    return "cp " + std::to_string(p.cp) + " does not divide the " + std::to_string(gpus / (p.tp * p.pp)) +
           " ranks left by tp x pp (gpus / (tp x pp) = " + std::to_string(gpus) + " / (" +
           std::to_string(p.tp) + " x " + std::to_string(p.pp) + "))";
  });
  // Mesh order: pp, dp_replicate, dp_shard, cp, tp (tp innermost; torchtitan ParallelDims).
  p.dp = gpus / (p.tp * p.cp * p.pp);
  // What the runtime has (capabilities.hpp): before the derived checks, a knob or combination the runtime
  // lacks is the first thing to say.
  check_capabilities(p, p.dp);
  if (p.shard_group == 0) p.shard_group = p.dp;
  need(p.shard_group >= 1 && p.dp % p.shard_group == 0, "--shard-group", [&] {
    return "shard group " + std::to_string(p.shard_group) + " does not divide the " + std::to_string(p.dp) +
           " data-parallel ranks";
  });
  p.replicas = p.dp / p.shard_group;
  // hpZ's groups are consecutive ranks of the world (deepspeed 0.19.8 utils/groups.py
  // _create_zero_param_parallel_group: _ensure_divisibility(world_size, zero_hpz_partition_size)).
  need(p.hpz_partition <= p.dp && p.dp % p.hpz_partition == 0, "--hpz-partition", [&] {
    return "hpZ partition " + std::to_string(p.hpz_partition) + " does not divide the " +
           std::to_string(p.dp) + " data-parallel ranks";
  });
  if (p.zero == 0) {
    need(p.shard_group == p.dp, "--shard-group", "ZeRO-0 shards nothing; a shard group makes no sense");
  }
}

/// reshard_after_forward resolved against the ZeRO stage and the runtime.
void resolve_resharding(Plan& p) {
  // Megatron-core, ZeRO stages, HSDP and precisions per runtime: the capability table above.
  if (p.runtime == Runtime::kDeepSpeed)
    need(!p.reshard_after_forward.has_value() || *p.reshard_after_forward == (p.zero == 3),
         "--reshard-after-forward", "deepspeed reshards after forward exactly in ZeRO-3");
  // torchtitan under PP: fully_shard(reshard_after_forward=False) for every stage by default
  // (torchtitan 0.3.0 distributed/fsdp.py get_fsdp_reshard_after_forward_policy: "default" -> `not
  // pp_enabled`), "to avoid per-microbatch all-gathers": SHARD_GRAD_OP semantics, which this plan spells
  // --zero 2. An explicit --reshard-after-forward true (torchtitan's "always") is kept.
  if (p.pp > 1 && p.runtime == Runtime::kFsdp2 && p.zero == 3 && !p.reshard_after_forward.has_value())
    p.reshard_after_forward = false;
  if (p.reshard_after_forward.has_value() && *p.reshard_after_forward && p.zero < 3)
    throw InputError::flag("--reshard-after-forward",
                           "resharding after forward needs --zero 3 (parameters sharded)");
  if (p.reshard_after_forward.has_value() && !*p.reshard_after_forward && p.zero == 3 &&
      p.runtime != Runtime::kDeepSpeed) {
    // FSDP with reshard_after_forward=false is SHARD_GRAD_OP: that is ZeRO-2 semantics.
    p.zero = 2;
  }
  if (p.zero == 2 && p.runtime != Runtime::kDeepSpeed) p.reshard_after_forward = false;
  if (p.zero == 3) p.reshard_after_forward = p.reshard_after_forward.value_or(true);
  if (p.zero < 2) p.reshard_after_forward = false;
  p.reshard_after_forward = p.reshard();  // resolved: every optional knob has its value
}

/// The sequence, micro-batch, wrapping, prefetch and activation offload ranges against the model.
void check_sequence_and_units(Plan& p, const ModelSpec& s, const ModelGraph& model) {
  if (p.seq == 0) p.seq = s.seq;
  need(p.seq >= 1 && p.seq <= (std::int64_t{1} << 22), "--seq", "must be in [1, 4194304]");
  if (s.positions == PositionKind::kLearned)
    need(p.seq <= s.max_positions, "--seq", [&] {
      return "sequence " + std::to_string(p.seq) + " exceeds the model's " + std::to_string(s.max_positions) +
             " learned positions";
    });
  need(p.mbs >= 1 && p.mbs <= 65536, "--mbs", "must be in [1, 65536]");
  need(p.wrap >= 1, "--wrap", "must be >= 1");
  need(p.wrap <= std::max(1, model.blocks()), "--wrap", [&] {
    return "wrap " + std::to_string(p.wrap) + " exceeds the model's " + std::to_string(model.blocks()) +
           " blocks";
  });
  need(p.prefetch >= 0 && p.prefetch <= 16, "--prefetch", "must be in [0, 16]");
  // Megatron-core 0.8.0 transformer_config.py: cpu_offloading_num_layers in [0, num_layers); the lowering
  // offloads whole units, so N counts whole --wrap groups.
  need(p.activation_offload <= 0 || p.activation_offload < model.blocks(), "--activation-offload", [&] {
    return std::to_string(p.activation_offload) + " blocks: must be below the model's " +
           std::to_string(model.blocks()) + " blocks (the last block's activations stay on the GPU)";
  });
  need(p.activation_offload <= 0 || p.activation_offload % p.wrap == 0, "--activation-offload",
       "must be a multiple of --wrap (whole units are offloaded)");
}

/// torchtitan's FSDP2 wrappings of 2024 to 2025-07-28 (--root-params, --keep-last-block): where modelled.
void check_titan_wrappings(const Plan& p, const ModelSpec& s) {
  // torchtitan's FSDP2 wrapping of 2024 to 2025-07-28 (docs/model.md "FSDP2's root unit"), modelled for FSDP2
  // with parameters gathered per unit, one pipeline stage, no tensor or expert parallelism and an untied head
  // (the configurations those torchtitan versions ran on the records).
  if (p.root_params != RootParams::kNone) {
    need(p.zero >= 2, "--root-params",
         "the root unit's parameters are an FSDP2 wrapping: needs --runtime fsdp2 with --zero 2 or 3");
    need(p.pp == 1 && p.tp == 1 && p.ep == 1, "--root-params",
         "embedding-head is not modelled with pipeline, tensor or expert parallelism");
    need(!s.tied_embeddings, "--root-params", "embedding-head is not modelled with tied embeddings");
  }
  if (p.keep_last_block)
    need(
        p.zero >= 2 && p.pp == 1, "--keep-last-block",
        "keeping the last block after forward is an FSDP2 wrapping: needs --runtime fsdp2 with --zero 2 or 3 "
        "and --pp 1");
}

/// Gradient accumulation from the global batch.
void resolve_batch(Plan& p, std::int64_t global_batch) {
  if (global_batch > 0) {
    const std::int64_t per_step = static_cast<std::int64_t>(p.dp) * p.mbs;
    need(global_batch % per_step == 0, "--global-batch", [&] {
      return "global batch " + std::to_string(global_batch) +
             " is not a multiple of dp x mbs = " + std::to_string(p.dp) + " x " + std::to_string(p.mbs);
    });
    p.grad_accum = static_cast<int>(global_batch / per_step);
  }
  need(p.grad_accum >= 1 && p.grad_accum <= 1 << 20, "--grad-accum", "must be in [1, 1048576]");
}

/// The reduce dtype, float8 and the SDPA backend against the precision and the GPU.
void resolve_dtypes(Plan& p, const Cluster& cluster) {
  if (!p.reduce_dtype)
    p.reduce_dtype = p.mixed() || p.precision == Precision::kFp32 ? Dtype::kFp32 : Dtype::kBf16;
  if (p.precision == Precision::kFp32) p.reduce_dtype = Dtype::kFp32;
  need(p.fp8 == Fp8::kNone || p.precision != Precision::kFp32, "--fp8",
       "float8 linears need a 16-bit compute dtype (--precision bf16-mixed, bf16 or bf16-true), not fp32");
  if (p.fp8_all_gather) {
    need(p.fp8 == Fp8::kTensorwise, "--fp8-all-gather", "float8 all-gather needs --fp8 tensorwise (torchao)");
    need(p.zero >= 2, "--fp8-all-gather",
         "float8 all-gather is an FSDP2 feature: needs --runtime fsdp2 with --zero 2 or 3 (parameters "
         "gathered)");
  }
  p.sdpa_auto = default_sdpa_backend(cluster.spec().gpu.arch, p.precision);
  need(!(p.sdpa_backend && *p.sdpa_backend != SdpaBackend::kEfficient && p.precision == Precision::kFp32),
       "--sdpa-backend", "flash and cuDNN attention take fp16/bf16 inputs only; fp32 compute runs efficient");
}

}  // namespace

Plan resolve_plan(Plan p, const ModelGraph& model, const Cluster& cluster, std::int64_t global_batch) {
  const auto& s = model.spec();
  const int gpus = cluster.gpus();
  need(p.zero >= 0 && p.zero <= 3, "--zero",
       [&] { return "must be 0, 1, 2 or 3, got " + std::to_string(p.zero); });
  check_volta(p, cluster.spec().gpu);
  check_block_scaled(p, cluster.spec().gpu);
  check_tensor_parallel(p, s, cluster);
  check_pipeline_mesh(p, gpus);
  resolve_mesh(p, gpus);
  resolve_resharding(p);
  check_sequence_and_units(p, s, model);
  check_context_parallel(p);
  check_loss_chunks(p);
  check_attention_core(p, model);
  check_expert_parallel(p, model);
  if (p.ep > 1 && !p.ep_backend) p.ep_backend = default_ep_backend(p.runtime);
  check_titan_wrappings(p, s);
  resolve_batch(p, global_batch);
  resolve_dtypes(p, cluster);
  resolve_pipeline(p, model);
  check_capabilities(p, p.dp);  // again with grad_accum derived (FSDP1's parameter offload and accumulation)
  return p;
}

Json plan_to_json(const Plan& p) {
  Json j = Json::object();
  for (const Knob& k : plan_knobs()) {
    const std::string v = k.get(p);
    if (v.empty()) continue;
    if (k.kind == KnobKind::kInt)
      j[k.key] = std::stoll(v);
    else if (k.kind == KnobKind::kDouble)
      j[k.key] = std::stod(v);
    else if (k.kind == KnobKind::kEnum || k.kind == KnobKind::kText)
      j[k.key] = v;
    else
      j[k.key] = v == "true";
  }
  j["dp"] = p.dp;
  j["replicas"] = p.replicas;
  j["global_batch"] = p.global_batch();
  return j;
}

Plan plan_from_json(JsonObj o) {
  Plan p;
  o.allow({"dp", "replicas", "global_batch", "notes"});
  for (const Knob& k : plan_knobs()) {
    if (!o.has(k.key)) {
      o.raw_optional(k.key);
      continue;
    }
    std::string text;
    if (k.kind == KnobKind::kInt)
      text = std::to_string(o.integer(k.key, k.lo, k.hi));
    else if (k.kind == KnobKind::kDouble)
      text = std::to_string(o.number(k.key, 1.0, k.dlo, k.dhi));
    else if (k.kind == KnobKind::kEnum || k.kind == KnobKind::kText)
      text = o.str(k.key);
    else
      text = o.boolean(k.key) ? "true" : "false";
    std::string why = k.set(p, text);
    if (!why.empty()) o.fail(k.key, why);
  }
  o.finish();
  return p;
}

}  // namespace shardplan

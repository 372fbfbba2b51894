// Emitters: the recommended plan as code and configs users paste into their training jobs.
#include "planner/emit.hpp"

#include <fmt/format.h>

#include "core/json_reader.hpp"
#include "planner/emit_blockfp.hpp"
#include "planner/emit_lora.hpp"
#include "planner/emit_target.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/plan/plan.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptHead;  // planner/emit_fsdp2_script.cpp
extern const char* const kFsdp2ScriptStep;  // planner/emit_fsdp2_script_step.cpp

namespace {
const char* py_bool(bool b) {
  return b ? "True" : "False";
}

/// torch.nn.attention.SDPBackend's member for a backend.
const char* sdpa_backend_name(SdpaBackend b) {
  switch (b) {
    case SdpaBackend::kFlash:
      return "FLASH_ATTENTION";
    case SdpaBackend::kCudnn:
      return "CUDNN_ATTENTION";
    case SdpaBackend::kEfficient:
      return "EFFICIENT_ATTENTION";
  }
  return "FLASH_ATTENTION";
}

/// Lines of `notes` as comments ("# " prefix), for the Python and TOML outputs.
std::string comment_lines(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += "# NOTE: " + n + "\n";
  return s;
}

/// torch.distributed.pipelining's name of a schedule (get_schedule_class, torch/distributed/pipelining/
/// schedules.py), as torchtitan's pipeline_parallel_schedule takes it.
const char* titan_schedule(PpSchedule s) {
  switch (s) {
    case PpSchedule::kGpipe:
      return "GPipe";
    case PpSchedule::k1F1B:
      return "1F1B";
    case PpSchedule::kInterleaved1F1B:
      return "Interleaved1F1B";
    case PpSchedule::kZbv:
      return "ZBVZeroBubble";
    case PpSchedule::kDualPipeV:
      return "DualPipeV";
  }
  return "1F1B";
}

/// Knobs that the torchtitan training loop or version decides, not any config field (both torchtitan
/// formats).
void torchtitan_loop_notes(const Plan& p, std::vector<std::string>& n) {
  if (p.loss_dtype != Plan{}.loss_dtype)
    n.push_back("--loss-dtype: torchtitan computes the loss in its own dtype");
  if (p.hold_logits) n.push_back("--hold-logits: a property of the training loop, not of the config");
  if (p.fp32_norm)
    n.push_back(
        "--fp32-norm: the torchtitan version decides (Python fp32 RMSNorm before 2025-03-19), not the "
        "config");
  if (p.root_params != RootParams::kNone || p.keep_last_block)
    n.push_back(
        "--root-params / --keep-last-block: the torchtitan version decides (the root kept the embedding and "
        "head, and the last block was not resharded, before 2025-07-28), not the config");
  if (p.rs_input_rs_stream)
    n.push_back(
        "--rs-input-rs-stream: the PyTorch version decides (FSDP2 before pytorch PR 129721, 2024-06-27), not "
        "the config");
  if (p.loss_impl && p.loss() != (p.compile ? LossImpl::kCompiled : LossImpl::kEager))
    n.push_back(std::string("--loss-impl ") + to_string(p.loss()) +
                ": the torchtitan version decides (the loss is compiled with the model since 2025-04-02), "
                "not the config");
}

/// The PYTORCH_CUDA_ALLOC_CONF value of the plan's allocator knobs (c10/core/AllocatorConfig.cpp option
/// names: expandable_segments, garbage_collection_threshold), or "" with PyTorch's defaults. The variable is
/// read when the caching allocator initialises, so it is set before the job touches CUDA.
std::string alloc_conf(const Plan& p) {
  std::string s;
  if (p.allocator == AllocatorMode::kExpandable) s = "expandable_segments:True";
  if (p.allocator_gc_threshold > 0)
    s += (s.empty() ? "" : ",") + fmt::format("garbage_collection_threshold:{}", p.allocator_gc_threshold);
  return s;
}

/// Knobs that the router, the data or the model code decide rather than any config (every output format): a
/// note of what the prediction assumed.
void model_code_notes(const Plan& p, std::vector<std::string>& n) {
  if (p.moe_impl != MoeImpl::kGrouped)
    n.push_back(std::string("--moe-impl ") + to_string(p.moe_impl) +
                ": the model code's MoE block decides; the prediction assumed Hugging Face's loop over the "
                "experts");
  if (p.moe_imbalance != Plan{}.moe_imbalance)
    n.push_back(
        fmt::format("--moe-imbalance {}: the prediction assumed the busiest expert-parallel rank routes {} "
                    "times the mean "
                    "tokens; the router and the data decide, no config field",
                    p.moe_imbalance, p.moe_imbalance));
}

/// Knobs a ds_config has no key for because the user's training script and model code decide them (DeepSpeed
/// 0.19.8 takes any nn.Module and loop): what the prediction assumed, for that script to match.
void deepspeed_script_notes(const Plan& p, std::vector<std::string>& n) {
  n.push_back(fmt::format("--seq {}: the sequence length is the data loader's, no ds_config key", p.seq));
  if (p.loss_dtype != Plan{}.loss_dtype)
    n.push_back(
        std::string("--loss-dtype ") + to_string(p.loss_dtype) +
        ": compute the cross-entropy on the 16-bit logits (no .float() upcast) in the training script");
  if (p.loss_impl || p.loss() == LossImpl::kCompiled)
    n.push_back(std::string("the cross-entropy is simulated ") + to_string(p.loss()) +
                (p.loss() == LossImpl::kCompiled ? ": torch.compile the loss function in the training script"
                                                 : ": keep the loss function out of torch.compile"));
  if (p.hold_logits)
    n.push_back(
        "--hold-logits: the prediction assumed the training loop keeps the fp32 logits alive through "
        "backward (no `del` before engine.backward)");
  if (p.fp32_norm)
    n.push_back(
        "--fp32-norm: the prediction assumed the model's RMSNorm upcasts its input to fp32 in Python (an "
        "fp32 "
        "copy saved per norm)");
  if (p.zero_grad_in_place)
    n.push_back(
        "--zero-grad-in-place: the prediction assumed gradients zeroed in place "
        "(zero_grad(set_to_none=False)) "
        "by the training loop");
  if (p.sdpa_backend)
    n.push_back(
        fmt::format("--sdpa-backend {}: run the steps under torch.nn.attention.sdpa_kernel(SDPBackend.{}) in "
                    "the training "
                    "script",
                    to_string(*p.sdpa_backend), sdpa_backend_name(*p.sdpa_backend)));
  if (p.ac == AcMode::kSelective && p.sac_sdpa_ops == SacSdpaOps::kFlashEfficient)
    n.push_back(
        "--sac-sdpa-ops flash-efficient: the selective-AC policy of the model code must save the flash and "
        "memory-efficient SDPA outputs only (cuDNN attention recomputed)");
  if (p.attention != AttentionCore::kFlash)
    n.push_back(std::string("--attention ") + to_string(p.attention) +
                ": the model code's attention core decides; the prediction assumed a materialised " +
                to_string(p.attention) + " core");
  if (p.attention_dropout)
    n.push_back(
        "--attention-dropout: the prediction assumed attention dropout p > 0 in the model code (its mask and "
        "the dropped probabilities saved)");
  if (const std::string conf = alloc_conf(p); !conf.empty())
    n.push_back("--allocator / --allocator-gc-threshold: launch with PYTORCH_CUDA_ALLOC_CONF=" + conf);
}

/// The knobs an output of `kind` would run differently from the simulated plan and cannot be told otherwise:
/// one InputError naming the knob and what to do (emit() refuses before writing anything).
void check_expressible(const std::string& kind, const Plan& p) {
  const bool titan = kind == "torchtitan" || kind == "torchtitan-toml";
  auto refuse = [&](const std::string& why) { throw InputError::flag("--emit", kind + ": " + why); };
  check_lora_expressible(kind, p);     // planner/emit_lora.cpp
  check_blockfp_expressible(kind, p);  // planner/emit_blockfp.cpp
  // torchtitan 0.3.0 has no activation offload in its trainer (only experiments/graph_trainer's
  // memory_policy "sac_and_offload", a compiled-graph pass, not save_on_cpu); the emitted FSDP2 script wraps
  // the model's forward in torch.autograd.graph.save_on_cpu(pin_memory=True).
  if (titan && p.activation_offload != 0)
    refuse(
        "--activation-offload: torchtitan 0.3.0's trainer has no activation offload (config/configs.py: only "
        "enable_cpu_offload of parameters, gradients and optimizer state); use --emit fsdp2, whose script "
        "runs the forward under torch.autograd.graph.save_on_cpu(pin_memory=True)");
  if (titan && p.attention != AttentionCore::kFlash)
    refuse(std::string("--attention ") + to_string(p.attention) +
           ": torchtitan's decoders attend with fused kernels (flex / varlen in 0.3.0, SDPA or flex before), "
           "never a materialised s x s core; simulate with --attention flash");
  if (titan && p.moe_impl != MoeImpl::kGrouped)
    refuse(
        std::string("--moe-impl ") + to_string(p.moe_impl) +
        ": torchtitan's MoE reorders all routed rows and runs grouped GEMMs (models/common/moe.py); simulate "
        "with --moe-impl grouped");
  // torchtitan's MoE comm backends (0.3.0 models/common/config_utils.py make_token_dispatcher_config;
  // the TOML era's parallelism.expert_parallel_comm_backend): standard (all-to-all), deepep, hybridep,
  // minimal_async_ep. None gathers every token.
  if (titan && p.ep > 1 && p.ep_dispatch() == EpBackend::kAllGather)
    refuse(
        "--ep-backend allgather: torchtitan has no all-gather token dispatcher (comm backends standard, "
        "deepep, "
        "hybridep, minimal_async_ep: models/common/config_utils.py make_token_dispatcher_config); simulate "
        "with --ep-backend alltoall or deepep");
  if (titan && p.attention_dropout)
    refuse(
        "--attention-dropout: torchtitan's attention has no dropout (dropout_p 0); simulate without "
        "--attention-dropout");
  if (titan && p.zero_grad_in_place)
    refuse(
        "--zero-grad-in-place: torchtitan zeroes gradients in place only under CUDA-graph capture "
        "(torchtitan 0.3.0 trainer.py train_step: zero_grad(set_to_none=disable_cuda_graphs)), which the "
        "simulator does not model and the emitted config disables; simulate without --zero-grad-in-place");
  // torchtitan 0.3.0's language models take attn_backend flex (FlexAttention), flex_flash or varlen
  // (torch.nn.attention.varlen.varlen_attn: the FlashAttention kernel); "sdpa" raises
  // (models/common/config_utils.py get_attention_config). Only flash is among them.
  if (kind == "torchtitan" && p.sdpa_backend && *p.sdpa_backend != SdpaBackend::kFlash)
    refuse(std::string("--sdpa-backend ") + to_string(*p.sdpa_backend) +
           ": torchtitan 0.3.0's language models run flex or varlen (FlashAttention) attention, no SDPA "
           "backend; simulate with --sdpa-backend flash (written as attn_backend=\"varlen\") or use --emit "
           "torchtitan-toml for an SDPA-era torchtitan");
  // torchtitan 0.3.0's selective-AC policy saves every SDPA op, cuDNN's included (torchtitan >= 0.2.1,
  // distributed/activation_checkpoint.py _op_sac_save_list).
  if (kind == "torchtitan" && p.ac == AcMode::kSelective && p.sac_sdpa_ops == SacSdpaOps::kFlashEfficient)
    refuse(
        "--sac-sdpa-ops flash-efficient: torchtitan 0.3.0's selective AC saves every attention op (>= "
        "0.2.1); "
        "simulate with --sac-sdpa-ops all, or use --emit torchtitan-toml for an older torchtitan");
  // torchtitan 0.3.0's OptimizersContainer builds "Adam", "AdamW" and "DistMuon" only
  // (components/optimizer/optimizer.py _resolve_optimizer_factory); the TOML-era torchtitan (2024-2025
  // build_optimizers) Adam and AdamW. DistMuon (distributed/flex_shard/dist_muon.py) orthogonalises each
  // matrix on one owning rank (FlexShard `Owned`) and redistributes, not on every rank as simulated.
  if (titan && p.optimizer != Optimizer::kAdamW && p.optimizer != Optimizer::kAdam)
    refuse(
        std::string("--optimizer ") + to_string(p.optimizer) +
        (kind == "torchtitan"
             ? ": torchtitan 0.3.0 builds Adam, AdamW and DistMuon only (DistMuon orthogonalises each "
               "matrix on one owning rank, not the gathered-on-every-rank Muon simulated); use --emit fsdp2"
             : ": the torchtitan TOML's optimizer is Adam or AdamW; use --emit fsdp2"));
  // torchtitan 0.3.0 trains in bf16 or fp32 only: TrainingConfig.mixed_precision_param and dtype are
  // Literal["bfloat16", "float32"] (config/configs.py) and its trainer has no GradScaler.
  if (titan && p.fp16())
    refuse(
        "--precision fp16-mixed: torchtitan 0.3.0 has no fp16 (training.mixed_precision_param is bfloat16 or "
        "float32, no loss scaler); use --emit fsdp2 (MixedPrecisionPolicy float16 + ShardedGradScaler) or "
        "--emit deepspeed");
  // The script runs Hugging Face (sdpa or eager attention) or torchtitan models; Megatron's fused
  // scale-mask-softmax core is neither.
  if (kind == "fsdp2" && p.attention == AttentionCore::kFusedSoftmax)
    refuse(
        "--attention fused-softmax is Megatron's attention core; the script's models attend with SDPA or "
        "Hugging Face eager attention: simulate with --attention flash or --attention eager");
}

/// torchtitan's module_fqns_per_model_part for the plan's stages, or "" when torchtitan's own split is the
/// plan's (no --pp-layers, the schedule's default stages per rank: 1 for GPipe / 1F1B, 2 for the looped ones,
/// torchtitan/distributed/pipeline_parallel.py _get_pipeline_metadata). Module names of torchtitan 0.3.0's
/// decoders: tok_embeddings, layers.N, norm, lm_head.
std::string titan_fqn_parts(const Plan& p, const ModelGraph& model) {
  const bool single = p.pp_schedule == PpSchedule::kGpipe || p.pp_schedule == PpSchedule::k1F1B;
  if (p.pp_layers.empty() && std::max(p.virtual_stages, 1) == (single ? 1 : 2)) return "";
  const std::vector<int> blocks = stage_blocks(p, model.blocks());
  std::string s = "[";
  int next = 0;
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    std::vector<std::string> names;
    if (k == 0) names.push_back("tok_embeddings");
    for (int b = 0; b < blocks[k]; ++b) names.push_back("layers." + std::to_string(next++));
    if (k + 1 == blocks.size()) names.push_back("norm"), names.push_back("lm_head");
    s += k ? ", [" : "[";
    for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
    s += "]";
  }
  return s + "]";
}
}  // namespace

Runtime emit_target_runtime(const std::string& kind) {
  const auto t = parse_emit_target(kind);
  return t ? target_runtime(*t) : Runtime::kFsdp2;  // torchtitan runs FSDP2
}

std::optional<TorchtitanFlavor> torchtitan_flavor(const ModelSpec& m) {
  // The flavors of torchtitan 0.3.0's model registries (torchtitan/models/{llama3,qwen3,deepseek_v3}/
  // __init__.py), with the dimensions their configs build (hidden, layers, heads, kv heads or 0 for MLA,
  // vocab, routed experts or 0): a model is emitted as a flavor only when all of these match, so a config
  // never trains a different architecture than the one simulated. tests/emit builds each on the meta device
  // and compares its parameter count with the simulator's.
  struct Row {
    const char* module;
    const char* flavor;
    std::int64_t hidden;
    int layers, heads, kv_heads;
    std::int64_t vocab;
    int experts;
  };
  static constexpr Row kRows[] = {
      {"llama3", "1B", 2048, 16, 32, 8, 128256, 0},
      {"llama3", "3B", 3072, 28, 24, 8, 128256, 0},
      {"llama3", "8B", 4096, 32, 32, 8, 128256, 0},
      {"llama3", "70B", 8192, 80, 64, 8, 128256, 0},
      {"llama3", "405B", 16384, 126, 128, 8, 128256, 0},
      {"qwen3", "0.6B", 1024, 28, 16, 8, 151936, 0},
      {"qwen3", "1.7B", 2048, 28, 16, 8, 151936, 0},
      {"qwen3", "4B", 2560, 36, 32, 8, 151936, 0},
      {"qwen3", "8B", 4096, 36, 32, 8, 151936, 0},
      {"qwen3", "14B", 5120, 40, 40, 8, 151936, 0},
      {"qwen3", "32B", 5120, 64, 64, 8, 151936, 0},
      {"qwen3", "30B-A3B", 2048, 48, 32, 4, 151936, 128},
      {"qwen3", "235B-A22B", 4096, 94, 64, 4, 151936, 128},
      {"deepseek_v3", "671B", 7168, 61, 128, 0, 129280, 256},
  };
  for (const Row& r : kRows)
    if (m.hidden == r.hidden && m.layers == r.layers && m.heads == r.heads &&
        (r.kv_heads == 0 || m.kv_heads == r.kv_heads) && m.vocab == r.vocab && m.moe.experts == r.experts)
      return TorchtitanFlavor{r.module, r.flavor};
  return std::nullopt;
}

std::vector<std::string> emit_notes(const std::string& kind, const Plan& p) {
  std::vector<std::string> n;
  const Runtime target = emit_target_runtime(kind);
  if (p.runtime != target)
    n.push_back(fmt::format(
        "the plan was simulated for {}; this {} output runs it under {} (see the re-simulated line)",
        to_string(p.runtime), kind, to_string(target)));
  if (kind == "deepspeed") {
    if (p.ac == AcMode::kSelective)
      n.push_back(
          "selective activation checkpointing (torchtitan's op policy) has no ds_config key: apply it in the "
          "model code; activation_checkpointing only configures deepspeed.checkpointing.checkpoint");
    if (p.ac == AcMode::kFull)
      n.push_back(
          "full activation checkpointing: wrap each block in deepspeed.checkpointing.checkpoint in the model "
          "code");
    if (p.fp8 != Fp8::kNone)
      n.push_back(fmt::format(
          "float8 linears (--fp8 {}) have no ds_config key: convert the blocks' linears with torchao "
          "(convert_to_float8_training, Float8LinearConfig{})",
          to_string(p.fp8), p.fp8 == Fp8::kRowwise ? ".from_recipe_name(\"rowwise\")" : "() (tensorwise)"));
    if (p.compile) n.push_back("torch.compile (--compile): call engine.compile() in the training script");
    if (p.wrap != 1 || p.prefetch != 1)
      n.push_back(
          "--wrap / --prefetch are FSDP unit knobs: DeepSpeed ZeRO-3 prefetches by "
          "stage3_prefetch_bucket_size");
    if (p.async_tp) n.push_back("--async-tp has no DeepSpeed AutoTP equivalent");
    if (p.zero == 0 && (p.precision == Precision::kBf16 || p.precision == Precision::kBf16True))
      n.push_back(
          std::string("--precision ") + to_string(p.precision) +
          " at ZeRO stage 0: DeepSpeed keeps an fp32 master copy (bf16_master_weights_and_grads needs stage "
          "1-3), so the job holds more memory than simulated");
    if (!p.fused_optimizer) n.push_back("--foreach-optimizer: DeepSpeed picks its own (fused) Adam");
    if (p.optimizer == Optimizer::kAdamW8bit)
      n.push_back(
          "--optimizer adamw8bit: no ds_config optimizer type; pass optimizer=bitsandbytes.optim.AdamW8bit("
          "params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1) to deepspeed.initialize "
          "(zero_allow_untested_optimizer is set)");
    if (p.optimizer == Optimizer::kSgd || p.optimizer == Optimizer::kAdafactor)
      n.push_back(std::string("--optimizer ") + to_string(p.optimizer) + ": DeepSpeed builds torch.optim." +
                  (p.optimizer == Optimizer::kSgd ? "SGD" : "Adafactor") +
                  " from the config type and steps it on its flat fp32 partitions (so Adafactor's "
                  "moments are not factored)");
    if (p.pp > 1)
      n.push_back(fmt::format(
          "--pp {}: DeepSpeed's pipeline degree is not a ds_config key: build the model as "
          "deepspeed.pipe.PipelineModule(layers=..., num_stages={}) (PipelineEngine runs its 1F1B-style "
          "schedule over the {} micro-batches of gradient_accumulation_steps){}",
          p.pp, p.pp, p.grad_accum,
          p.pp_layers.empty() ? std::string()
                              : ", with stages of " + find_knob("pp_layers")->get(p) +
                                    " blocks (--pp-layers: PipelineModule's partition_method must give "
                                    "this split)"));
    deepspeed_script_notes(p, n);
    model_code_notes(p, n);
  }
  if (kind == "torchtitan") {
    // Knobs torchtitan 0.3.0's Trainer.Config (tools/pyenv-requirements.txt) has no field for: listed, never
    // silently dropped (torchtitan/config/configs.py, components/quantization/float8.py,
    // components/optimizer/optimizer.py of that version).
    if (p.prefetch != 1)
      n.push_back(fmt::format(
          "--prefetch {}: torchtitan has no FSDP prefetch field (it prefetches one block)", p.prefetch));
    if (p.wrap != 1)
      n.push_back(fmt::format("--wrap {}: torchtitan wraps every block as its own FSDP unit", p.wrap));
    if (p.reduce() == Dtype::kBf16)
      n.push_back(
          "--reduce-dtype bf16: TrainingConfig.mixed_precision_reduce is Literal[\"float32\"]; written as "
          "float32 (the job reduces in fp32, more communication than simulated)");
    if (p.precision == Precision::kBf16)
      n.push_back(
          "--precision bf16 (bf16 parameters, fp32 Adam moments) has no torchtitan equivalent: written as "
          "bf16-mixed (training.dtype float32, mixed_precision_param bfloat16), which holds fp32 parameters");
    torchtitan_loop_notes(p, n);
    if (p.offload == Offload::kOptimizer)
      n.push_back(
          "--offload optimizer: torchtitan's enable_cpu_offload offloads parameters, gradients and optimizer "
          "state together (FSDP2 CPUOffloadPolicy); not written");
    if (p.fp8_all_gather)
      n.push_back(
          "--fp8-all-gather: torchtitan 0.3.0 has no float8 all-gather field; its FSDP all-gathers bf16");
    if (p.fp8 == Fp8::kTensorwise)
      n.push_back(
          "--fp8 tensorwise: Float8LinearConverter.Config.recipe_name is typed rowwise | rowwise_with_gw_hp "
          "in "
          "torchtitan 0.3.0; \"tensorwise\" is written (torchao's Float8LinearConfig.from_recipe_name takes "
          "it) and loads, but is outside the typed choices");
    if (p.async_tp && !p.compile)
      n.push_back(
          "--async-tp without --compile: torchtitan's async TP needs compile.enable (CompileConfig raises "
          "otherwise); written as enable_async_tensor_parallel=False");
    model_code_notes(p, n);
  }
  if (kind == "torchtitan-toml") {
    // Knobs the torchtitan TOML (2024-2025 JobConfig) has no key for: listed, never silently dropped.
    if (p.prefetch != 1)
      n.push_back(fmt::format("--prefetch {}: torchtitan has no explicit FSDP prefetch key", p.prefetch));
    if (p.wrap != 1)
      n.push_back(fmt::format("--wrap {}: torchtitan wraps every block as its own FSDP unit", p.wrap));
    if (p.reduce() == Dtype::kBf16)
      n.push_back(
          "--reduce-dtype bf16: torchtitan's mixed_precision_reduce accepts float32 only (written, may be "
          "rejected)");
    if (p.precision == Precision::kBf16 || p.precision == Precision::kBf16True)
      n.push_back(std::string("--precision ") + to_string(p.precision) +
                  ": torchtitan keeps fp32 parameters (mixed_precision_param bfloat16 is bf16-mixed)");
    torchtitan_loop_notes(p, n);
    if (p.offload == Offload::kOptimizer)
      n.push_back("--offload optimizer: FSDP2 offloads parameters, not the optimizer alone");
    // The TOML's torchtitan (2024-2025) attends with F.scaled_dot_product_attention under its own
    // sdpa_kernel list, or flex ([model] use_flex_attn); no key picks the SDPA kernel.
    if (p.sdpa_backend)
      n.push_back(std::string("--sdpa-backend ") + to_string(*p.sdpa_backend) +
                  ": the torchtitan and torch versions pick the SDPA kernel, no TOML key; the prediction "
                  "assumed " +
                  to_string(*p.sdpa_backend));
    if (p.ac == AcMode::kSelective && p.sac_sdpa_ops == SacSdpaOps::kFlashEfficient)
      n.push_back(
          "--sac-sdpa-ops flash-efficient: the selective-AC policy of torchtitan before 0.2.1 (cuDNN "
          "attention recomputed); the torchtitan version decides, not the config");
    if (const std::string conf = alloc_conf(p); !conf.empty())
      n.push_back("--allocator / --allocator-gc-threshold: launch with PYTORCH_CUDA_ALLOC_CONF=" + conf);
    model_code_notes(p, n);
  }
  if (kind == "fsdp2" && p.precision == Precision::kBf16)
    n.push_back(
        "--precision bf16 (fp32 Adam moments on bf16 parameters): torch.optim.AdamW keeps its moments in the "
        "parameter dtype, so this script holds bf16 moments (--precision bf16-true's memory)");
  if (kind == "fsdp2" && p.optimizer == Optimizer::kLion)
    n.push_back("--optimizer lion: the script imports lion_pytorch (pip install lion-pytorch==0.2.5)");
  if (kind == "fsdp2" && p.optimizer == Optimizer::kMuon)
    n.push_back(
        "--optimizer muon: the script's GatheredMuon gathers each sharded block matrix's update, "
        "orthogonalises it with torch.optim._muon's Newton-Schulz on every rank and applies this rank's "
        "rows (Moonlight's distributed Muon); AdamW for the other parameters");
  if (kind == "fsdp2" && p.fp8 != Fp8::kNone)
    n.push_back(
        "float8 needs CUDA float8 GEMMs (torchao); on --device cpu the script emulates them (emulate=True)");
  if (kind == "fsdp2") {
    if (p.rs_input_rs_stream)
      n.push_back(
          "--rs-input-rs-stream: the PyTorch version decides (FSDP2 before pytorch PR 129721, 2024-06-27, "
          "allocated the reduce-scatter input on its stream); the prediction assumed that torch");
    if (p.fp32_norm)
      n.push_back(
          "--fp32-norm: the model code decides (an RMSNorm upcasting its input in Python, as Hugging Face's "
          "LlamaRMSNorm does); the prediction assumed it");
    if (p.async_tp && !p.compile)
      n.push_back(
          "--async-tp without --compile: async TP is an inductor pass (micro-pipelined TP); the script "
          "compiles the blocks only with --compile, so its TP collectives stay synchronous");
    model_code_notes(p, n);
  }
  return n;
}

std::vector<EmitUnit> simulated_units(const Plan& p, const ModelGraph& model, const Cluster& cluster,
                                      const CostModel& costs) {
  std::vector<SimUnit> sim;
  build_units(model, cluster, costs, p, runtime_traits(p), sim);
  std::vector<EmitUnit> out;
  for (const SimUnit& u : sim) {
    EmitUnit e{u.name, u.blocks, u.elems, 0, 0, 0};
    // The same TP-local sum as build_units' `elems` (units.cpp), split by what TP does to each tensor:
    // kColumn divides dim 0 (rows), kRow dim 1 (tp_local_rows / tp_local_cols). The fsdp2 script has no
    // expert parallelism (emit refuses ep > 1), so every expert tensor is in `elems` too.
    for (const Layer* l : u.layers)
      l->for_each_tensor_group([&](const Tensor& t, std::int64_t count) {
        const std::int64_t n = tp_local_elems(t, p.tp) * count;  // every slice of a grouped expert weight
        const TpSplit split = p.tp > 1 ? t.tp : TpSplit::kReplicated;  // TP 1 splits nothing
        (split == TpSplit::kColumn ? e.tp_dim0 : split == TpSplit::kRow ? e.tp_dim1 : e.tp_replicated) += n;
      });
    out.push_back(e);
  }
  return out;
}

std::string emit_fsdp2(const Plan& p, const ModelGraph& model, int gpus_per_node,
                       const std::vector<std::string>& extra, const std::vector<EmitUnit>& units) {
  // The script: a docstring, the PLAN dict (every simulated knob the script applies), then a fixed body that
  // applies PLAN to a Hugging Face or torchtitan Llama-family model (planner/emit_fsdp2_script.cpp).
  std::string s = "#!/usr/bin/env python3\n";
  s += "\"\"\"FSDP2 training script generated by shardplan for " + model.spec().name + ".\n\n";
  s += "Applies the simulated plan to the model: built on the meta device, then float8 (torchao), tensor\n"
       "parallelism, activation checkpointing with the policy the simulator models, fully_shard per unit of\n"
       "blocks (reshard_after_forward, MixedPrecisionPolicy, an HSDP 2-D mesh when the shard group is "
       "smaller\n"
       "than the data-parallel ranks, CPUOffloadPolicy, explicit prefetch); then each rank allocates its "
       "shards\n"
       "only and fills them: a Hugging Face checkpoint's safetensors one tensor at a time, or torchtitan's "
       "init.\n"
       "After the steps rank 0 prints one JSON line: losses, gradient norms and what was built (FSDP units "
       "with\n"
       "their parameter counts, AC wrappers, the TP plan, the meshes, micro-batches); SIM_UNITS below are "
       "the\n"
       "units the simulator built, to compare with.\n\n";
  const int ranks = std::min(gpus_per_node, p.dp * p.tp);
  s += fmt::format("  torchrun --nproc-per-node {} THIS.py --model-source hf --model-path MODEL_DIR_OR_ID\n",
                   ranks);
  s += fmt::format(
      "  torchrun --nproc-per-node {} THIS.py --model-source titan [--model-factory MODULE:FUNCTION]\n",
      ranks);
  s += "  torchrun --nproc-per-node 2 THIS.py --tiny --steps 2 --device cpu   (CPU smoke test, a tiny "
       "model)\n\n";
  s += "Plan: " + plan_to_flags(p) + "\n\"\"\"\n";
  s += comment_lines(extra) + comment_lines(emit_notes("fsdp2", p));
  // The caching allocator reads PYTORCH_CUDA_ALLOC_CONF when it initialises: set before torch is imported.
  if (const std::string conf = alloc_conf(p); !conf.empty())
    s += "import os\nos.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"" + conf +
         "\"  # --allocator / --allocator-gc-threshold\n";
  // fp16-mixed: MixedPrecisionPolicy(param_dtype=float16) over the fp32 shards, ShardedGradScaler around
  // backward and the step (the script body); a 16-bit reduce is fp16 then.
  const char* param_dtype = p.fp16() ? "float16" : p.precision == Precision::kFp32 ? "float32" : "bfloat16";
  const char* reduce_16 = p.fp16() ? "float16" : "bfloat16";
  s += fmt::format(
      "PLAN = dict(zero={}, reshard={}, replicas={}, shard_group={}, tp={}, mbs={}, grad_accum={}, seq={},\n"
      "            ac=\"{}\", wrap={}, prefetch={}, precision=\"{}\", param_dtype=\"{}\", "
      "reduce_dtype=\"{}\",\n"
      "            offload_params={}, fp8=\"{}\", fp8_all_gather={}, compile={}, fused_optimizer={},\n"
      "            async_tp={}, loss_dtype=\"{}\", compile_loss={}, hold_logits={}, zero_grad_in_place={},\n"
      "            attention=\"{}\", attention_dropout={}, sdpa_backend={}, sac_sdpa_ops=\"{}\",\n"
      "            root_params=\"{}\", keep_last_block={}, optimizer=\"{}\", activation_offload={})\n",
      p.zero, py_bool(p.reshard()), p.replicas, p.shard_group, p.tp, p.mbs, p.grad_accum, p.seq,
      to_string(p.ac), p.wrap, p.prefetch, to_string(p.precision), param_dtype,
      p.reduce() == Dtype::kFp32 ? "float32" : reduce_16,
      py_bool(p.offload == Offload::kParams && p.zero >= 1), to_string(p.fp8), py_bool(p.fp8_all_gather),
      py_bool(p.compile), py_bool(p.fused_optimizer), py_bool(p.async_tp), to_string(p.loss_dtype),
      py_bool(p.loss() == LossImpl::kCompiled), py_bool(p.hold_logits), py_bool(p.zero_grad_in_place),
      to_string(p.attention),
      // Any p > 0: the simulated memory does not depend on p (the mask and the dropped probabilities are
      // saved whatever it is); 0.1 is the usual attention dropout of models trained with it (GPT-2, BERT).
      p.attention_dropout ? "0.1" : "0.0",
      p.sdpa_backend ? "\"" + std::string(sdpa_backend_name(*p.sdpa_backend)) + "\"" : std::string("None"),
      to_string(p.sac_sdpa_ops), to_string(p.root_params), py_bool(p.keep_last_block), to_string(p.optimizer),
      py_bool(p.activation_offload == kActivationOffloadAll));
  s += fsdp2_lora_line(p, model);
  // --model-source titan without --model-factory builds torchtitan 0.3.0's registry flavor of the model's
  // dimensions (torchtitan_flavor), when there is one.
  const auto flavor = torchtitan_flavor(model.spec());
  s += flavor ? fmt::format("TITAN_FLAVOR = (\"{}\", \"{}\")\n", flavor->module, flavor->flavor)
              : std::string("TITAN_FLAVOR = None\n");
  // The simulated units (simulator/units.cpp build_units, in forward order), which the script's FSDP units
  // are compared with (tests/emit): name, blocks, TP-local parameter elements and their TP split.
  if (units.empty()) {
    s += "SIM_UNITS = None\n";
  } else {
    s += "SIM_UNITS = [\n";
    for (const EmitUnit& u : units)
      s += fmt::format(
          "    dict(name=\"{}\", blocks={}, elems={}, tp_dim0={}, tp_dim1={}, tp_replicated={}),\n", u.name,
          u.blocks, u.elems, u.tp_dim0, u.tp_dim1, u.tp_replicated);
    s += "]\n";
  }
  s += kFsdp2ScriptHead;
  s += kFsdp2ScriptStep;
  return s;
}

std::string emit_deepspeed(const Plan& p, const ModelGraph& model) {
  (void)model;
  // Bucket and prefetch sizes are DeepSpeed's defaults (deepspeed/runtime/zero/config.py, in elements), which
  // is what the simulator models (docs/mechanics.md §1.2, simulator/cost/constants.hpp
  // kDeepSpeedReduceBucketElems); written out so that the simulated values are the ones the job runs with.
  // overlap_comm: DeepSpeed's default (None) is True for stage 3 only (`overlap_comm_valid`); stage 1/2 with
  // overlap_comm allocate a second IPG bucket the simulator does not model, so it is written as the simulated
  // default.
  Json zero = {{"stage", p.zero},
               {"overlap_comm", p.zero == 3},
               {"contiguous_gradients", true},
               {"reduce_scatter", true},
               {"reduce_bucket_size", static_cast<std::int64_t>(fw::kDeepSpeedReduceBucketElems)},
               {"allgather_bucket_size", 500000000}};
  if (p.zero == 3) {
    zero["stage3_prefetch_bucket_size"] = 50000000;
    zero["stage3_max_live_parameters"] = 1000000000;
    zero["stage3_max_reuse_distance"] = 1000000000;
    zero["stage3_param_persistence_threshold"] = 100000;
    zero["sub_group_size"] = 1000000000;
  }
  // resolve_plan admits offload_optimizer from stage 1 and offload_param only in stage 3, so "stage": 0 never
  // carries an offload section (DeepSpeed ignores it there).
  const Json host = {{"device", "cpu"}, {"pin_memory", true}};
  if (p.offload != Offload::kNone && p.zero >= 1) zero["offload_optimizer"] = host;
  if (p.offload == Offload::kParams && p.zero == 3) zero["offload_param"] = host;
  // ZeRO++ (deepspeed/runtime/zero/config.py, v0.19.8): written only when used, as DeepSpeed's defaults are
  // off; qgZ needs reduce_scatter (stage3.py asserts it), written above.
  if (p.hpz_partition > 1) zero["zero_hpz_partition_size"] = p.hpz_partition;
  if (p.quantized_weights) zero["zero_quantized_weights"] = true;
  if (p.quantized_gradients) zero["zero_quantized_gradients"] = true;
  // train_batch_size = micro batch x accumulation x data-parallel ranks (gpus / tp): DeepSpeedConfig asserts
  // exactly this product with the data-parallel world size (deepspeed/runtime/config.py::_batch_assertion).
  Json j = {{"train_micro_batch_size_per_gpu", p.mbs},
            {"gradient_accumulation_steps", p.grad_accum},
            {"train_batch_size", p.global_batch()},
            {"gradient_clipping", 1.0},
            {"zero_optimization", zero},
            {"optimizer",
             {{"type", "AdamW"}, {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
            {"communication_data_type", p.reduce() == Dtype::kFp32 ? "fp32"
                                        : p.fp16()                 ? "fp16"
                                                                   : "bf16"}};
  // The optimizer (deepspeed/runtime/engine.py _configure_basic_optimizer, v0.19.8): "Adam" is AdamW unless
  // adam_w_mode is false, "Lion" FusedLion, other names torch.optim's class of that name; ZeRO asserts
  // zero_allow_untested_optimizer for optimizers outside its tested list (engine.py
  // _do_optimizer_sanity_check). 8-bit AdamW is a client optimizer passed to deepspeed.initialize.
  switch (p.optimizer) {
    case Optimizer::kAdamW:
      break;
    case Optimizer::kAdam:
      j["optimizer"] = {
          {"type", "Adam"},
          {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}, {"adam_w_mode", false}}}};
      break;
    case Optimizer::kSgd:
      j["optimizer"] = {{"type", "SGD"},
                        {"params", {{"lr", 3e-4}, {"momentum", 0.9}, {"weight_decay", 0.1}}}};
      break;
    case Optimizer::kAdafactor:
      j["optimizer"] = {{"type", "Adafactor"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}}}};
      break;
    case Optimizer::kLion:
      j["optimizer"] = {{"type", "Lion"},
                        {"params", {{"lr", 1e-4}, {"betas", {0.9, 0.99}}, {"weight_decay", 0.1}}}};
      break;
    case Optimizer::kAdamW8bit:
    case Optimizer::kMuon:  // refused by resolve_plan under deepspeed
      j.erase("optimizer");
      break;
  }
  if (p.optimizer != Optimizer::kAdamW && p.optimizer != Optimizer::kAdam && p.zero >= 1)
    j["zero_allow_untested_optimizer"] = true;
  // AutoTP training (DeepSpeed >= 0.16.4, `tensor_parallel.autotp_size`,
  // deepspeed/runtime/tensor_parallel/config.py): the data-parallel world is then world_size / autotp_size,
  // as in the batch product above.
  if (p.tp > 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  // Precision (deepspeed/runtime/precision_config.py, v0.19.8): bf16-mixed = bf16 compute with fp32 master
  // weights and fp32 Adam state (12 bytes/param of optimizer-side state, as simulated); bf16 = no fp32 master
  // (bf16_master_weights_and_grads), fp32 moments; bf16-true = bf16 moments as well (bf16_optimizer_states).
  // DeepSpeed admits the two bf16-master keys only with ZeRO stage 1-3 (config.py::_do_error_check); at stage
  // 0 emit_notes says the master copy stays fp32.
  if (p.precision != Precision::kFp32 && !p.fp16()) j["bf16"] = {{"enabled", true}};
  // fp16-mixed: DeepSpeed's fp16 block with dynamic loss scaling, every value DeepSpeed's default
  // (deepspeed/runtime/constants.py, v0.19.8: loss_scale 0 = dynamic, initial_scale_power 16,
  // loss_scale_window 1000, hysteresis 2, min_loss_scale 1), written out so the job runs what was simulated.
  if (p.fp16())
    j["fp16"] = {{"enabled", true},           {"loss_scale", 0}, {"initial_scale_power", 16},
                 {"loss_scale_window", 1000}, {"hysteresis", 2}, {"min_loss_scale", 1}};
  if (p.zero >= 1 && (p.precision == Precision::kBf16 || p.precision == Precision::kBf16True))
    j["bf16"]["bf16_master_weights_and_grads"] = true;
  if (p.zero >= 1 && p.precision == Precision::kBf16True) j["bf16"]["bf16_optimizer_states"] = true;
  // DeepSpeed's activation checkpointing section configures deepspeed.checkpointing.checkpoint, which the
  // training script must call per block; written only when the plan checkpoints activations.
  // --activation-offload all is cpu_checkpointing (the checkpoint inputs to the host; resolve_plan admits it
  // with full AC only, capabilities_activation_offload.cpp).
  if (p.ac != AcMode::kNone)
    j["activation_checkpointing"] = {{"partition_activations", false},
                                     {"contiguous_memory_optimization", false},
                                     {"cpu_checkpointing", p.activation_offload != 0}};
  return j.dump(2) + "\n";
}

std::string emit_torchtitan_toml(const Plan& p, const ModelGraph& model, int gpus) {
  std::string s;
  s += "# Generated by shardplan for " + model.spec().name + " on " + std::to_string(gpus) + " GPUs\n";
  s += "# plan: " + plan_to_flags(p) + "\n";
  s += "[training]\n";
  // Under PP each rank's local batch is split into pipeline micro-batches
  // (pipeline_parallel_microbatch_size): the plan's micro-batches per step are local_batch_size / micro-batch
  // size.
  s += fmt::format("local_batch_size = {}\nseq_len = {}\n", p.pp > 1 ? p.mbs * p.grad_accum : p.mbs, p.seq);
  s += fmt::format("global_batch_size = {}\n", p.global_batch());
  s += fmt::format("mixed_precision_param = \"{}\"\n",
                   p.precision == Precision::kFp32 ? "float32" : "bfloat16");
  s += fmt::format("mixed_precision_reduce = \"{}\"\n", p.reduce() == Dtype::kFp32 ? "float32" : "bfloat16");
  if (p.offload == Offload::kParams && p.zero >= 1)
    s += "enable_cpu_offload = true\n";  // FSDP2 CPUOffloadPolicy
  if (block_scaled(p.fp8)) {
    s += blockfp_toml(p);
  } else if (p.fp8 != Fp8::kNone) {
    s += "\n[model]\nconverters = [\"float8\"]\n";
    s += "\n[float8]\n";
    if (p.fp8 == Fp8::kRowwise) s += "recipe_name = \"rowwise\"\n";
    s += fmt::format("enable_fsdp_float8_all_gather = {}\n", p.fp8_all_gather ? "true" : "false");
    s += fmt::format("precompute_float8_dynamic_scale_for_fsdp = {}\n", p.fp8_all_gather ? "true" : "false");
    s += "filter_fqns = [\"output\"]\n";
  }
  s += "\n[parallelism]\n";
  // ZeRO-0 shards nothing: every data-parallel rank is a replica (DDP).
  s += fmt::format("data_parallel_replicate_degree = {}\n", p.zero == 0 ? p.dp : p.replicas);
  s += fmt::format("data_parallel_shard_degree = {}\n", p.zero == 0 ? 1 : p.shard_group);
  s += fmt::format("tensor_parallel_degree = {}\n", p.tp);
  if (p.cp > 1) s += fmt::format("context_parallel_degree = {}\n", p.cp);
  if (p.ep > 1) s += fmt::format("expert_parallel_degree = {}\n", p.ep);
  // torchtitan from late 2025 (the TOML config era): parallelism.expert_parallel_comm_backend "standard"
  // (all-to-all, the default) or "deepep" (DeepEP v1's Buffer; the simulated buffer is DeepEP v2's, a note
  // says so).
  if (p.ep > 1 && p.ep_dispatch() == EpBackend::kDeepEp) s += "expert_parallel_comm_backend = \"deepep\"\n";
  if (p.pp > 1) {
    s += fmt::format("pipeline_parallel_degree = {}\npipeline_parallel_schedule = \"{}\"\n", p.pp,
                     titan_schedule(p.pp_schedule));
    s += fmt::format("pipeline_parallel_microbatch_size = {}\n", p.mbs);
    if (const std::string parts = titan_fqn_parts(p, model); !parts.empty())
      s += "module_fqns_per_model_part = " + parts + "\n";
  }
  s += fmt::format("fsdp_reshard_after_forward = \"{}\"\n", p.reshard() ? "always" : "never");
  s += fmt::format("enable_async_tensor_parallel = {}\n", p.async_tp ? "true" : "false");
  // torch.compile of the model and the loss ([compile], torchtitan from late 2024; the importer also reads
  // the older [training] compile).
  s += fmt::format("\n[compile]\nenable = {}\ncomponents = [\"model\", \"loss\"]\n",
                   p.compile ? "true" : "false");
  s += "\n[activation_checkpoint]\n";
  s += fmt::format("mode = \"{}\"\n", p.ac == AcMode::kNone   ? "none"
                                      : p.ac == AcMode::kFull ? "full"
                                                              : "selective");
  if (p.ac == AcMode::kSelective) s += "selective_ac_option = \"op\"\n";
  s += fmt::format("\n[optimizer]\nname = \"{}\"\nimplementation = \"{}\"\n",
                   p.optimizer == Optimizer::kAdam ? "Adam" : "AdamW",
                   p.fused_optimizer ? "fused" : "foreach");
  return s;
}

std::string emit_torchtitan(const Plan& p, const ModelGraph& model, int gpus) {
  // torchtitan 0.3.0's config system (Python dataclass configs, pytorch/torchtitan PR 2386): a config is a
  // function returning Trainer.Config, found by `torchtitan.train --module M --config F` (M a short model
  // name or any importable module path; torchtitan/config/manager.py ConfigManager._load_config), with
  // `--section.field value` overrides on top (tyro). The file is that module; --from reads it back.
  const auto flavor = torchtitan_flavor(model.spec());
  if (!flavor)
    throw InputError::flag(
        "--emit",
        "torchtitan 0.3.0 has no model flavor with the dimensions of " + model.spec().name +
            " (its llama3, qwen3 and deepseek_v3 registries; planner/emit.cpp torchtitan_flavor): use "
            "--emit fsdp2 or --emit torchtitan-toml");
  const std::string mod = flavor->module;
  std::string s = "\"\"\"torchtitan config generated by shardplan for " + model.spec().name + " on " +
                  std::to_string(gpus) + " GPUs: torchtitan " + mod + " flavor " + flavor->flavor + ".\n\n";
  s += "Format: torchtitan 0.3.0's config registry (a function returning Trainer.Config). Run from the\n";
  s += "directory holding this file (NAME = this file's name without .py):\n";
  // The allocator knobs are the launch environment's (PYTORCH_CUDA_ALLOC_CONF; no torchtitan field).
  const std::string conf = alloc_conf(p);
  s += fmt::format(
      "  {}PYTHONPATH=. torchrun --nproc-per-node {} -m torchtitan.train --module NAME --config "
      "shardplan_config\n",
      conf.empty() ? "" : "PYTORCH_CUDA_ALLOC_CONF=" + conf + " ", std::min(gpus, 8));
  s += "Overrides go on the same line (--training.steps 1000 --hf_assets_path ./assets/hf/...).\n\n";
  s += "Plan: " + plan_to_flags(p) + "\n\"\"\"\n";
  // dtype / mixed_precision_param (torchtitan/config/configs.py TrainingConfig): dtype bfloat16 puts
  // parameters, gradients and optimizer state in bf16 (--precision bf16-true); dtype float32 with
  // mixed_precision_param bfloat16 is FSDP2 mixed precision over fp32 parameters (bf16-mixed).
  const bool bf16_true = p.precision == Precision::kBf16True;
  const char* param = p.precision == Precision::kFp32 ? "float32" : "bfloat16";
  // ZeRO-0 shards nothing: every data-parallel rank is a replica (DDP, data_parallel_shard_degree 1).
  const int replicate = p.zero == 0 ? p.dp : p.replicas, shard = p.zero == 0 ? 1 : p.shard_group;
  const bool async_tp = p.async_tp && p.compile;
  s += "from torchtitan.components.loss import CrossEntropyLoss\n";
  s += p.optimizer == Optimizer::kAdam
           ? "from torchtitan.components.optimizer import OptimizersContainer, ParamGroupConfig\n"
           : "from torchtitan.components.optimizer import default_adamw\n";
  if (block_scaled(p.fp8))
    s += blockfp_titan_import(p);
  else if (p.fp8 != Fp8::kNone)
    s += "from torchtitan.components.quantization import Float8LinearConverter\n";
  s += "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig\n";
  if (p.ac == AcMode::kSelective)
    s += "from torchtitan.distributed.activation_checkpoint import SelectiveAC\n";
  if (p.ac == AcMode::kFull) s += "from torchtitan.distributed.activation_checkpoint import FullAC\n";
  s += "from torchtitan.models.common.config_utils import decoder_vocab_size\n";
  s += "from torchtitan.models." + mod + " import model_registry\n";
  s += "from torchtitan.trainer import Trainer\n\n\n";
  s += "def shardplan_config() -> Trainer.Config:\n";
  // --sdpa-backend flash: attn_backend "varlen" (torch.nn.attention.varlen.varlen_attn, the FlashAttention
  // kernel) instead of the registry's default FlexAttention; check_expressible refuses the other backends.
  std::string registry_args = p.sdpa_backend == SdpaBackend::kFlash ? "attn_backend=\"varlen\"" : "";
  // --ep-backend deepep: model_registry(moe_comm_backend="deepep") (qwen3 and deepseek_v3 registries: the
  // MoE layers get DeepEPTokenDispatcher, whose buffer torchtitan sizes from training.local_batch_size x
  // seq_len / (cp x tp)).
  if (p.ep > 1 && p.ep_dispatch() == EpBackend::kDeepEp)
    registry_args += std::string(registry_args.empty() ? "" : ", ") + "moe_comm_backend=\"deepep\"";
  if (block_scaled(p.fp8)) {
    s += fmt::format("    model_spec = model_registry(\n        \"{}\",\n{}        converters=[\n",
                     flavor->flavor, registry_args.empty() ? "" : "        " + registry_args + ",\n");
    s += blockfp_titan_converter(p) + "        ],\n    )\n";
  } else if (p.fp8 != Fp8::kNone) {
    // The simulator converts the blocks' linears, not the output projection (lm_head in torchtitan 0.3.0);
    // Float8LinearConverter also skips linears with a dimension not divisible by 16.
    s += fmt::format("    model_spec = model_registry(\n        \"{}\",\n{}        converters=[\n",
                     flavor->flavor, registry_args.empty() ? "" : "        " + registry_args + ",\n");
    s += fmt::format(
        "            Float8LinearConverter.Config(\n                recipe_name=\"{}\",\n"
        "                filter_fqns=[\"lm_head\"],\n                model_compile_enabled={},\n"
        "            ),\n        ],\n    )\n",
        p.fp8 == Fp8::kRowwise ? "rowwise" : "tensorwise", py_bool(p.compile));
  } else {
    s += fmt::format("    model_spec = model_registry(\"{}\"{})\n", flavor->flavor,
                     registry_args.empty() ? "" : ", " + registry_args);
  }
  s += "    config = Trainer.Config(\n        model_spec=model_spec,\n";
  // The simulator holds the full logits for the loss (no chunking): the plain cross entropy, not
  // ChunkedLossWrapper.
  s += "        loss=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),\n";
  // Adam: default_adamw's catch-all group with the "Adam" factory (components/optimizer/optimizer.py).
  s += p.optimizer == Optimizer::kAdam
           ? "        optimizer=OptimizersContainer.Config(\n            param_groups=[\n"
             "                ParamGroupConfig(\n                    pattern=\".*\",\n"
             "                    optimizer_name=\"Adam\",\n"
             "                    optimizer_kwargs={\"lr\": 3e-4, \"betas\": (0.9, 0.95), \"eps\": 1e-8, "
             "\"weight_decay\": 0.1},\n                ),\n            ],\n        ),\n"
           : "        optimizer=default_adamw(lr=3e-4),\n";
  // disable_cuda_graphs: torchtitan 0.3.0 captures forward + backward in a CUDA graph by default (trainer.py
  // wrap_with_cuda_graph) and then zeroes gradients in place (train_step: zero_grad(set_to_none=
  // disable_cuda_graphs)), so gradients and the graph's private memory pool live across steps; the simulator
  // models eager steps with gradients freed by zero_grad, which is this setting. Trainer.Config.
  // _validate_cuda_graphs also refuses pipeline parallelism unless it is set.
  s += fmt::format(
      "        training=TrainingConfig(\n            local_batch_size={},\n            "
      "global_batch_size={},\n"
      "            seq_len={},\n            dtype=\"{}\",\n            mixed_precision_param=\"{}\",\n"
      "            mixed_precision_reduce=\"float32\",\n            enable_cpu_offload={},\n"
      "            disable_cuda_graphs=True,\n        ),\n",
      p.pp > 1 ? p.mbs * p.grad_accum : p.mbs, p.global_batch(), p.seq, bf16_true ? "bfloat16" : "float32",
      param, py_bool(p.offload == Offload::kParams && p.zero >= 1));
  // Pipeline parallelism (ParallelismConfig pipeline_parallel_*, torchtitan 0.3.0 config/configs.py): the
  // degree, the schedule by torch's name, the micro-batch size, and the stages when they are not torchtitan's
  // own split.
  std::string pipeline;
  if (p.pp > 1) {
    pipeline = fmt::format(
        "            pipeline_parallel_degree={},\n            pipeline_parallel_schedule=\"{}\",\n"
        "            pipeline_parallel_microbatch_size={},\n",
        p.pp, titan_schedule(p.pp_schedule), p.mbs);
    if (const std::string parts = titan_fqn_parts(p, model); !parts.empty())
      pipeline += "            module_fqns_per_model_part=" + parts + ",\n";
  }
  s += fmt::format(
      "        parallelism=ParallelismConfig(\n            data_parallel_replicate_degree={},\n"
      "            data_parallel_shard_degree={},\n            tensor_parallel_degree={},\n{}{}{}"
      "            fsdp_reshard_after_forward=\"{}\",\n        ),\n",
      replicate, shard, p.tp,
      p.cp > 1 ? fmt::format("            context_parallel_degree={},\n", p.cp) : std::string(),
      p.ep > 1 ? fmt::format("            expert_parallel_degree={},\n", p.ep) : std::string(), pipeline,
      p.reshard() ? "always" : "never");
  s += std::string("        activation_checkpoint=") +
       (p.ac == AcMode::kNone   ? "None"
        : p.ac == AcMode::kFull ? "FullAC.Config()"
                                : "SelectiveAC.Config()") +
       ",\n";
  s += fmt::format(
      "        compile=CompileConfig(\n            enable={},\n            components=[\"model\", "
      "\"loss\"],\n"
      "            enable_async_tensor_parallel={},\n        ),\n    )\n",
      py_bool(p.compile), py_bool(async_tp));
  s += fmt::format("    config.optimizer.implementation = \"{}\"\n", p.fused_optimizer ? "fused" : "foreach");
  s += "    return config\n";
  return s;
}

std::pair<std::string, std::string> parse_emit_spec(const std::string& spec) {
  auto c = spec.find(':');
  std::string kind = spec.substr(0, c);
  if (c == std::string::npos || c + 1 >= spec.size())
    throw InputError::flag("--emit",
                           "expected KIND:FILE (" + emit_target_names() + "), got \"" + spec + "\"");
  if (!parse_emit_target(kind))
    throw InputError::flag("--emit",
                           "unknown kind \"" + kind + "\"; expected one of: " + emit_target_names());
  return {kind, spec.substr(c + 1)};
}

std::string emit(const std::string& kind, const Plan& p, const ModelGraph& model, int gpus, int gpus_per_node,
                 const std::vector<std::string>& extra_notes, const std::vector<EmitUnit>& units) {
  // Megatron-core runs are configured by Megatron/NeMo arguments, which no emitter writes.
  if (p.runtime == Runtime::kMegatron)
    throw InputError::flag("--emit",
                           "a megatron plan has no emitter (set its tp/pp/cp and "
                           "--use-distributed-optimizer in Megatron/NeMo by hand)");
  // Pipeline parallelism: both torchtitan formats write ParallelismConfig's pipeline_parallel_*; DeepSpeed
  // keeps the degree in code (a note); the FSDP2 script has no pipeline schedule.
  if (p.pp > 1 && kind == "fsdp2")
    throw InputError::flag("--emit", "fsdp2 cannot express pipeline parallelism (pp " + std::to_string(p.pp) +
                                         "): use --emit torchtitan:FILE, or pin --fix pp=1");
  // The FSDP2 script and the DeepSpeed config have no context or expert parallelism; torchtitan has both
  // (ParallelismConfig context_parallel_degree / expert_parallel_degree, in both config formats).
  if (kind != "torchtitan" && kind != "torchtitan-toml" && (p.cp > 1 || p.ep > 1))
    throw InputError::flag("--emit", kind + " cannot express context or expert parallelism (cp " +
                                         std::to_string(p.cp) + ", ep " + std::to_string(p.ep) +
                                         "); use --emit torchtitan:FILE");
  check_expressible(kind, p);
  if (kind == "fsdp2") return emit_fsdp2(p, model, gpus_per_node, extra_notes, units);
  if (kind == "deepspeed") {
    if (p.runtime != Runtime::kDeepSpeed && p.replicas > 1)
      throw InputError::flag("--emit", "deepspeed cannot express this HSDP plan");
    return emit_deepspeed(p, model);
  }
  if (kind == "torchtitan-toml")
    return comment_lines(extra_notes) + comment_lines(emit_notes(kind, p)) +
           emit_torchtitan_toml(p, model, gpus);
  // The notes go after the module docstring, so that it stays the docstring.
  std::string py = emit_torchtitan(p, model, gpus);
  const auto doc_end = py.find("\"\"\"\n", 3) + 4;
  return py.substr(0, doc_end) + comment_lines(extra_notes) + comment_lines(emit_notes(kind, p)) +
         py.substr(doc_end);
}

}  // namespace shardplan

// Emitters: the recommended plan as code and configs users paste into their training jobs.
#include "planner/emit.hpp"

#include <fmt/format.h>

#include "core/json_reader.hpp"
#include "planner/emit_blockfp.hpp"
#include "planner/emit_common.hpp"
#include "planner/emit_lora.hpp"
#include "planner/emit_target.hpp"
#include "simulator/cost/cost.hpp"
#include "simulator/lowering/lowering.hpp"
#include "simulator/plan/plan.hpp"
#include "simulator/simulate/simulate.hpp"

namespace shardplan {

using namespace emit_detail;

extern const char* const kFsdp2ScriptHead;      // planner/emit_fsdp2_script.cpp
extern const char* const kFsdp2ScriptParallel;  // planner/emit_fsdp2_script_parallel.cpp
extern const char* const kFsdp2ScriptStep;      // planner/emit_fsdp2_script_step.cpp
extern const char* const kFsdp2ScriptMain;      // planner/emit_fsdp2_script_main.cpp

namespace {
/// The knobs an output of `kind` would run differently from the simulated plan and cannot be told otherwise:
/// one InputError naming the knob and what to do (emit() refuses before writing anything).
void check_expressible(const std::string& kind, const Plan& p) {
  const bool titan = kind == "torchtitan" || kind == "torchtitan-toml";
  auto refuse = [&](const std::string& why) { throw InputError::flag("--emit", kind + ": " + why); };
  check_lora_expressible(kind, p);     // planner/emit_lora.cpp
  check_blockfp_expressible(kind, p);  // planner/emit_blockfp.cpp
  // ChunkedLossWrapper is torchtitan 0.3.0's (components/loss.py; pytorch/torchtitan PR 2937, 2026-04): the
  // TOML-era torchtitan and the FSDP2 script run the loss over the whole logits.
  if (p.loss() == LossImpl::kChunked && kind != "torchtitan")
    refuse(
        "--loss-impl chunked: only torchtitan 0.3.0's config has ChunkedLossWrapper (loss.num_chunks); use "
        "--emit torchtitan:FILE, or simulate with --loss-impl eager or compiled");
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
  // transformers 5.23's experts implementation the plan simulated (--moe-impl hf-grouped-mm / hf-eager): the
  // script loads the model with it (from_config(experts_implementation=...), modeling_utils.py
  // _check_and_adjust_experts_implementation); None leaves transformers' default, grouped_mm.
  s += p.moe_impl == MoeImpl::kHfEager       ? "HF_EXPERTS = \"eager\"\n"
       : p.moe_impl == MoeImpl::kHfGroupedMm ? "HF_EXPERTS = \"grouped_mm\"\n"
                                             : "HF_EXPERTS = None\n";
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
  s += kFsdp2ScriptParallel;
  s += kFsdp2ScriptStep;
  s += kFsdp2ScriptMain;
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

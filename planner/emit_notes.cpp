// The notes each emitter adds to what it writes (emit_notes): what the plan assumes that the output cannot
// say, and where the output runs the plan under another runtime.
#include <fmt/format.h>

#include "planner/emit.hpp"
#include "planner/emit_common.hpp"

namespace shardplan {

using namespace emit_detail;

namespace {

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

/// Knobs that the router, the data or the model code decide rather than any config (every output format): a
/// note of what the prediction assumed.
void model_code_notes(const Plan& p, std::vector<std::string>& n) {
  if (p.moe_impl == MoeImpl::kLoop)
    n.push_back(std::string("--moe-impl ") + to_string(p.moe_impl) +
                ": the model code's MoE block decides; the prediction assumed Hugging Face's loop over the "
                "experts");
  if (p.moe_impl == MoeImpl::kHfGroupedMm || p.moe_impl == MoeImpl::kHfEager)
    n.push_back(std::string("--moe-impl ") + to_string(p.moe_impl) +
                ": transformers 5.23's experts_implementation decides (config._experts_implementation, "
                "from_pretrained(experts_implementation=...)); the prediction assumed " +
                (p.moe_impl == MoeImpl::kHfEager ? "\"eager\"" : "\"grouped_mm\""));
  if (p.moe_impl == MoeImpl::kDeepSpeed)
    n.push_back(
        "--moe-impl deepspeed: the model code decides; the prediction assumed DeepSpeed-MoE's layer "
        "(deepspeed.moe.layer.MoE: capacity_factor = --moe-capacity-factor or 1.0, min_capacity 4, "
        "drop_tokens True), whose experts run every expert padded to its capacity");
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

/// A ds_config: what the model code and the training script decide.
void deepspeed_notes(const Plan& p, std::vector<std::string>& n) {
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

/// torchtitan 0.3.0's Python config: knobs its Trainer.Config has no field for.
void torchtitan_notes(const Plan& p, std::vector<std::string>& n) {
  // Knobs torchtitan 0.3.0's Trainer.Config (tools/pyenv-requirements.txt) has no field for: listed, never
  // silently dropped (torchtitan/config/configs.py, components/quantization/float8.py,
  // components/optimizer/optimizer.py of that version).
  if (p.prefetch != 1)
    n.push_back(fmt::format("--prefetch {}: torchtitan has no FSDP prefetch field (it prefetches one block)",
                            p.prefetch));
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

/// The torchtitan TOML (2024-2025 JobConfig): knobs it has no key for.
void torchtitan_toml_notes(const Plan& p, std::vector<std::string>& n) {
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

/// The FSDP2 script: what it runs differently from the simulated plan, and what the model code decides.
void fsdp2_notes(const Plan& p, std::vector<std::string>& n) {
  if (p.precision == Precision::kBf16)
    n.push_back(
        "--precision bf16 (fp32 Adam moments on bf16 parameters): torch.optim.AdamW keeps its moments in the "
        "parameter dtype, so this script holds bf16 moments (--precision bf16-true's memory)");
  if (p.optimizer == Optimizer::kLion)
    n.push_back("--optimizer lion: the script imports lion_pytorch (pip install lion-pytorch==0.2.5)");
  if (p.optimizer == Optimizer::kMuon)
    n.push_back(
        "--optimizer muon: the script's GatheredMuon gathers each sharded block matrix's update, "
        "orthogonalises it with torch.optim._muon's Newton-Schulz on every rank and applies this rank's "
        "rows (Moonlight's distributed Muon); AdamW for the other parameters");
  if (p.fp8 != Fp8::kNone)
    n.push_back(
        "float8 needs CUDA float8 GEMMs (torchao); on --device cpu the script emulates them (emulate=True)");
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

}  // namespace

std::vector<std::string> emit_notes(const std::string& kind, const Plan& p) {
  std::vector<std::string> n;
  const Runtime target = emit_target_runtime(kind);
  if (p.runtime != target)
    n.push_back(fmt::format(
        "the plan was simulated for {}; this {} output runs it under {} (see the re-simulated line)",
        to_string(p.runtime), kind, to_string(target)));
  if (kind == "deepspeed") deepspeed_notes(p, n);
  if (kind == "torchtitan") torchtitan_notes(p, n);
  if (kind == "torchtitan-toml") torchtitan_toml_notes(p, n);
  if (kind == "fsdp2") fsdp2_notes(p, n);
  return n;
}

}  // namespace shardplan

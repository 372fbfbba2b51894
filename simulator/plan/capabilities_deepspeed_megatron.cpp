// The capability rows of DeepSpeed 0.19.8 and Megatron-core 0.8.0 (capability_rows.hpp), every entry with its
// source at the pinned version.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

// DeepSpeed 0.19.8 (ZeRO, AutoTP, PipelineEngine, MoE).
constexpr Row kDeepSpeedRows[] = {
    {Feature::kZero1, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py",
     "zero_optimization.stage 1"},
    {Feature::kZero2, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py",
     "zero_optimization.stage 2"},
    {Feature::kZero3, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/stage3.py", "zero_optimization.stage 3"},
    {Feature::kHsdp, N, "deepspeed 0.19.8 deepspeed/runtime/config.py _REMOVED_ZERO_CONFIG_KEYS",
     "MiCS (mics_shard_size: all state sharded within a group, gradients all-reduced across groups) was "
     "removed and its keys now raise DeepSpeedConfigError (deepspeedai/DeepSpeed issue 8489); DeepSpeed's "
     "remaining hybrid sharding is ZeRO++ hpZ: use --hpz-partition N with --shard-group 0"},
    {Feature::kTensorParallel, Y, "deepspeed 0.19.8 deepspeed/module_inject/auto_tp.py",
     "AutoTP: LinearLayer (column) and LinearAllreduce (row)"},
    {Feature::kSequenceParallel, N, "deepspeed 0.19.8 deepspeed/module_inject/layers.py LinearAllreduce",
     "AutoTP all-reduces each row-parallel output over the full sequence (RowParallel) and all-reduces the "
     "column-parallel input gradients (ColumnParallel.backward): no sequence parallelism"},
    {Feature::kTpWithHsdp, M, "deepspeed 0.19.8 deepspeed/runtime/zero/config.py",
     "deepspeed's hybrid sharding (ZeRO++ hpZ) is not modelled as HSDP; use --shard-group 0"},
    {Feature::kAsyncTp, N, "deepspeed 0.19.8 deepspeed/module_inject/layers.py LinearAllreduce",
     "AutoTP's all-reduces are not pipelined with the GEMMs (tp_overlap_comm only overlaps the backward "
     "input "
     "all-reduce with the weight-gradient GEMM); drop --async-tp"},
    {Feature::kAsyncTpEager, N, "deepspeed 0.19.8 deepspeed/module_inject/layers.py", "no async TP"},
    {Feature::kCompile, Y, "deepspeed 0.19.8 deepspeed/runtime/engine.py DeepSpeedEngine.compile",
     "engine.compile()"},
    {Feature::kPrefetchDepth, N,
     "deepspeed 0.19.8 deepspeed/runtime/zero/config.py stage3_prefetch_bucket_size",
     "ZeRO-3 prefetches by bytes (stage3_prefetch_bucket_size), not by units; use --prefetch 1"},
    {Feature::kPipeline, Y, "deepspeed 0.19.8 deepspeed/runtime/pipe/engine.py", "PipelineEngine"},
    {Feature::kPipelineSharded, N, "deepspeed 0.19.8 deepspeed/runtime/pipe/engine.py",
     "deepspeed's PipelineEngine supports ZeRO stage 0 or 1 only (\"ZeRO-2 and ZeRO-3 are incompatible with "
     "pipeline parallelism\"); use --zero 1"},
    {Feature::kScheduleGpipe, N, "deepspeed 0.19.8 deepspeed/runtime/pipe/schedule.py",
     "deepspeed's PipelineEngine runs its own 1F1B schedule (TrainSchedule); use --pp-schedule 1f1b"},
    {Feature::kSchedule1F1B, Y, "deepspeed 0.19.8 deepspeed/runtime/pipe/schedule.py", "TrainSchedule"},
    {Feature::kScheduleInterleaved, N, "deepspeed 0.19.8 deepspeed/runtime/pipe/schedule.py",
     "deepspeed's PipelineEngine runs its own 1F1B schedule (TrainSchedule); use --pp-schedule 1f1b"},
    {Feature::kScheduleZbv, N, "deepspeed 0.19.8 deepspeed/runtime/pipe/schedule.py",
     "deepspeed's PipelineEngine runs its own 1F1B schedule (TrainSchedule); use --pp-schedule 1f1b"},
    {Feature::kScheduleDualPipeV, N, "deepspeed 0.19.8 deepspeed/runtime/pipe/schedule.py",
     "deepspeed's PipelineEngine runs its own 1F1B schedule (TrainSchedule); use --pp-schedule 1f1b"},
    {Feature::kContextParallel, N, "deepspeed 0.19.8 deepspeed/sequence/layer.py DistributedAttention",
     "DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads), not ring attention; use --cp 1"},
    {Feature::kExpertParallel, Y, "deepspeed 0.19.8 deepspeed/moe/layer.py MoE(ep_size)",
     "expert-parallel groups from the data-parallel ranks"},
    {Feature::kOffloadOptimizer, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/offload_config.py",
     "offload_optimizer (ZeRO-Offload)"},
    {Feature::kOffloadParams, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/offload_config.py",
     "offload_param (ZeRO-Infinity)"},
    {Feature::kOffloadBelowZero3, N, "deepspeed 0.19.8 deepspeed/runtime/zero/offload_config.py",
     "deepspeed offloads parameters (offload_param, \"valid only with stage 3\") only in ZeRO stage 3; use "
     "--zero 3 or --offload optimizer"},
    {Feature::kOffloadWithDdp, N, "deepspeed 0.19.8 deepspeed/runtime/zero/offload_config.py",
     "deepspeed offloads the optimizer (offload_optimizer) from ZeRO stage 1 up; use --zero 1, 2 or 3"},
    {Feature::kOffloadWithAccum, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/stage3.py",
     "gradients accumulate into the host partitions"},
    {Feature::kFp8, Y, "torchao 0.18.0 torchao/float8/float8_linear_utils.py convert_to_float8_training",
     "torchao's Float8Linear swapped in by the model code (no ds_config key)"},
    {Feature::kFp8AllGather, N, "torchao 0.18.0 torchao/float8/fsdp_utils.py",
     "float8 all-gather hooks FSDP2's fsdp_pre_all_gather extension; ZeRO-3 gathers 16-bit weights; use "
     "--runtime fsdp2"},
    {Feature::kRootParams, N, "torchtitan before 83e694105 parallelize_llama.py",
     "the root unit's parameters are an FSDP2 wrapping of torchtitan; needs --runtime fsdp2"},
    {Feature::kKeepLastBlock, N, "torchtitan before 83e694105 parallelize_llama.py",
     "keeping the last block after forward is an FSDP2 wrapping of torchtitan; needs --runtime fsdp2"},
    {Feature::kNonMixedPrecision, Y, "deepspeed 0.19.8 deepspeed/runtime/bf16_optimizer.py",
     "bf16 / fp32 configs"},
    {Feature::kOptimizerOther, Y, "deepspeed 0.19.8 deepspeed/runtime/engine.py _configure_basic_optimizer",
     "a client optimizer (adafactor, adamw8bit, lion) over the fp32 partitions"},
    {Feature::kOptimizerMuon, M, "deepspeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py",
     "DeepSpeed hands the optimizer flat 1-D shards, its fp32 partitions (torch.optim.Muon raises on them); "
     "its own ZeRO Muon (MuonWithAuxAdam, matrices split over partitions all-reduced) is not modelled; use "
     "--runtime fsdp2"},
    {Feature::kMuonSplitMatrices, M, "deepspeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py",
     "DeepSpeed's ZeRO Muon is not modelled; use --runtime fsdp2"},
    {Feature::kAdafactorSharded, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py",
     "Adafactor over the flat fp32 partitions"},
    {Feature::kOffloadOtherOptimizer, M, "deepspeed 0.19.8 deepspeed/ops/adam/cpu_adam.py DeepSpeedCPUAdam",
     "ZeRO-Offload steps with DeepSpeedCPUAdam; other optimizers' host steps are not modelled; use --offload "
     "none or --optimizer adam"},
    {Feature::kFp16Mixed, Y, "deepspeed 0.19.8 deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler",
     "the fp16 config block (loss_scale 0: dynamic): FP16_Optimizer at ZeRO-0, the ZeRO optimizers' fp16 "
     "partitions with their fp32 master copy above"},
    {Feature::kLora, Y,
     "deepspeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py (bit16_groups), stage3.py "
     "_get_trainable_parameter_groups",
     "only parameters that require grad enter the optimizer's flat partitions; ZeRO-1/2 keep frozen "
     "parameters whole on every rank, ZeRO-3 partitions them too"},
    {Feature::kLoraTp, N, "deepspeed 0.19.8 deepspeed/module_inject/auto_tp.py",
     "AutoTP does not shard PEFT's adapter layers; use --tp 1"},
    {Feature::kLoraQuantTp, N, "bitsandbytes 0.50.2 bitsandbytes/nn/modules.py Linear4bit, Linear8bitLt",
     "a bitsandbytes layer holds its whole quantised weight: no tensor-parallel split; use --tp 1"},
    {Feature::kLoraNf4Sharded, Y,
     "bitsandbytes 0.50.2 bitsandbytes/functional.py quantize_4bit (quant_storage)",
     "ZeRO-3 partitions the packed weights stored as bf16 (bnb_4bit_quant_storage=bfloat16, PEFT's "
     "DeepSpeed QLoRA recipe); ZeRO-1/2 keep them whole; each module's quant_state stays whole on every "
     "rank"},
    {Feature::kLoraInt8Sharded, M, "deepspeed 0.19.8 deepspeed/runtime/zero/stage3.py",
     "an LLM.int8 base under ZeRO is not modelled; use --lora-base nf4 or --zero 0"},
};

// Megatron-core 0.8.0 (core_r0.8.0): DistributedDataParallel + distributed optimizer, TP/SP, PP, CP, EP.
constexpr Row kMegatronRows[] = {
    {Feature::kZero1, Y, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "the distributed optimizer"},
    {Feature::kZero2, N, "megatron-core 0.8.0 megatron/core/distributed/distributed_data_parallel.py",
     "megatron shards the optimizer state only: --zero 1 (distributed optimizer) or --zero 0 (DDP)"},
    {Feature::kZero3, N, "megatron-core 0.8.0 megatron/core/distributed/distributed_data_parallel.py",
     "megatron shards the optimizer state only: --zero 1 (distributed optimizer) or --zero 0 (DDP)"},
    {Feature::kHsdp, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "megatron runtime: the distributed optimizer shards over all data-parallel ranks (no HSDP); use "
     "--shard-group 0"},
    {Feature::kTensorParallel, Y, "megatron-core 0.8.0 megatron/core/tensor_parallel/layers.py",
     "ColumnParallelLinear / RowParallelLinear"},
    {Feature::kSequenceParallel, Y, "megatron-core 0.8.0 megatron/core/model_parallel_config.py",
     "sequence_parallel (NeMo's recipes set it with TP)"},
    {Feature::kTpWithHsdp, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "no HSDP; use --shard-group 0"},
    {Feature::kAsyncTp, Y, "megatron-core 0.8.0 megatron/core/model_parallel_config.py tp_comm_overlap",
     "Transformer Engine userbuffers overlap the TP all-gathers / reduce-scatters with the GEMMs"},
    {Feature::kAsyncTpEager, Y, "megatron-core 0.8.0 megatron/core/model_parallel_config.py tp_comm_overlap",
     "Transformer Engine's overlap needs no torch.compile"},
    {Feature::kCompile, N, "megatron-core 0.8.0 megatron/core/jit.py",
     "megatron compiles only its small fused functions (jit_fuser), never the model; its fused kernels are "
     "always modelled; drop --compile"},
    {Feature::kPrefetchDepth, N, "megatron-core 0.8.0 megatron/core/distributed/param_and_grad_buffer.py",
     "parameters are gathered per bucket after the step, not per unit; use --prefetch 1"},
    {Feature::kPipeline, Y, "megatron-core 0.8.0 megatron/core/pipeline_parallel/schedules.py",
     "pipeline_model_parallel_size"},
    {Feature::kPipelineSharded, N,
     "megatron-core 0.8.0 megatron/core/distributed/distributed_data_parallel.py",
     "megatron shards the optimizer state only: --zero 1 (distributed optimizer) or --zero 0 (DDP)"},
    {Feature::kScheduleGpipe, N, "megatron-core 0.8.0 megatron/core/pipeline_parallel/schedules.py",
     "megatron runs 1f1b or interleaved-1f1b (virtual pipeline stages)"},
    {Feature::kSchedule1F1B, Y, "megatron-core 0.8.0 megatron/core/pipeline_parallel/schedules.py",
     "forward_backward_pipelining_without_interleaving"},
    {Feature::kScheduleInterleaved, Y, "megatron-core 0.8.0 megatron/core/pipeline_parallel/schedules.py",
     "forward_backward_pipelining_with_interleaving (virtual_pipeline_model_parallel_size)"},
    {Feature::kScheduleZbv, N, "megatron-core 0.8.0 megatron/core/pipeline_parallel/schedules.py",
     "megatron runs 1f1b or interleaved-1f1b (virtual pipeline stages)"},
    {Feature::kScheduleDualPipeV, N, "megatron-core 0.8.0 megatron/core/pipeline_parallel/schedules.py",
     "megatron runs 1f1b or interleaved-1f1b (virtual pipeline stages)"},
    {Feature::kContextParallel, Y, "megatron-core 0.8.0 megatron/core/model_parallel_config.py",
     "context_parallel_size (Transformer Engine ring attention)"},
    {Feature::kExpertParallel, Y, "megatron-core 0.8.0 megatron/core/model_parallel_config.py",
     "expert_model_parallel_size"},
    {Feature::kOffloadOptimizer, M, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "megatron: the distributed optimizer's CPU offload is not modelled; use --offload none"},
    {Feature::kOffloadParams, N, "megatron-core 0.8.0 megatron/core/distributed/distributed_data_parallel.py",
     "megatron keeps its parameter buffer on the GPU; use --offload none"},
    {Feature::kOffloadBelowZero3, N, "megatron-core 0.8.0", "no parameter offload; use --offload none"},
    {Feature::kOffloadWithDdp, N, "megatron-core 0.8.0", "no offload at ZeRO-0; use --offload none"},
    {Feature::kOffloadWithAccum, N, "megatron-core 0.8.0", "no parameter offload; use --offload none"},
    {Feature::kFp8, Y, "megatron-core 0.8.0 megatron/core/transformer/transformer_config.py fp8",
     "Transformer Engine fp8 (delayed scaling), modelled as --fp8 tensorwise"},
    {Feature::kFp8AllGather, N, "megatron-core 0.8.0 megatron/core/distributed/param_and_grad_buffer.py",
     "parameters are gathered in bf16 from the param buffer; use --runtime fsdp2 for float8 all-gather"},
    {Feature::kRootParams, N, "torchtitan before 83e694105 parallelize_llama.py",
     "the root unit's parameters are an FSDP2 wrapping of torchtitan; needs --runtime fsdp2"},
    {Feature::kKeepLastBlock, N, "torchtitan before 83e694105 parallelize_llama.py",
     "keeping the last block after forward is an FSDP2 wrapping of torchtitan; needs --runtime fsdp2"},
    {Feature::kNonMixedPrecision, M, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "megatron runtime models bf16 parameters with fp32 main parameters: use --precision bf16-mixed"},
    {Feature::kOptimizerOther, N,
     "megatron-core 0.8.0 megatron/core/optimizer/__init__.py _get_megatron_optimizer_based_on_param_groups",
     "the distributed optimizer builds Adam (AdamW) or SGD only (Apex/TE FusedAdam with decoupled decay, "
     "FusedSGD); use --optimizer adamw, adam or sgd"},
    {Feature::kOptimizerMuon, N,
     "megatron-core 0.8.0 megatron/core/optimizer/__init__.py _get_megatron_optimizer_based_on_param_groups",
     "no Muon in megatron-core 0.8.0; use --runtime fsdp2"},
    {Feature::kMuonSplitMatrices, N,
     "megatron-core 0.8.0 megatron/core/optimizer/__init__.py _get_megatron_optimizer_based_on_param_groups",
     "no Muon in megatron-core 0.8.0; use --runtime fsdp2"},
    {Feature::kAdafactorSharded, N,
     "megatron-core 0.8.0 megatron/core/optimizer/__init__.py _get_megatron_optimizer_based_on_param_groups",
     "no Adafactor in megatron-core 0.8.0; use --optimizer adamw, adam or sgd"},
    {Feature::kOffloadOtherOptimizer, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "megatron's CPU offload is not modelled; use --offload none"},
    {Feature::kFp16Mixed, Y, "megatron-core 0.8.0 megatron/core/optimizer/grad_scaler.py DynamicGradScaler",
     "--fp16: fp16 parameters, fp32 main parameters and gradients in the distributed optimizer, dynamic loss "
     "scale"},
    {Feature::kLora, N, "megatron-core 0.8.0 (no LoRA: NeMo PEFT wraps megatron-core from outside)",
     "use --runtime fsdp2, fsdp1 or deepspeed"},
    {Feature::kLoraTp, N, "megatron-core 0.8.0 (no LoRA: NeMo PEFT wraps megatron-core from outside)",
     "use --runtime fsdp2"},
    {Feature::kLoraQuantTp, N, "megatron-core 0.8.0 (no LoRA: NeMo PEFT wraps megatron-core from outside)",
     "use --runtime fsdp1 or deepspeed"},
    {Feature::kLoraNf4Sharded, N, "megatron-core 0.8.0 (no LoRA: NeMo PEFT wraps megatron-core from outside)",
     "use --runtime fsdp1 or deepspeed"},
    {Feature::kLoraInt8Sharded, N,
     "megatron-core 0.8.0 (no LoRA: NeMo PEFT wraps megatron-core from outside)",
     "use --zero 0 with another runtime"},
};

}  // namespace

std::span<const Row> deepspeed_rows() {
  return kDeepSpeedRows;
}

std::span<const Row> megatron_rows() {
  return kMegatronRows;
}

}  // namespace shardplan

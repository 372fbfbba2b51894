// The capability rows of the two torch runtimes (capability_rows.hpp): FSDP2 as torchtitan 0.3.0 drives it
// and FSDP1 (FullyShardedDataParallel), both on torch 2.15, every entry with its source at the pinned
// version.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

// FSDP2 as torchtitan 0.3.0 drives it on torch 2.15.
constexpr Row kFsdp2Rows[] = {
    {Feature::kZero1, N, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "fully_shard shards parameters, gradients and optimizer state together: fsdp2 has no ZeRO-1 mode; use "
     "--zero 2 (SHARD_GRAD_OP) or --runtime deepspeed"},
    {Feature::kZero2, Y, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "fully_shard(reshard_after_forward=False)"},
    {Feature::kZero3, Y, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "fully_shard(reshard_after_forward=True)"},
    {Feature::kHsdp, Y, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "a (dp_replicate, dp_shard) mesh: fully_shard with Replicate x Shard(0)"},
    {Feature::kTensorParallel, Y, "torchtitan 0.3.0 torchtitan/models/common/decoder_sharding.py",
     "DTensor ColwiseParallel / RowwiseParallel"},
    {Feature::kSequenceParallel, Y, "torchtitan 0.3.0 torchtitan/models/common/decoder_sharding.py",
     "SequenceParallel norms: all-gather before and reduce-scatter after each TP region"},
    {Feature::kTpWithHsdp, Y, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "mesh dp_replicate x dp_shard x cp x tp"},
    {Feature::kAsyncTp, Y, "torchtitan 0.3.0 torchtitan/distributed/compile.py _maybe_enable_async_tp",
     "compile.enable_async_tensor_parallel: inductor's micro-pipelined TP"},
    {Feature::kAsyncTpEager, N, "torchtitan 0.3.0 torchtitan/config/configs.py CompileConfig.__post_init__",
     "async TP is an inductor pass and CompileConfig raises \"Async TP requires 'model' in "
     "--compile.components and --compile.enable\": add --compile"},
    {Feature::kCompile, Y, "torchtitan 0.3.0 torchtitan/config/configs.py CompileConfig",
     "compile.enable, components model and loss"},
    {Feature::kPrefetchDepth, Y, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "FSDPModule.set_modules_to_forward_prefetch / set_modules_to_backward_prefetch"},
    {Feature::kPipeline, Y, "torchtitan 0.3.0 torchtitan/distributed/pipeline_parallel.py",
     "torch.distributed.pipelining stages"},
    {Feature::kPipelineSharded, Y, "torchtitan 0.3.0 torchtitan/distributed/fsdp.py",
     "FSDP2 inside each stage (reshard_after_forward defaults to False under PP)"},
    {Feature::kScheduleGpipe, Y, "torch 2.15 torch/distributed/pipelining/schedules.py", "ScheduleGPipe"},
    {Feature::kSchedule1F1B, Y, "torch 2.15 torch/distributed/pipelining/schedules.py", "Schedule1F1B"},
    {Feature::kScheduleInterleaved, Y, "torch 2.15 torch/distributed/pipelining/schedules.py",
     "ScheduleInterleaved1F1B, any number of stages per rank"},
    {Feature::kScheduleZbv, Y, "torch 2.15 torch/distributed/pipelining/schedules.py",
     "ScheduleZBVZeroBubble, 2 stages per rank"},
    {Feature::kScheduleDualPipeV, Y, "torch 2.15 torch/distributed/pipelining/schedules.py",
     "ScheduleDualPipeV, 2 stages per rank"},
    {Feature::kContextParallel, Y, "torchtitan 0.3.0 torchtitan/distributed/context_parallel/api.py",
     "ring attention, load-balanced sharding"},
    {Feature::kExpertParallel, Y, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "EP carved out of dp_shard x cp (efsdp mesh)"},
    {Feature::kOffloadOptimizer, N,
     "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_api.py CPUOffloadPolicy",
     "CPUOffloadPolicy moves parameters, gradients and optimizer state together: fsdp2 has no optimizer-only "
     "offload; use --offload params or --runtime deepspeed"},
    {Feature::kOffloadParams, Y,
     "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_api.py CPUOffloadPolicy", "CPUOffloadPolicy"},
    {Feature::kOffloadBelowZero3, Y, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_api.py",
     "CPUOffloadPolicy with reshard_after_forward=False"},
    {Feature::kOffloadWithDdp, N, "torch 2.15 torch/distributed/_composable/replicate.py",
     "--zero 0 is plain data parallel (DDP), which has no CPU offload; use --zero 2 or 3 with --offload "
     "params"},
    {Feature::kOffloadWithAccum, Y, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py",
     "gradients accumulate on the host"},
    {Feature::kFp8, Y, "torchtitan 0.3.0 torchtitan/components/quantization/float8.py",
     "torchao Float8Linear on the blocks' linears"},
    {Feature::kFp8AllGather, Y, "torchao 0.18.0 torchao/float8/fsdp_utils.py",
     "WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather (FSDP2's all-gather extension)"},
    {Feature::kRootParams, Y, "torchtitan before 83e694105 (2025-07-28) parallelize_llama.py",
     "fully_shard(model) holding the embedding and head"},
    {Feature::kKeepLastBlock, Y, "torchtitan before 83e694105 (2025-07-28) parallelize_llama.py",
     "reshard_after_forward = int(layer_id) < len(model.layers) - 1"},
    {Feature::kNonMixedPrecision, Y, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_api.py",
     "MixedPrecisionPolicy over bf16 or fp32 parameters"},
    {Feature::kOptimizerOther, Y,
     "torch 2.15 torch/optim (Adafactor), torchao 0.18.0 torchao/optim (AdamW8bit)",
     "any torch.optim-style optimizer over the sharded DTensor parameters (adafactor, adamw8bit, lion, "
     "muon)"},
    {Feature::kOptimizerMuon, Y, "torch 2.15 torch/optim/_muon.py",
     "torch.optim.Muon on each DTensor shard's full 2-D matrix, gathered over the shard group (AdamW for the "
     "embedding, head, norms and biases)"},
    {Feature::kMuonSplitMatrices, M, "torch 2.15 torch/optim/_muon.py",
     "matrices split by tensor or expert parallelism would need a second gather to orthogonalise (not "
     "modelled); use --tp 1 --ep 1"},
    {Feature::kAdafactorSharded, N, "torch 2.15 torch/optim/_adafactor.py",
     "torch 2.15's Adafactor fails on FSDP2's sharded DTensor parameters (the column norm of a Shard(0) "
     "matrix "
     "is a partial placement its in-place square_ / _foreach_mul_ cannot keep); use --zero 0 or --runtime "
     "fsdp1 / deepspeed"},
    {Feature::kOffloadOtherOptimizer, M,
     "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_api.py CPUOffloadPolicy",
     "CPU offload runs the step on the host; only AdamW's and Adam's host step are modelled; use --offload "
     "none"},
    {Feature::kFp16Mixed, Y, "torch 2.15 torch/distributed/fsdp/sharded_grad_scaler.py ShardedGradScaler",
     "MixedPrecisionPolicy(param_dtype=float16) over the fp32 shards with ShardedGradScaler (the emitted "
     "FSDP2 "
     "script); torchtitan 0.3.0 has none (config/configs.py TrainingConfig.mixed_precision_param: "
     "Literal[\"bfloat16\", \"float32\"], no GradScaler in its trainer): --emit torchtitan refuses it"},
    {Feature::kLora, Y,
     "torchtitan 0.3.0 torchtitan/components/lora.py LoRAConverter; torch 2.15 fully_shard",
     "per-parameter DTensor shards: frozen parameters are gathered but get no gradient, no reduce-scatter "
     "and "
     "no optimizer state"},
    {Feature::kLoraTp, Y, "torchtitan 0.3.0 torchtitan/components/lora.py _lora_adapter_sharding",
     "column-parallel base: lora_a replicated, lora_b split on its output; row-parallel base: lora_a split "
     "on "
     "its input, lora_b replicated"},
    {Feature::kLoraQuantTp, N, "bitsandbytes 0.50.2 bitsandbytes/nn/modules.py Linear4bit, Linear8bitLt",
     "a bitsandbytes layer holds its whole quantised weight: no tensor-parallel split; use --tp 1"},
    {Feature::kLoraNf4Sharded, N, "torchtitan 0.3.0 torchtitan/components/lora.py; torch 2.15 fully_shard",
     "torchtitan's LoRA has no bitsandbytes base, and fully_shard's DTensor shards do not carry Params4bit's "
     "quant_state; use --runtime fsdp1 (accelerate's FSDP QLoRA) or deepspeed, or --zero 0"},
    {Feature::kLoraInt8Sharded, N, "torchtitan 0.3.0 torchtitan/components/lora.py; torch 2.15 fully_shard",
     "torchtitan's LoRA has no bitsandbytes base; use --zero 0 (DDP) or --lora-base nf4 with --runtime "
     "fsdp1"},
};

// FSDP1 (FullyShardedDataParallel) on torch 2.15.
constexpr Row kFsdp1Rows[] = {
    {Feature::kZero1, N, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy",
     "ShardingStrategy has FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and the hybrid ones: fsdp1 has no ZeRO-1 "
     "mode; "
     "use --zero 2 (SHARD_GRAD_OP) or --runtime deepspeed"},
    {Feature::kZero2, Y, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy", "SHARD_GRAD_OP"},
    {Feature::kZero3, Y, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy", "FULL_SHARD"},
    {Feature::kHsdp, Y, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy",
     "HYBRID_SHARD / _HYBRID_SHARD_ZERO2"},
    {Feature::kTensorParallel, Y, "torch 2.15 torch/distributed/tensor/parallel/fsdp.py",
     "DTensor TP inside FSDP1 (DTensorExtensions)"},
    {Feature::kSequenceParallel, Y, "torch 2.15 torch/distributed/tensor/parallel/style.py",
     "SequenceParallel: all-gather before and reduce-scatter after each TP region"},
    {Feature::kTpWithHsdp, Y, "torch 2.15 torch/distributed/tensor/parallel/fsdp.py",
     "HSDP + TP placements (Replicate, Shard(0), tp)"},
    {Feature::kAsyncTp, Y, "torch 2.15 torch/_inductor/fx_passes/micro_pipeline_tp.py",
     "inductor's micro-pipelined TP on the DTensor collectives"},
    {Feature::kAsyncTpEager, N, "torch 2.15 torch/_inductor/fx_passes/micro_pipeline_tp.py",
     "async TP is an inductor graph pass (_micro_pipeline_tp): eager TP collectives stay synchronous; add "
     "--compile"},
    {Feature::kCompile, Y, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     "torch.compile with use_orig_params=True"},
    {Feature::kPrefetchDepth, N, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     "forward_prefetch and backward_prefetch fetch one unit ahead and limit_all_gathers keeps two in flight: "
     "no "
     "deeper prefetch; use --prefetch 1 or --runtime fsdp2"},
    {Feature::kPipeline, N, "torch 2.15 torch/distributed/pipelining/stage.py backward_maybe_with_nosync",
     "torch.distributed.pipelining drives FSDP2 or DDP stages, not FSDP1; use --runtime fsdp2"},
    {Feature::kPipelineSharded, N, "torch 2.15 torch/distributed/pipelining/stage.py",
     "no pipeline stages of FSDP1; use --runtime fsdp2"},
    {Feature::kScheduleGpipe, N, "torch 2.15 torch/distributed/pipelining/stage.py", "no FSDP1 stages"},
    {Feature::kSchedule1F1B, N, "torch 2.15 torch/distributed/pipelining/stage.py", "no FSDP1 stages"},
    {Feature::kScheduleInterleaved, N, "torch 2.15 torch/distributed/pipelining/stage.py", "no FSDP1 stages"},
    {Feature::kScheduleZbv, N, "torch 2.15 torch/distributed/pipelining/stage.py", "no FSDP1 stages"},
    {Feature::kScheduleDualPipeV, N, "torch 2.15 torch/distributed/pipelining/stage.py", "no FSDP1 stages"},
    {Feature::kContextParallel, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "ring attention shards the parameters over dp_shard x cp in torchtitan's FSDP2 mesh; no framework runs "
     "it "
     "with FSDP1; use --runtime fsdp2"},
    {Feature::kExpertParallel, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "expert parallelism shards experts over torchtitan's efsdp mesh with FSDP2; FSDP1's flat parameters "
     "have "
     "no expert mesh; use --runtime fsdp2"},
    {Feature::kOffloadOptimizer, N, "torch 2.15 torch/distributed/fsdp/api.py CPUOffload",
     "CPUOffload(offload_params=True) moves parameters, gradients and optimizer state together: fsdp1 has no "
     "optimizer-only offload; use --offload params or --runtime deepspeed"},
    {Feature::kOffloadParams, Y, "torch 2.15 torch/distributed/fsdp/api.py CPUOffload",
     "CPUOffload(offload_params=True)"},
    {Feature::kOffloadBelowZero3, Y, "torch 2.15 torch/distributed/fsdp/api.py CPUOffload",
     "CPUOffload with SHARD_GRAD_OP"},
    {Feature::kOffloadWithDdp, N, "torch 2.15 torch/distributed/fsdp/api.py",
     "--zero 0 is plain data parallel (DDP), which has no CPU offload; use --zero 2 or 3 with --offload "
     "params"},
    {Feature::kOffloadWithAccum, N, "torch 2.15 torch/distributed/fsdp/_runtime_utils.py",
     "fsdp1 with offloaded parameters does not accumulate gradients outside no_sync() (the CPU gradient is "
     "replaced by the newly reduced one); use --grad-accum 1 or --runtime fsdp2"},
    {Feature::kFp8, Y, "torchao 0.18.0 torchao/float8/float8_linear_utils.py convert_to_float8_training",
     "Float8Linear swapped in; FSDP1 gathers its bf16 weights"},
    {Feature::kFp8AllGather, N, "torchao 0.18.0 torchao/float8/fsdp_utils.py",
     "float8 all-gather hooks FSDP2's fsdp_pre_all_gather extension, which FSDP1 lacks; use --runtime fsdp2"},
    {Feature::kRootParams, N, "torchtitan before 83e694105 parallelize_llama.py",
     "the root unit's parameters are an FSDP2 wrapping of torchtitan; needs --runtime fsdp2"},
    {Feature::kKeepLastBlock, N, "torchtitan before 83e694105 parallelize_llama.py",
     "keeping the last block after forward is an FSDP2 wrapping of torchtitan; needs --runtime fsdp2"},
    {Feature::kNonMixedPrecision, Y, "torch 2.15 torch/distributed/fsdp/api.py MixedPrecision",
     "MixedPrecision over bf16 or fp32 parameters"},
    {Feature::kOptimizerOther, Y, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     "any torch.optim-style optimizer over the flat parameter shards (adafactor, adamw8bit, lion)"},
    {Feature::kOptimizerMuon, N, "torch 2.15 torch/optim/_muon.py Muon.__init__",
     "torch.optim.Muon raises on a parameter that is not 2-D, and FSDP1 hands the optimizer flat 1-D shards "
     "(FlatParameter); use --runtime fsdp2"},
    {Feature::kMuonSplitMatrices, N, "torch 2.15 torch/optim/_muon.py Muon.__init__",
     "no Muon over FSDP1's flat shards; use --runtime fsdp2"},
    {Feature::kAdafactorSharded, Y, "torch 2.15 torch/optim/_adafactor.py",
     "Adafactor over the flat 1-D shards (row and column factors of a 1-D tensor: one vector)"},
    {Feature::kOffloadOtherOptimizer, M, "torch 2.15 torch/distributed/fsdp/api.py CPUOffload",
     "CPU offload runs the step on the host; only AdamW's and Adam's host step are modelled; use --offload "
     "none"},
    {Feature::kFp16Mixed, Y, "torch 2.15 torch/distributed/fsdp/sharded_grad_scaler.py ShardedGradScaler",
     "MixedPrecision(param_dtype=float16) with ShardedGradScaler"},
    {Feature::kLora, Y,
     "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py (use_orig_params=True)",
     "frozen and trainable parameters share a FlatParameter whose gradient covers the frozen ones too "
     "(\"higher "
     "than expected gradient memory usage\"); optimizer state for the adapters only"},
    {Feature::kLoraTp, M, "torch 2.15 torch/distributed/fsdp/_flat_param.py",
     "FSDP1 with DTensor TP and LoRA adapters is not modelled; use --tp 1 or --runtime fsdp2"},
    {Feature::kLoraQuantTp, N, "bitsandbytes 0.50.2 bitsandbytes/nn/modules.py Linear4bit, Linear8bitLt",
     "a bitsandbytes layer holds its whole quantised weight: no tensor-parallel split; use --tp 1"},
    {Feature::kLoraNf4Sharded, Y,
     "bitsandbytes 0.50.2 bitsandbytes/functional.py quantize_4bit (quant_storage)",
     "bnb_4bit_quant_storage=bfloat16 (accelerate's FSDP QLoRA): the packed weights flatten and shard as "
     "bf16 "
     "elements; each module's quant_state stays whole on every rank"},
    {Feature::kLoraInt8Sharded, N,
     "torch 2.15 torch/distributed/fsdp/_flat_param.py _validate_tensors_to_flatten",
     "\"Must flatten tensors with uniform dtype\": int8 codes cannot share a FlatParameter with bf16 norms; "
     "use --lora-base nf4 or --zero 0"},
};

}  // namespace

std::span<const Row> fsdp2_rows() {
  return kFsdp2Rows;
}

std::span<const Row> fsdp1_rows() {
  return kFsdp1Rows;
}

}  // namespace shardplan

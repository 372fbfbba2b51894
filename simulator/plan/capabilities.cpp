// The capability table of each runtime, every entry with its source at the pinned version (torch 2.15,
// torchtitan 0.3.0 and deepspeed 0.19.8 as tools/pyenv-requirements.txt installs them; megatron-core 0.8.0
// from PyPI, the core_r0.8.0 the Megatron runtime is modelled on), and what is derived from it.
#include "simulator/plan/capabilities.hpp"

#include <initializer_list>
#include <iterator>
#include <stdexcept>

#include "core/error.hpp"
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

using Table = std::array<std::array<Capability, kFeatures>, kRuntimes>;

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

// FSDP2 as torchtitan 0.3.0 drives it on torch 2.15.
const std::initializer_list<Row> kFsdp2Rows = {
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
const std::initializer_list<Row> kFsdp1Rows = {
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

// DeepSpeed 0.19.8 (ZeRO, AutoTP, PipelineEngine, MoE).
const std::initializer_list<Row> kDeepSpeedRows = {
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
const std::initializer_list<Row> kMegatronRows = {
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

Table build_table() {
  Table t{};
  std::array<std::array<bool, kFeatures>, kRuntimes> seen{};
  auto fill = [&](Runtime r, const auto& rows) {
    const auto ri = static_cast<std::size_t>(r);
    for (const Row& row : rows) {
      const auto fi = static_cast<std::size_t>(row.feature);
      if (seen[ri][fi]) throw std::logic_error("capability table: a feature listed twice");
      seen[ri][fi] = true;
      t[ri][fi] = Capability{row.support, row.source, row.note};
    }
  };
  fill(Runtime::kFsdp2, kFsdp2Rows);
  fill(Runtime::kFsdp1, kFsdp1Rows);
  fill(Runtime::kDeepSpeed, kDeepSpeedRows);
  fill(Runtime::kMegatron, kMegatronRows);
  for (Runtime r : EnumValues<Runtime>::v) fill(r, activation_offload_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, ep_backend_capability_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, zeropp_rows(r));
  for (Runtime r : EnumValues<Runtime>::v) fill(r, blockfp_rows(r));
  for (const auto& r : seen)
    for (bool s : r)
      if (!s) throw std::logic_error("capability table: a runtime without an entry for a feature");
  return t;
}

const Table& table() {
  static const Table t = build_table();
  return t;
}

}  // namespace

Feature schedule_feature(PpSchedule s) {
  switch (s) {
    case PpSchedule::kGpipe:
      return Feature::kScheduleGpipe;
    case PpSchedule::k1F1B:
      return Feature::kSchedule1F1B;
    case PpSchedule::kInterleaved1F1B:
      return Feature::kScheduleInterleaved;
    case PpSchedule::kZbv:
      return Feature::kScheduleZbv;
    case PpSchedule::kDualPipeV:
      return Feature::kScheduleDualPipeV;
  }
  return Feature::kSchedule1F1B;
}

namespace {
struct FeatureInfo {
  const char* name;
  const char* flag;
};
// In Feature's order (a static_assert below keeps the count).
constexpr FeatureInfo kFeatureInfo[] = {
    {"ZeRO-1", "--zero"},                                                  // kZero1
    {"ZeRO-2", "--zero"},                                                  // kZero2
    {"ZeRO-3", "--zero"},                                                  // kZero3
    {"HSDP (shard group < data-parallel ranks)", "--shard-group"},         // kHsdp
    {"tensor parallelism", "--tp"},                                        // kTensorParallel
    {"sequence parallelism with TP", "--tp"},                              // kSequenceParallel
    {"TP with HSDP", "--shard-group"},                                     // kTpWithHsdp
    {"async TP", "--async-tp"},                                            // kAsyncTp
    {"async TP without torch.compile", "--async-tp"},                      // kAsyncTpEager
    {"torch.compile", "--compile"},                                        // kCompile
    {"prefetch depth > 1", "--prefetch"},                                  // kPrefetchDepth
    {"pipeline parallelism", "--pp"},                                      // kPipeline
    {"PP with ZeRO-2/3", "--pp"},                                          // kPipelineSharded
    {"PP schedule gpipe", "--pp-schedule"},                                // kScheduleGpipe
    {"PP schedule 1f1b", "--pp-schedule"},                                 // kSchedule1F1B
    {"PP schedule interleaved-1f1b", "--pp-schedule"},                     // kScheduleInterleaved
    {"PP schedule zbv", "--pp-schedule"},                                  // kScheduleZbv
    {"PP schedule dualpipev", "--pp-schedule"},                            // kScheduleDualPipeV
    {"context parallelism", "--cp"},                                       // kContextParallel
    {"expert parallelism", "--ep"},                                        // kExpertParallel
    {"optimizer-only offload", "--offload"},                               // kOffloadOptimizer
    {"parameter offload", "--offload"},                                    // kOffloadParams
    {"parameter offload below ZeRO-3", "--offload"},                       // kOffloadBelowZero3
    {"offload with ZeRO-0", "--offload"},                                  // kOffloadWithDdp
    {"parameter offload with gradient accumulation", "--offload"},         // kOffloadWithAccum
    {"float8 linears", "--fp8"},                                           // kFp8
    {"float8 all-gather", "--fp8-all-gather"},                             // kFp8AllGather
    {"root unit with embedding and head", "--root-params"},                // kRootParams
    {"last block kept after forward", "--keep-last-block"},                // kKeepLastBlock
    {"precision other than bf16-/fp16-mixed", "--precision"},              // kNonMixedPrecision
    {"optimizer other than adamw, adam or sgd", "--optimizer"},            // kOptimizerOther
    {"muon", "--optimizer"},                                               // kOptimizerMuon
    {"muon with TP- or EP-split matrices", "--optimizer"},                 // kMuonSplitMatrices
    {"adafactor over ZeRO-2/3 shards", "--optimizer"},                     // kAdafactorSharded
    {"offload with an optimizer other than adamw or adam", "--offload"},   // kOffloadOtherOptimizer
    {"fp16 mixed precision (dynamic loss scaling)", "--precision"},        // kFp16Mixed
    {"LoRA (frozen base, trainable adapters)", "--lora-rank"},             // kLora
    {"LoRA with TP", "--lora-rank"},                                       // kLoraTp
    {"quantised LoRA base with TP", "--lora-base"},                        // kLoraQuantTp
    {"4-bit LoRA base under ZeRO-1/2/3", "--lora-base"},                   // kLoraNf4Sharded
    {"LLM.int8 LoRA base under ZeRO-1/2/3", "--lora-base"},                // kLoraInt8Sharded
    {"activation offload of every block", "--activation-offload"},         // kActOffloadAll
    {"activation offload of the first N blocks", "--activation-offload"},  // kActOffloadLayers
    {"activation offload with AC", "--activation-offload"},                // kActOffloadWithAc
    {"activation offload without full AC", "--activation-offload"},        // kActOffloadWithoutFullAc
    {"activation offload with PP", "--activation-offload"},                // kActOffloadPipeline
    {"activation offload with torch.compile", "--activation-offload"},     // kActOffloadCompile
    {"all-gather token dispatch", "--ep-backend"},                         // kEpAllGather
    {"DeepEP token dispatch", "--ep-backend"},                             // kEpDeepEp
    {"DeepEP token dispatch without EP", "--ep-backend"},                  // kEpDeepEpWithoutEp
    {"ZeRO++ hpZ (secondary parameter partition)", "--hpz-partition"},     // kHpz
    {"hpZ with TP", "--hpz-partition"},                                    // kHpzWithTp
    {"ZeRO++ qwZ (int8 weight all-gather)", "--quantized-weights"},        // kQuantizedWeights
    {"ZeRO++ qgZ (int4 gradient all-to-all)", "--quantized-gradients"},    // kQuantizedGradients
    {"ZeRO++ below ZeRO-3", "--zero"},                                     // kZeroppBelowZero3
    {"hpZ or qgZ with expert parallelism", "--ep"},                        // kZeroppWithEp
    {"MXFP8 linears (block-scaled float8)", "--fp8"},                      // kMxfp8
    {"NVFP4 linears (block-scaled fp4)", "--fp8"},                         // kNvfp4
};
static_assert(std::size(kFeatureInfo) == kFeatures);
}  // namespace

const char* to_string(Feature f) {
  return kFeatureInfo[static_cast<std::size_t>(f)].name;
}

const char* feature_flag(Feature f) {
  return kFeatureInfo[static_cast<std::size_t>(f)].flag;
}

const char* runtime_version(Runtime r) {
  switch (r) {
    case Runtime::kFsdp2:
      return "torch 2.15 + torchtitan 0.3.0";
    case Runtime::kFsdp1:
      return "torch 2.15";
    case Runtime::kDeepSpeed:
      return "deepspeed 0.19.8";
    case Runtime::kMegatron:
      return "megatron-core 0.8.0";
  }
  return "";
}

const Capability& capability(Runtime r, Feature f) {
  return table()[static_cast<std::size_t>(r)][static_cast<std::size_t>(f)];
}

std::array<bool, kFeatures> plan_features(const Plan& p, int dp) {
  std::array<bool, kFeatures> u{};
  auto use = [&](Feature f, bool on) { u[static_cast<std::size_t>(f)] = on; };
  const int group = p.shard_group == 0 ? dp : p.shard_group;
  const bool hsdp = p.zero > 0 && group < dp;
  use(Feature::kZero1, p.zero == 1);
  use(Feature::kZero2, p.zero == 2);
  use(Feature::kZero3, p.zero == 3);
  use(Feature::kHsdp, hsdp);
  use(Feature::kTensorParallel, p.tp > 1);
  use(Feature::kTpWithHsdp, p.tp > 1 && hsdp);
  use(Feature::kAsyncTp, p.async_tp && p.tp > 1);
  use(Feature::kAsyncTpEager, p.async_tp && p.tp > 1 && !p.compile);
  use(Feature::kCompile, p.compile);
  use(Feature::kPrefetchDepth, p.prefetch > 1);
  use(Feature::kPipeline, p.pp > 1);
  use(Feature::kPipelineSharded, p.pp > 1 && p.zero >= 2);
  if (p.pp > 1) use(schedule_feature(p.pp_schedule), true);
  use(Feature::kContextParallel, p.cp > 1);
  use(Feature::kExpertParallel, p.ep > 1);
  use(Feature::kOffloadOptimizer, p.offload == Offload::kOptimizer);
  use(Feature::kOffloadParams, p.offload == Offload::kParams);
  use(Feature::kOffloadBelowZero3, p.offload == Offload::kParams && p.zero > 0 && p.zero < 3);
  use(Feature::kOffloadWithDdp, p.offload != Offload::kNone && p.zero == 0);
  use(Feature::kOffloadWithAccum, p.offload == Offload::kParams && p.grad_accum > 1);
  use(Feature::kFp8, p.fp8 != Fp8::kNone);
  use(Feature::kFp8AllGather, p.fp8_all_gather);
  use(Feature::kRootParams, p.root_params != RootParams::kNone);
  use(Feature::kKeepLastBlock, p.keep_last_block);
  use(Feature::kNonMixedPrecision, !p.mixed());
  use(Feature::kFp16Mixed, p.fp16());
  const Optimizer o = p.optimizer;
  use(Feature::kOptimizerOther, o != Optimizer::kAdamW && o != Optimizer::kAdam && o != Optimizer::kSgd);
  use(Feature::kOptimizerMuon, o == Optimizer::kMuon);
  use(Feature::kMuonSplitMatrices, o == Optimizer::kMuon && (p.tp > 1 || p.ep > 1));
  use(Feature::kAdafactorSharded, o == Optimizer::kAdafactor && p.zero >= 2);
  use(Feature::kOffloadOtherOptimizer,
      p.offload != Offload::kNone && o != Optimizer::kAdamW && o != Optimizer::kAdam);
  const bool lora = p.lora_rank > 0;
  use(Feature::kLora, lora);
  use(Feature::kLoraTp, lora && p.tp > 1);
  use(Feature::kLoraQuantTp, lora && p.lora_base != LoraBase::kBf16 && p.tp > 1);
  use(Feature::kLoraNf4Sharded, lora && p.lora_base == LoraBase::kNf4 && p.zero >= 1);
  use(Feature::kLoraInt8Sharded, lora && p.lora_base == LoraBase::kInt8 && p.zero >= 1);
  const bool act_off = p.activation_offload != 0;
  use(Feature::kActOffloadAll, p.activation_offload == kActivationOffloadAll);
  use(Feature::kActOffloadLayers, p.activation_offload > 0);
  use(Feature::kActOffloadWithAc, act_off && p.ac != AcMode::kNone);
  use(Feature::kActOffloadWithoutFullAc, act_off && p.ac != AcMode::kFull);
  use(Feature::kActOffloadPipeline, act_off && p.pp > 1);
  use(Feature::kActOffloadCompile, act_off && p.compile);
  const EpBackend ep_backend = p.ep_dispatch();
  use(Feature::kEpAllGather, p.ep > 1 && ep_backend == EpBackend::kAllGather);
  use(Feature::kEpDeepEp, ep_backend == EpBackend::kDeepEp);
  use(Feature::kEpDeepEpWithoutEp, p.ep == 1 && ep_backend == EpBackend::kDeepEp);
  const bool hpz = p.hpz_partition > 1;
  use(Feature::kHpz, hpz);
  use(Feature::kHpzWithTp, hpz && p.tp > 1);
  use(Feature::kQuantizedWeights, p.quantized_weights);
  use(Feature::kQuantizedGradients, p.quantized_gradients);
  use(Feature::kZeroppBelowZero3, (hpz || p.quantized_weights || p.quantized_gradients) && p.zero < 3);
  use(Feature::kZeroppWithEp, (hpz || p.quantized_gradients) && p.ep > 1);
  use(Feature::kMxfp8, p.fp8 == Fp8::kMxfp8);
  use(Feature::kNvfp4, p.fp8 == Fp8::kNvfp4);
  return u;
}

std::optional<Feature> capability_refusal(const Plan& p, int dp) {
  const auto used = plan_features(p, dp);
  const auto& row = table()[static_cast<std::size_t>(p.runtime)];
  for (std::size_t f = 0; f < used.size(); ++f)
    if (used[f] && row[f].support != Support::kYes) return static_cast<Feature>(f);
  return std::nullopt;
}

std::string refusal_sentence(Runtime r, Feature f) {
  const Capability& c = capability(r, f);
  const std::string what = c.support == Support::kNotModelled ? " is not modelled for " : " is not in ";
  return std::string(to_string(f)) + what + to_string(r) + " (" + c.source + "): " + c.note;
}

void check_capabilities(const Plan& p, int dp) {
  if (const auto f = capability_refusal(p, dp))
    throw InputError::flag(feature_flag(*f), refusal_sentence(p.runtime, *f));
}

std::string capability_table_markdown() {
  std::string s =
      "# Capabilities of each runtime\n\n"
      "Generated from `simulator/plan/capabilities.cpp` (`capability_table_markdown()`; the test \"docs/"
      "capabilities.md is the capability table\" fails when this file differs). `simulate`, `memory` and "
      "`validate` refuse a plan that uses a feature its runtime does not have (exit 2, one sentence naming "
      "the runtime and its source); `plan` enumerates only what the table allows. yes: the runtime has it "
      "and the simulator lowers it; no: the runtime does not have it; not modelled: it has it, the simulator "
      "does not lower it (refused too).\n\n"
      "Versions: fsdp2 = torch 2.15 + torchtitan 0.3.0; fsdp1 = torch 2.15; deepspeed = deepspeed 0.19.8; "
      "megatron = megatron-core 0.8.0 (core_r0.8.0).\n\n"
      "| feature | flag | fsdp2 | fsdp1 | deepspeed | megatron |\n|---|---|---|---|---|---|\n";
  auto cell = [](Support x) {
    return x == Support::kYes ? "yes" : x == Support::kNo ? "no" : "not modelled";
  };
  for (int f = 0; f < kFeatures; ++f) {
    const auto F = static_cast<Feature>(f);
    s += std::string("| ") + to_string(F) + " | `" + feature_flag(F) + "` |";
    for (Runtime r : EnumValues<Runtime>::v) s += std::string(" ") + cell(capability(r, F).support) + " |";
    s += "\n";
  }
  s += "\n## Sources and notes\n";
  for (Runtime r : EnumValues<Runtime>::v) {
    s += std::string("\n### ") + to_string(r) + " (" + runtime_version(r) + ")\n\n";
    for (int f = 0; f < kFeatures; ++f) {
      const Capability& c = capability(r, static_cast<Feature>(f));
      s += std::string("- **") + to_string(static_cast<Feature>(f)) + "**: " + cell(c.support) + ". " +
           c.note + " (`" + c.source + "`)\n";
    }
  }
  return s;
}

}  // namespace shardplan

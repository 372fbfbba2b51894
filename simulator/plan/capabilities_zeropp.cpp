// The capability rows of DeepSpeed ZeRO++ (arXiv 2306.10209): hpZ's secondary parameter partition, qwZ's
// quantised weight all-gathers and qgZ's quantised gradient all-to-alls, as deepspeed 0.19.8 implements them
// (runtime/zero/config.py, partition_parameters.py, stage3.py, runtime/comm/coalesced_collectives.py), and
// their absence in the other runtimes.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo;

constexpr Row kFsdp2[] = {
    {Feature::kHpz, N, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "fully_shard has no secondary parameter partition beside its shard (its nearest mechanism, "
     "reshard_after_forward=<int>, is not modelled); use --shard-group for HSDP"},
    {Feature::kHpzWithTp, N, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "no hpZ; use --shard-group"},
    {Feature::kQuantizedWeights, N, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
     "FSDP2 all-gathers in the parameter or mixed-precision dtype (float8 only through torchao's "
     "--fp8-all-gather); drop --quantized-weights"},
    {Feature::kQuantizedGradients, N,
     "torch 2.15 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce",
     "FSDP2 reduce-scatters in reduce_dtype; drop --quantized-gradients"},
    {Feature::kZeroppBelowZero3, N, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "no ZeRO++; drop --hpz-partition, --quantized-weights and --quantized-gradients"},
    {Feature::kZeroppWithEp, N, "torch 2.15 torch/distributed/fsdp/_fully_shard/_fully_shard.py",
     "no ZeRO++; drop --hpz-partition and --quantized-gradients"},
};

constexpr Row kFsdp1[] = {
    {Feature::kHpz, N, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy",
     "FSDP1 has no secondary parameter partition; use --shard-group (HYBRID_SHARD)"},
    {Feature::kHpzWithTp, N, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy",
     "no hpZ; use --shard-group"},
    {Feature::kQuantizedWeights, N, "torch 2.15 torch/distributed/fsdp/_runtime_utils.py _unshard",
     "FSDP1 all-gathers its flat parameter in param_dtype; drop --quantized-weights"},
    {Feature::kQuantizedGradients, N, "torch 2.15 torch/distributed/fsdp/_runtime_utils.py _reduce_grad",
     "FSDP1 reduce-scatters in reduce_dtype; drop --quantized-gradients"},
    {Feature::kZeroppBelowZero3, N, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy",
     "no ZeRO++; drop --hpz-partition, --quantized-weights and --quantized-gradients"},
    {Feature::kZeroppWithEp, N, "torch 2.15 torch/distributed/fsdp/api.py ShardingStrategy",
     "no ZeRO++; drop --hpz-partition and --quantized-gradients"},
};

constexpr Row kDeepSpeed[] = {
    {Feature::kHpz, Y, "deepspeed 0.19.8 deepspeed/runtime/zero/partition_parameters.py _partition_param_sec",
     "zero_hpz_partition_size: after a parameter's first use each rank keeps ds_secondary_tensor (16-bit, "
     "1/hpz of the dp-padded parameter); later all-gathers run over zero_param_process_group (consecutive "
     "ranks), stage3.py _post_step invalidate_secondary_tensor frees them after the optimizer step"},
    {Feature::kHpzWithTp, N, "deepspeed 0.19.8 deepspeed/utils/groups.py _create_zero_param_parallel_group",
     "the hpZ groups are consecutive ranks of the whole world, so with AutoTP they hold TP peers, not "
     "data-parallel replicas of one shard; use --tp 1 with --hpz-partition"},
    {Feature::kQuantizedWeights, Y,
     "deepspeed 0.19.8 deepspeed/runtime/zero/partition_parameters.py CUDAQuantizer",
     "zero_quantized_weights: the shards are quantised to int8 in groups of at most 8,000 elements "
     "(target_group_size) with an fp32 scale each, all-gathered as int8 and fp32, and dequantised to fp16"},
    {Feature::kQuantizedGradients, Y,
     "deepspeed 0.19.8 deepspeed/runtime/comm/coalesced_collectives.py all_to_all_quant_reduce",
     "zero_quantized_gradients: each 2-D gradient is quantised to int4 and all-to-all'd inside the node, "
     "reduced and requantised, all-to-all'd across nodes (one node: the plain reduce-scatter, stage3.py "
     "__avg_scatter_grads)"},
    {Feature::kZeroppBelowZero3, N, "deepspeed 0.19.8 deepspeed/runtime/zero/stage3.py",
     "zero_hpz_partition_size, zero_quantized_weights and zero_quantized_gradients are read by the ZeRO-3 "
     "optimizer and zero.Init only (stage_1_and_2.py ignores them); use --zero 3"},
    {Feature::kZeroppWithEp, N,
     "deepspeed 0.19.8 deepspeed/runtime/engine.py _validate_zero3_moe_compatibility",
     "ZeRO-3 with AutoEP raises \"does not support zero_quantized_gradients yet\" and \"does not support "
     "hpZeRO "
     "secondary tensor groups yet\"; use --ep 1"},
};

constexpr Row kMegatron[] = {
    {Feature::kHpz, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "the distributed optimizer keeps whole 16-bit parameters on every rank; drop --hpz-partition"},
    {Feature::kHpzWithTp, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "no hpZ; drop --hpz-partition"},
    {Feature::kQuantizedWeights, N, "megatron-core 0.8.0 megatron/core/distributed/param_and_grad_buffer.py",
     "the parameter all-gather runs in the parameter dtype; drop --quantized-weights"},
    {Feature::kQuantizedGradients, N,
     "megatron-core 0.8.0 megatron/core/distributed/param_and_grad_buffer.py",
     "the gradient reduce-scatter runs in the grad buffer's dtype; drop --quantized-gradients"},
    {Feature::kZeroppBelowZero3, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "no ZeRO++; drop --hpz-partition, --quantized-weights and --quantized-gradients"},
    {Feature::kZeroppWithEp, N, "megatron-core 0.8.0 megatron/core/optimizer/distrib_optimizer.py",
     "no ZeRO++; drop --hpz-partition and --quantized-gradients"},
};

}  // namespace

std::span<const Row> zeropp_rows(Runtime r) {
  return rows_of(r, kFsdp2, kFsdp1, kDeepSpeed, kMegatron);
}

}  // namespace shardplan

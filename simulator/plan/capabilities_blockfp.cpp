// The capability rows of the block-scaled fp8/fp4 recipes (--fp8 mxfp8 / nvfp4, docs/model.md "Block-scaled
// fp8/fp4"): torchtitan 0.3.0's mx and nvfp4 converters over torchao 0.18.0's MXFP8Linear and NVFP4Linear,
// and their absence from what shardplan can run elsewhere.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo;

constexpr Row kFsdp2[] = {
    {Feature::kMxfp8, Y, "torchtitan 0.3.0 torchtitan/components/quantization/mx.py MXFP8LinearConverter",
     "torchao 0.18.0 prototype/moe_training/mxfp8_linear.py MXFP8Linear: e4m3 + e8m0 scale per 32 for all "
     "three GEMMs, bf16 input and weight saved for backward, FSDP2 gathers bf16 weights; needs sm100"},
    {Feature::kNvfp4, Y, "torchtitan 0.3.0 torchtitan/components/quantization/nvfp4.py",
     "torchao 0.18.0 prototype/moe_training/nvfp4_training/nvfp4_linear.py nvfp4_mm_triton: e2m1 + e4m3 "
     "scale per 16 + fp32 per-tensor scale, 16x16 weight blocks, Hadamard-rotated wgrad operands, "
     "stochastic rounding of grad_output; TP and FSDP collectives stay bf16; needs sm100"},
};

constexpr Row kFsdp1[] = {
    {Feature::kMxfp8, N, "torchtitan 0.3.0 torchtitan/components/quantization/mx.py",
     "the MX converter is torchtitan's (FSDP2); shardplan's FSDP1 script has no MX swap; use --runtime "
     "fsdp2"},
    {Feature::kNvfp4, N, "torchtitan 0.3.0 torchtitan/components/quantization/nvfp4.py",
     "the NVFP4 converter is torchtitan's (FSDP2); use --runtime fsdp2"},
};

constexpr Row kDeepSpeed[] = {
    {Feature::kMxfp8, N, "deepspeed 0.19.8 deepspeed/runtime/config.py",
     "no ds_config key for MX formats and shardplan's DeepSpeed script has no MX swap; use --runtime fsdp2"},
    {Feature::kNvfp4, N, "deepspeed 0.19.8 deepspeed/runtime/config.py",
     "no ds_config key for NVFP4; use --runtime fsdp2"},
};

constexpr Row kMegatron[] = {
    {Feature::kMxfp8, N, "megatron-core 0.8.0 megatron/core/transformer/transformer_config.py fp8",
     "the pinned megatron-core has Transformer Engine delayed-scaling fp8 only (no fp8_recipe mxfp8, no "
     "fp4); use --runtime fsdp2"},
    {Feature::kNvfp4, N, "megatron-core 0.8.0 megatron/core/transformer/transformer_config.py fp8",
     "the pinned megatron-core has no fp4 recipe; use --runtime fsdp2"},
};

}  // namespace

std::span<const Row> blockfp_rows(Runtime r) {
  return rows_of(r, kFsdp2, kFsdp1, kDeepSpeed, kMegatron);
}

}  // namespace shardplan

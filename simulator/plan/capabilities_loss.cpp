// The capability rows of the chunked loss (--loss-impl chunked, docs/model.md "Chunked loss"): torchtitan
// 0.3.0's ChunkedLossWrapper over FSDP2, and its absence from the other runtimes.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

constexpr Row kFsdp2[] = {
    {Feature::kChunkedLoss, Y, "torchtitan 0.3.0 torchtitan/components/loss.py:559-835 ChunkedLossWrapper",
     "the model returns the final norm's output (models/common/decoder.py:245 _skip_lm_head); the loss "
     "splits it into loss.num_chunks sequence chunks and runs lm_head, the cross-entropy and its backward "
     "per chunk, the chunks' input gradients copied into an fp32 [B, L, D] GradAccumulator; FSDP2 keeps "
     "the [norm, lm_head] group gathered across the chunks and reduces its gradient once, at the last "
     "chunk (set_requires_gradient_sync(False) before, torch 2.15 _fsdp_param_group.py:712 upcasts the "
     "held gradient to the reduce dtype)"},
    {Feature::kChunkedLossParallel, M, "torchtitan 0.3.0 torchtitan/components/loss.py:594-603",
     "torchtitan runs it under TP (loss parallel per chunk), CP and on the last PP stage; shardplan models "
     "the chunked loss with tp, cp and pp 1 only"},
    {Feature::kChunkedLossUnsharded, M, "torchtitan 0.3.0 torchtitan/distributed/fsdp.py:202-207",
     "the chunk loop's gradient handling is modelled for lm_head in FSDP2's [norm, lm_head] unit (zero >= "
     "1, --root-params none); without it lm_head is no FSDPModule and the loss keeps autograd's own .grad"},
    {Feature::kChunkedLoss16, N, "torchtitan 0.3.0 torchtitan/components/loss.py:60-65 cross_entropy_loss",
     "each chunk's cross-entropy upcasts its logits (`.float()`) and the model returns the final norm's "
     "output, not logits: use --loss-dtype fp32 without --hold-logits"},
};

constexpr const char* kNoWrapper =
    "ChunkedLossWrapper is torchtitan's (FSDP2, torchtitan 0.3.0 components/loss.py); use --runtime fsdp2";

constexpr Row kFsdp1[] = {
    {Feature::kChunkedLoss, N, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     kNoWrapper},
    {Feature::kChunkedLossParallel, N, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     kNoWrapper},
    {Feature::kChunkedLossUnsharded, N, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     kNoWrapper},
    {Feature::kChunkedLoss16, N, "torch 2.15 torch/distributed/fsdp/fully_sharded_data_parallel.py",
     kNoWrapper},
};

constexpr Row kDeepSpeed[] = {
    {Feature::kChunkedLoss, N, "deepspeed 0.19.8 deepspeed/runtime/engine.py", kNoWrapper},
    {Feature::kChunkedLossParallel, N, "deepspeed 0.19.8 deepspeed/runtime/engine.py", kNoWrapper},
    {Feature::kChunkedLossUnsharded, N, "deepspeed 0.19.8 deepspeed/runtime/engine.py", kNoWrapper},
    {Feature::kChunkedLoss16, N, "deepspeed 0.19.8 deepspeed/runtime/engine.py", kNoWrapper},
};

constexpr const char* kMegatronLoss =
    "Megatron-core computes its own vocab-parallel cross-entropy over the whole logits "
    "(tensor_parallel/cross_entropy.py); use --runtime fsdp2";

constexpr Row kMegatron[] = {
    {Feature::kChunkedLoss, N, "megatron-core 0.8.0 megatron/core/tensor_parallel/cross_entropy.py",
     kMegatronLoss},
    {Feature::kChunkedLossParallel, N, "megatron-core 0.8.0 megatron/core/tensor_parallel/cross_entropy.py",
     kMegatronLoss},
    {Feature::kChunkedLossUnsharded, N, "megatron-core 0.8.0 megatron/core/tensor_parallel/cross_entropy.py",
     kMegatronLoss},
    {Feature::kChunkedLoss16, N, "megatron-core 0.8.0 megatron/core/tensor_parallel/cross_entropy.py",
     kMegatronLoss},
};

}  // namespace

std::span<const Row> chunked_loss_rows(Runtime r) {
  return rows_of(r, kFsdp2, kFsdp1, kDeepSpeed, kMegatron);
}

}  // namespace shardplan

// The capability rows of the expert capacity factor (--moe-capacity-factor, --moe-pad-to-capacity;
// docs/model.md "Capacity factor"): Megatron-core's token drop, and the dropless routers of the others.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

constexpr Row kFsdp2[] = {
    {Feature::kMoeCapacity, N,
     "torchtitan 0.3.0 torchtitan/models/common/moe.py TokenChoiceTopKRouter, "
     "models/common/token_dispatcher.py",
     "torchtitan's router and its all-to-all and DeepEP dispatchers are dropless (every routed row reaches "
     "its "
     "expert); its only drop is HybridEPTokenDispatcher's non_blocking_capacity_factor, a HybridEP backend "
     "shardplan does not model: use --runtime megatron or --moe-capacity-factor 0"},
    {Feature::kMoeCapacityDispatcher, N,
     "torchtitan 0.3.0 torchtitan/models/common/moe.py TokenChoiceTopKRouter",
     "torchtitan has no expert capacity (dropless routing)"},
};

constexpr Row kFsdp1[] = {
    {Feature::kMoeCapacity, N,
     "torch 2.15 torch/distributed/fsdp (wraps the model as it is); transformers 5.23.0 "
     "models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock",
     "the Hugging Face MoE blocks FSDP1 wraps route every token to its top-k experts (dropless): use "
     "--runtime megatron or --moe-capacity-factor 0"},
    {Feature::kMoeCapacityDispatcher, N,
     "torch 2.15 torch/distributed/fsdp (wraps the model as it is); transformers 5.23.0 "
     "models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock",
     "the Hugging Face MoE blocks have no expert capacity (dropless routing)"},
};

constexpr Row kDeepSpeed[] = {
    {Feature::kMoeCapacity, M, "deepspeed 0.19.8 deepspeed/moe/sharded_moe.py TopKGate, MOELayer",
     "the MoE modelled for deepspeed is AutoEP's (deepspeed/moe/ep_router.py TokenChoiceTopKRouter, "
     "ported from torchtitan: dropless); DeepSpeed-MoE's capacity_factor (deepspeed/moe/layer.py MoE, "
     "drop_tokens=True, min_capacity=4) dispatches a fixed [experts, capacity, hidden] buffer that "
     "shardplan does not model: use --runtime megatron or --moe-capacity-factor 0"},
    {Feature::kMoeCapacityDispatcher, M, "deepspeed 0.19.8 deepspeed/moe/sharded_moe.py MOELayer",
     "DeepSpeed-MoE's capacity is not modelled"},
};

constexpr Row kMegatron[] = {
    {Feature::kMoeCapacity, Y,
     "megatron-core 0.8.0 megatron/core/transformer/moe/moe_utils.py get_capacity, "
     "topk_softmax_with_capacity",
     "--moe-expert-capacity-factor F (megatron/training/arguments.py): each expert keeps at most "
     "ceil(T x top_k / experts x F) of a rank's routed rows, the rest are dropped (--moe-token-drop-policy "
     "probs or position picks which, not how many); --moe-pad-expert-input-to-capacity pads every expert "
     "to exactly that"},
    {Feature::kMoeCapacityDispatcher, N,
     "megatron-core 0.8.0 megatron/core/transformer/transformer_config.py",
     "\"moe_expert_capacity_factor only works with alltoall token dispatcher\" (__post_init__), and "
     "moe_token_dispatcher_type defaults to allgather: add --ep-backend alltoall"},
};

}  // namespace

std::span<const Row> moe_capacity_rows(Runtime r) {
  return rows_of(r, kFsdp2, kFsdp1, kDeepSpeed, kMegatron);
}

}  // namespace shardplan

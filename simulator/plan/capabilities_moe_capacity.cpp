// The capability rows of the expert capacity factor (--moe-capacity-factor, --moe-pad-to-capacity;
// docs/model.md "Capacity factor"): Megatron-core's token drop, and the dropless routers of the others.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo;

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
    {Feature::kDeepSpeedMoe, N, "deepspeed 0.19.8 deepspeed/moe/layer.py MoE",
     "DeepSpeed-MoE's layer runs under deepspeed.initialize (its expert groups come from "
     "deepspeed.utils.groups): use --runtime deepspeed, or --moe-impl grouped for torchtitan's MoE"},
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
    {Feature::kDeepSpeedMoe, N, "deepspeed 0.19.8 deepspeed/moe/layer.py MoE",
     "DeepSpeed-MoE's layer runs under deepspeed.initialize (its expert groups come from "
     "deepspeed.utils.groups): use --runtime deepspeed, or --moe-impl loop / hf-grouped-mm / hf-eager"},
};

constexpr Row kDeepSpeed[] = {
    {Feature::kMoeCapacity, N, "deepspeed 0.19.8 deepspeed/moe/ep_router.py TokenChoiceTopKRouter",
     "the routers of the other implementations under deepspeed (AutoEP's, ported from torchtitan; "
     "transformers' blocks) are dropless; DeepSpeed-MoE's capacity_factor is --moe-impl deepspeed's: use "
     "--moe-impl deepspeed or --moe-capacity-factor 0"},
    {Feature::kMoeCapacityDispatcher, N, "deepspeed 0.19.8 deepspeed/moe/ep_router.py TokenChoiceTopKRouter",
     "only DeepSpeed-MoE's layer has a capacity: use --moe-impl deepspeed"},
    {Feature::kDeepSpeedMoe, Y,
     "deepspeed 0.19.8 deepspeed/moe/layer.py MoE, sharded_moe.py MOELayer, TopKGate",
     "deepspeed.moe.layer.MoE(ep_size=--ep, k=top_k, capacity_factor=--moe-capacity-factor or 1.0, "
     "min_capacity=4, drop_tokens=True): every expert padded to C = max(ceil(S / E x F x k), 4) rows, the "
     "experts run E x C rows per rank whatever the routing (sharded_moe.py _capacity, _sparse_encode)"},
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
    {Feature::kDeepSpeedMoe, N, "megatron-core 0.8.0 megatron/core/transformer/moe/moe_layer.py MoELayer",
     "Megatron-core runs its own MoELayer; its capacity is --moe-capacity-factor (with "
     "--moe-pad-to-capacity) under --moe-impl grouped or loop"},
};

}  // namespace

std::span<const Row> moe_capacity_rows(Runtime r) {
  return rows_of(r, kFsdp2, kFsdp1, kDeepSpeed, kMegatron);
}

}  // namespace shardplan

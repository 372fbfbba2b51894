// The token dispatch backend knob (EpBackend, docs/model.md "Token dispatch backends"): its spellings, each
// runtime's default and which runtimes have which backend, with the source at the pinned version.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

const char* to_string(EpBackend b) {
  switch (b) {
    case EpBackend::kAllToAll:
      return "alltoall";
    case EpBackend::kAllGather:
      return "allgather";
    case EpBackend::kDeepEp:
      return "deepep";
  }
  return "?";
}

EpBackend default_ep_backend(Runtime r) {
  // megatron-core 0.8.0 megatron/core/transformer/transformer_config.py: moe_token_dispatcher_type: str =
  // "allgather". torchtitan 0.3.0 models (qwen3, deepseek_v3, llama4) model_registry: moe_comm_backend
  // "standard" (AllToAllTokenDispatcher). DeepSpeed 0.19.8 deepspeed/moe/sharded_moe.py: MOELayer's
  // _AllToAll.
  return r == Runtime::kMegatron ? EpBackend::kAllGather : EpBackend::kAllToAll;
}

EpBackend Plan::ep_dispatch() const {
  return ep_backend.value_or(default_ep_backend(runtime));
}

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

constexpr Row kFsdp2[] = {
    {Feature::kEpAllGather, N,
     "torchtitan 0.3.0 torchtitan/models/common/config_utils.py make_token_dispatcher_config",
     "torchtitan's comm_backend is standard (all-to-all), deepep, hybridep or minimal_async_ep: no "
     "all-gather "
     "dispatcher; use --ep-backend alltoall or --runtime megatron"},
    {Feature::kEpDeepEp, Y,
     "torchtitan 0.3.0 torchtitan/models/common/token_dispatcher.py DeepEPTokenDispatcher",
     "model_registry(moe_comm_backend=\"deepep\"): DeepEP v2 ElasticBuffer dispatch/combine, one buffer per "
     "process sized by ElasticBuffer.get_buffer_size_hint (torchtitan/distributed/deepep/deepep.py "
     "get_buffer)"},
    {Feature::kEpDeepEpWithoutEp, N,
     "torchtitan 0.3.0 torchtitan/models/common/token_dispatcher.py (the num_max_tokens_per_rank fill-in)",
     "\"DeepEPTokenDispatcher requires expert parallelism (expert_parallel_degree > 1)\": use --ep > 1 or "
     "--ep-backend alltoall"},
    {Feature::kMoeLoopWithEp, N,
     "torchtitan 0.3.0 torchtitan/models/common/moe.py GroupedExperts; transformers 5.23.0 "
     "distributed/expert_parallel.py AllToAllEP",
     "torchtitan runs the routed experts only as grouped GEMMs; the loop modelled, transformers 4's "
     "ModuleList of per-expert nn.Linear, has no expert parallelism (transformers 5.23's EP runs its 3-D "
     "experts: --moe-impl hf-grouped-mm or hf-eager); use --moe-impl grouped or --ep 1"},
    {Feature::kHfExperts, Y, "transformers 5.23.0 integrations/moe.py use_experts_implementation",
     "a transformers model under fully_shard: its experts' 3-D parameters, grouped_mm_experts_forward by "
     "default, experts_implementation=\"eager\" the model's loop (the emitted script loads the model with "
     "the one simulated)"},
    {Feature::kHfExpertsWithEp, M, "transformers 5.23.0 distributed/expert_parallel.py AllToAllEP",
     "transformers' DistributedConfig(ep_size=N) dispatches the (token, choice) rows by all-to-all before "
     "the "
     "experts implementation runs on the received rows; the simulator lists hf-grouped-mm and hf-eager "
     "without its dispatch tensors: its grouped_mm run is within 3 % of --moe-impl grouped --ep N "
     "--ep-backend alltoall (tests/reference/test_hf_moe_gloo.py), use that"},
};
constexpr Row kFsdp1[] = {
    {Feature::kEpAllGather, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "fsdp1 has no expert parallelism; use --runtime fsdp2 or megatron"},
    {Feature::kEpDeepEp, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "fsdp1 has no expert parallelism; use --runtime fsdp2"},
    {Feature::kEpDeepEpWithoutEp, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "fsdp1 has no expert parallelism; use --runtime fsdp2"},
    {Feature::kMoeLoopWithEp, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "fsdp1 has no expert parallelism; use --ep 1"},
    {Feature::kHfExperts, Y, "transformers 5.23.0 integrations/moe.py use_experts_implementation",
     "a transformers model under FullyShardedDataParallel (accelerate's FSDP1 path): the model's experts "
     "implementation runs as without FSDP"},
    {Feature::kHfExpertsWithEp, N, "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py",
     "fsdp1 has no expert parallelism; use --ep 1"},
};
constexpr Row kDeepSpeed[] = {
    {Feature::kEpAllGather, N, "deepspeed 0.19.8 deepspeed/moe/sharded_moe.py MOELayer",
     "DeepSpeed's MoE dispatches with _AllToAll (and AutoEP with its all-to-all or DeepEP exchange), no "
     "all-gather dispatcher; use --ep-backend alltoall"},
    {Feature::kEpDeepEp, M, "deepspeed 0.19.8 deepspeed/module_inject/auto_ep_config.py",
     "DeepSpeed's AutoEP (ds_config expert_parallel.comm_backend \"deepep\", comm_num_sm 12, "
     "comm_max_tokens_per_rank) exchanges tokens with DeepEP, but the simulator's DeepSpeed EP is the "
     "deepspeed/moe MoE layer's _AllToAll; use --ep-backend alltoall or --runtime fsdp2"},
    {Feature::kEpDeepEpWithoutEp, N, "deepspeed 0.19.8 deepspeed/module_inject/auto_ep_layer.py",
     "DeepEP exchanges tokens between EP ranks (used only with ep_size > 1); use --ep > 1"},
    {Feature::kMoeLoopWithEp, Y, "deepspeed 0.19.8 deepspeed/moe/experts.py Experts",
     "the MoE layer's Experts loop over the local experts' chunks of the dispatched tokens (AutoEP: "
     "use_grouped_mm false, module_inject/auto_ep_config.py); the routing tensors listed are Hugging Face's "
     "loop's"},
    {Feature::kHfExperts, Y, "transformers 5.23.0 integrations/moe.py use_experts_implementation",
     "a transformers model under ZeRO (deepspeed.initialize on the model): the model's experts "
     "implementation runs as without DeepSpeed"},
    {Feature::kHfExpertsWithEp, N, "deepspeed 0.19.8 deepspeed/module_inject/auto_ep_layer.py",
     "DeepSpeed's expert parallelism replaces the model's MoE block (AutoEP, deepspeed/moe MoE layers): "
     "transformers' experts implementation does not run under it; use --moe-impl loop or grouped"},
};
constexpr Row kMegatron[] = {
    {Feature::kEpAllGather, Y,
     "megatron-core 0.8.0 megatron/core/transformer/moe/token_dispatcher.py MoEAllGatherTokenDispatcher",
     "moe_token_dispatcher_type \"allgather\" (the default): all-gather of the TP x EP group's tokens, local "
     "experts' rows selected, reduce-scatter of the combined output"},
    {Feature::kEpDeepEp, N, "megatron-core 0.8.0 megatron/core/transformer/transformer_config.py",
     "moe_token_dispatcher_type is allgather or alltoall in 0.8.0; DeepEP came with the flex dispatcher "
     "(--moe-token-dispatcher-type flex --moe-enable-deepep, megatron-core 0.12); use --ep-backend allgather "
     "or alltoall"},
    {Feature::kEpDeepEpWithoutEp, N, "megatron-core 0.8.0 megatron/core/transformer/transformer_config.py",
     "no DeepEP in megatron-core 0.8.0; use --ep-backend allgather or alltoall"},
    {Feature::kMoeLoopWithEp, Y, "megatron-core 0.8.0 megatron/core/transformer/moe/experts.py SequentialMLP",
     "moe_grouped_gemm false (the 0.8.0 default): a loop over the local experts on the dispatched tokens; "
     "the routing tensors listed are Hugging Face's loop's"},
    {Feature::kHfExperts, N, "megatron-core 0.8.0 megatron/core/transformer/moe/moe_layer.py MoELayer",
     "Megatron-core runs its own MoELayer (SequentialMLP or GroupedMLP), not transformers' modules; use "
     "--moe-impl loop or grouped"},
    {Feature::kHfExpertsWithEp, N, "megatron-core 0.8.0 megatron/core/transformer/moe/moe_layer.py MoELayer",
     "Megatron-core runs its own MoELayer, not transformers' modules; use --moe-impl loop or grouped"},
};

}  // namespace

std::span<const Row> ep_backend_capability_rows(Runtime r) {
  return rows_of(r, kFsdp2, kFsdp1, kDeepSpeed, kMegatron);
}

}  // namespace shardplan

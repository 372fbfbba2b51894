// The capability rows of --activation-offload (docs/model.md "Activation offload"), per runtime with its
// source at the pinned version: torch 2.15's save_on_cpu (the fsdp2 and fsdp1 training loops wrap the
// model's forward in it; torchtitan 0.3.0 has no activation offload outside experiments/graph_trainer),
// DeepSpeed 0.19.8's cpu_checkpointing, Megatron-core 0.8.0's cpu_offloading.
#include "simulator/plan/capability_rows.hpp"

namespace shardplan {

namespace {

constexpr Support Y = Support::kYes, N = Support::kNo, M = Support::kNotModelled;

#define SAVE_ON_CPU "torch 2.15 torch/autograd/graph.py save_on_cpu"
#define DS_CPU_CKPT                                                                               \
  "deepspeed 0.19.8 deepspeed/runtime/activation_checkpointing/checkpointing.py CPU_CHECKPOINT, " \
  "offload_activations.py _ActivationOffloadEngine"
#define MEGATRON_OFFLOAD                                                                    \
  "megatron-core 0.8.0 megatron/core/cpu_offload.py AsyncDoubleBufferGroupOffloadHandler, " \
  "transformer/transformer_config.py cpu_offloading"

// save_on_cpu under FSDP2 and FSDP1 alike: the training loop's `with save_on_cpu(pin_memory=True): pred =
// model(x)`.
constexpr Row kTorchRows[] = {
    {Feature::kActOffloadAll, Y, SAVE_ON_CPU,
     "every tensor autograd saves in the model's forward is packed into pinned host memory by a copy on the "
     "current (compute) stream and its GPU storage dies when the forward drops it; unpacked on the compute "
     "stream when its backward node runs (no prefetch: both copies are exposed)"},
    {Feature::kActOffloadLayers, N, SAVE_ON_CPU,
     "save_on_cpu offloads every tensor saved inside its context, with no layer count (torchtitan 0.3.0 has "
     "no activation offload option); use --activation-offload all"},
    {Feature::kActOffloadWithAc, M, SAVE_ON_CPU " with torch/utils/checkpoint.py",
     "save_on_cpu around non-reentrant checkpointing (whose own saved-tensor hooks pack the recomputed "
     "tensors) is not modelled; use --ac none"},
    {Feature::kActOffloadWithoutFullAc, Y, SAVE_ON_CPU, "save_on_cpu needs no activation checkpointing"},
    {Feature::kActOffloadPipeline, M, SAVE_ON_CPU " with torch/distributed/pipelining/schedules.py",
     "several micro-batches' offloaded activations in flight on the host are not modelled; use --pp 1"},
    {Feature::kActOffloadCompile, M, SAVE_ON_CPU " with torch/_dynamo",
     "saved-tensor hooks under torch.compile (the compiled graph's saved tensors) are not modelled; drop "
     "--compile"},
};

constexpr Row kDeepSpeedRows[] = {
    {Feature::kActOffloadAll, Y, DS_CPU_CKPT,
     "activation_checkpointing.cpu_checkpointing: each checkpointed block's input is copied to pinned host "
     "memory on a side stream (record_stream frees it once the copy drains; the newest input is kept on the "
     "GPU, keep_last_count=1, and the one before it stays referenced in the forward stash, "
     "max_fwd_stash_count=2) and copied back on that stream when its backward runs (the compute stream "
     "waits)"},
    {Feature::kActOffloadLayers, N, DS_CPU_CKPT,
     "cpu_checkpointing is a switch: every checkpointed block but the last is offloaded; use "
     "--activation-offload all"},
    {Feature::kActOffloadWithAc, Y, DS_CPU_CKPT,
     "cpu_checkpointing offloads the checkpoint inputs of full AC"},
    {Feature::kActOffloadWithoutFullAc, N, DS_CPU_CKPT,
     "cpu_checkpointing acts only inside deepspeed.checkpointing.checkpoint (full AC): it offloads the "
     "checkpoint inputs; use --ac full"},
    {Feature::kActOffloadPipeline, M, DS_CPU_CKPT " with deepspeed/runtime/pipe/engine.py",
     "several micro-batches' offloaded inputs in flight are not modelled; use --pp 1"},
    {Feature::kActOffloadCompile, M, DS_CPU_CKPT,
     "cpu_checkpointing under torch.compile is not modelled; drop --compile"},
};

constexpr Row kMegatronRows[] = {
    {Feature::kActOffloadAll, N, MEGATRON_OFFLOAD,
     "TransformerConfig.__post_init__ requires cpu_offloading_num_layers < num_layers (the last layer's "
     "activations are needed first in backward); use --activation-offload N with N below the blocks"},
    {Feature::kActOffloadLayers, Y, MEGATRON_OFFLOAD,
     "cpu_offloading_num_layers: the saved tensors of the first N layers are copied into a GPU double buffer "
     "(two layers) and from it to pinned host memory on a D2H stream, the host synchronising at the next "
     "layer's commit; in backward each layer's tensors are reloaded on an H2D stream one layer ahead"},
    {Feature::kActOffloadWithAc, N, MEGATRON_OFFLOAD,
     "\"CPU offloading does not work when activation recomputation is enabled\"; use --ac none"},
    {Feature::kActOffloadWithoutFullAc, Y, MEGATRON_OFFLOAD, "cpu_offloading runs without recomputation"},
    {Feature::kActOffloadPipeline, N, MEGATRON_OFFLOAD,
     "\"Currently there is no support for Pipeline parallelism with CPU offloading\"; use --pp 1"},
    {Feature::kActOffloadCompile, N, MEGATRON_OFFLOAD, "megatron-core does not torch.compile the model"},
};

}  // namespace

std::span<const Row> activation_offload_rows(Runtime r) {
  return rows_of(r, kTorchRows, kTorchRows, kDeepSpeedRows, kMegatronRows);
}

}  // namespace shardplan

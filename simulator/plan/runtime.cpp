// The traits of each runtime at a ZeRO stage (docs/mechanics.md §1.4-§1.6, §1.9, §3.2-§3.5).
#include "simulator/plan/runtime.hpp"

#include <algorithm>

#include "simulator/plan/capabilities.hpp"

namespace shardplan {

namespace {
// Megatron-core's DistributedDataParallel with use_distributed_optimizer (NVIDIA/Megatron-LM core_r0.8.0,
// baf94af3, 2024-08-12; docs/model.md "Megatron-core runtime"): bf16 parameters in one contiguous param
// buffer and gradients accumulated into one contiguous grad buffer (main_grad, fp32 with
// grad_reduce_in_fp32), both allocated at construction and kept; nothing is gathered per unit, there is no
// autocast (the model itself is bf16).
RuntimeTraits megatron_traits(const Plan& p) {
  RuntimeTraits t;
  t.runtime = p.runtime;
  t.tp_sequence_parallel = tp_sequence_parallel(p.runtime);
  t.tp_all_reduce = !t.tp_sequence_parallel;
  t.padding = Padding::kFlatUnit;  // one flat buffer sharded by range (bucket ends padded to lcm(dp, 128))
  t.grads_persistent = true;       // the grad buffer (zeroed by zero_grad_buffer, never freed)
  t.reduce_only_at_boundary = true;
  t.grad_buffer_buckets = true;
  // distributed_data_parallel.py: bucket_size = max(40000000, 1000000 x get_data_parallel_world_size()) when
  // overlap_grad_reduce (NeMo's performance recipes: overlap_grad_sync True); the data-parallel world size
  // there is the one without context parallelism.
  t.grad_bucket_elems = std::max(40e6, 1e6 * static_cast<double>(p.dp));
  t.grad_buffer_reduce_scatter = p.zero == 1;
  t.param_gather_before_forward = p.zero == 1;
  t.fused_kernels = true;
  t.te_fp8 = true;
  t.tp_backward_overlap = true;
  t.optimizer_flat_partitions = true;
  t.torch_pipeline_stages = false;
  t.vocab_parallel_loss_inplace = true;  // GPTModel.compute_language_model_loss: vocab_parallel_cross_entropy
  t.act_offload = ActOffloadStyle::kLayerGroups;  // cpu_offloading (megatron/core/cpu_offload.py)
  t.master_weights_in_optimizer = true;
  t.grads_in_reduce_dtype = true;
  t.contiguous_param_grad_buffers = true;
  t.scaler_check = ScalerCheck::kMainGrads;
  return t;
}
}  // namespace

LossKernel loss_kernel(const Plan& p, const RuntimeTraits& rt) {
  if (rt.vocab_parallel_loss_inplace) return LossKernel::kMegatron;
  const bool tp = p.tp > 1;
  // ChunkedLossWrapper's inner loss is compiled with the model (BaseLoss._maybe_compile, torchtitan 0.3.0
  // components/loss.py:309-316: compile.enable and "loss" in compile.components).
  if (p.loss() == LossImpl::kChunked) return p.compile ? LossKernel::kChunkedCompiled : LossKernel::kChunked;
  if (p.loss() == LossImpl::kCompiled) return tp ? LossKernel::kCompiledParallel : LossKernel::kCompiled;
  if (p.loss_dtype != Dtype::kFp32) return tp ? LossKernel::kEagerParallel16 : LossKernel::kEager16;
  if (p.hold_logits) return tp ? LossKernel::kEagerModelUpcastParallel : LossKernel::kEagerModelUpcast;
  return tp ? LossKernel::kEagerParallel : LossKernel::kEager;
}

std::vector<int> grad_buffer_bucket_index(const std::vector<std::int64_t>& elems_backward,
                                          double bucket_elems) {
  std::vector<int> out;
  out.reserve(elems_backward.size());
  int bucket = 0;
  double filled = 0;
  for (const std::int64_t n : elems_backward) {
    // _does_param_require_new_bucket: a new bucket starts when the current one already holds >= bucket_size.
    if (bucket_elems > 0 && filled >= bucket_elems) ++bucket, filled = 0;
    out.push_back(bucket);
    filled += static_cast<double>(n);
  }
  return out;
}

ModelCode model_code(const Plan& p) {
  if (p.runtime == Runtime::kMegatron) return ModelCode::kMegatron;
  // The Hugging Face MoE implementations (transformers 4's loop, transformers 5.23's grouped_mm and eager
  // experts) mean a Hugging Face model under any runtime.
  const bool hf_moe =
      p.moe_impl == MoeImpl::kLoop || p.moe_impl == MoeImpl::kHfGroupedMm || p.moe_impl == MoeImpl::kHfEager;
  if (p.runtime == Runtime::kFsdp1 || p.runtime == Runtime::kDeepSpeed || hf_moe)
    return ModelCode::kHuggingFace;
  return ModelCode::kTorchtitan;
}

RuntimeTraits runtime_traits(const Plan& p) {
  RuntimeTraits t;
  t.runtime = p.runtime;
  t.tp_sequence_parallel = tp_sequence_parallel(p.runtime);
  t.tp_all_reduce = !t.tp_sequence_parallel;
  const bool fsdp2 = p.runtime == Runtime::kFsdp2, fsdp1 = p.runtime == Runtime::kFsdp1,
             ds = p.runtime == Runtime::kDeepSpeed;
  if (p.runtime == Runtime::kMegatron) return megatron_traits(p);
  const bool mixed_cast = p.mixed() || p.precision == Precision::kFp32;
  // FSDP stores parameters sharded from ZeRO-2 on (SHARD_GRAD_OP gathers once per forward and keeps them);
  // DeepSpeed shards them only in ZeRO-3.
  t.gathers_params = p.zero == 3 || (!ds && p.zero == 2);
  t.padding = fsdp2 ? Padding::kPerTensorDim0 : ds ? Padding::kPerTensor : Padding::kFlatUnit;
  t.copy_out = !fsdp1;  // FSDP1's parameters are views into the gathered flat parameter (§1.5)
  t.hold_forward_ag_output = fsdp2;
  t.ag_after_prev_copy_out = fsdp2;
  t.cast_buffer_on_ag_stream = !fsdp1 && mixed_cast;
  t.unsharded_pool = fsdp1 ? kPoolAllGather : kPoolDefault;
  // FSDP2 root with the embedding and head (torchtitan before 2025-07-28): FSDP2 before pytorch PR 154704
  // (2025-06) clamps the root's reshard_after_forward to False (_fsdp_state.py _lazy_init:
  // `post_forward_mesh_info = None`), and the root's post-backward runs in the final callback (its forward
  // input, the token ids, needs no gradient): gathered from forward to the end of backward, as FSDP1's root.
  const bool fsdp2_root = fsdp2 && p.root_params == RootParams::kEmbeddingHead;
  t.root_gathered_through_step = fsdp1 || fsdp2_root;
  t.head_not_resharded = fsdp2;
  t.head_group_regathered = fsdp2;
  t.tied_weight_group = fsdp2;
  // FSDP2's root registers its pre-backward hook on its forward outputs (_register_pre_backward_hook), the
  // logits: it fires after the loss's backward, and prefetches the last block only then.
  t.bwd_prefetch_after_loss = fsdp1 || fsdp2_root;
  t.gather_limiter = fsdp1 ? GatherLimiter::kComputeTwoBack
                     : ds  ? GatherLimiter::kFetchTwoBack
                           : GatherLimiter::kNone;
  t.grads_persistent = (ds && p.zero >= 2) || (p.zero == 0 && p.zero_grad_in_place);
  t.reduce_scatter = p.zero >= 2;
  t.rs_waits_prev_rs = fsdp2;
  t.rs_input_held = fsdp2 && !p.rs_input_rs_stream;
  t.rs_cpu_limiter = ds;
  t.rs_input_pool = fsdp2 && !p.rs_input_rs_stream
                        ? kPoolDefault
                        : kPoolReduceScatter;  // PR pytorch#129721 moved it to the default stream
  // Before that PR (pytorch 415cc262 _fsdp_collectives.py foreach_reduce): `reduce_scatter_input` and
  // `post_reduce_output` are allocated under `torch.cuda.stream(reduce_scatter_stream)`, the input is a local
  // freed when foreach_reduce returns, and each sharded gradient is `torch.as_strided(post_reduce_output,
  // ...)`, a view.
  t.rs_grads_view_output = fsdp2 && p.rs_input_rs_stream;
  t.reduce_only_at_boundary = ds && p.zero == 1;
  // DDP (ZeRO-0) keeps no gradient across steps either: optimizer.zero_grad() defaults to set_to_none=True
  // (torch/optim/optimizer.py, torch >= 2.0; torchtitan calls it so), so each .grad is created by
  // AccumulateGrad when the unit's backward produces it and lives until the next zero_grad after the
  // optimizer step.
  // With --zero-grad-in-place (set_to_none=False) DDP's .grad persists instead.
  t.grad_kept_until_boundary = (ds && p.zero == 1) || (p.zero == 0 && !p.zero_grad_in_place);
  t.allreduce_in_compute_dtype = ds;
  t.ipg_bucket_per_backward = ds && (p.zero == 1 || p.zero == 2);
  t.ipg_bucket_persistent = ds && p.zero == 3;
  t.ddp_reducer_buckets = fsdp2 && p.zero == 0;
  t.autocast_weight_copies = !ds && !t.gathers_params && p.mixed();
  t.param_all_gather_after_step = ds && p.zero < 3;
  t.optimizer_flat_partitions = ds;
  t.native_cpu_adam = ds;
  t.torch_pipeline_stages = !ds;
  t.recv_in_own_instruction = ds;
  t.act_offload = ds ? ActOffloadStyle::kCheckpointInputs : ActOffloadStyle::kSaveOnCpu;
  t.master_weights_in_optimizer = ds && p.mixed();
  t.flat_group_partitions = ds && p.zero < 3;
  t.redistributes_partial_grads = fsdp2;
  t.adamw8bit_torchao = fsdp2;
  t.scaler_check = ds ? ScalerCheck::kPartitionGrads : ScalerCheck::kReducedGrads;
  return t;
}

}  // namespace shardplan

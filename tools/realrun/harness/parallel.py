"""The harness's parallelisms: FSDP2 / FSDP1 wrapping and activation checkpointing."""
import torch

from harness.model import init_weights_

from common.sac import selective_policy


def fsdp2_api():
    try:
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy  # torch 2.4/2.5
    return fully_shard, MixedPrecisionPolicy


def sac_policy_fn():
    """torchtitan's op-level SAC policy (tools/common/sac.py): save SDPA outputs (and a few cheap ops) and every
    other matmul output; recompute the rest. Returns a maker of fresh policies."""
    from torch.utils.checkpoint import CheckpointPolicy
    ops = torch.ops.aten
    save = {ops.mm.default, ops.max.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"):
        if hasattr(ops, name):
            save.add(getattr(ops, name).default)
    return lambda: selective_policy(CheckpointPolicy, save, (ops.mm.default,))


def apply_ac(model, mode, sac_mode):
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper, CheckpointImpl
    for i, blk in enumerate(model.layers):
        if mode == "full" or (mode == "selective" and sac_mode == "layer"):
            if mode == "selective" and i % 2 == 1:
                continue
            w = checkpoint_wrapper(blk, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)
        else:
            from torch.utils.checkpoint import create_selective_checkpoint_contexts
            make = sac_policy_fn()
            w = checkpoint_wrapper(blk, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False,
                                   context_fn=lambda: create_selective_checkpoint_contexts(make()))
        model.layers[i] = w


def dtype_of(name):
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def shard_fsdp2(model, args, mesh, reduce_dtype):
    fully_shard, MixedPrecisionPolicy = fsdp2_api()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype) \
        if args.precision == "bf16-mixed" else MixedPrecisionPolicy()
    raf = args.zero == 3
    for blk in model.layers:
        fully_shard(blk, mesh=mesh, reshard_after_forward=raf, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=raf, mp_policy=mp)  # root: embeddings, norm, head
    if args.prefetch:
        blocks = list(model.layers)
        n = args.prefetch
        for i, blk in enumerate(blocks):
            fwd = blocks[i + 1:i + 1 + n]
            bwd = list(reversed(blocks[max(0, i - n):i]))
            if fwd:
                blk.set_modules_to_forward_prefetch(fwd)
            if bwd:
                blk.set_modules_to_backward_prefetch(bwd)
    return model


def shard_fsdp1(model, args, mesh, reduce_dtype, device):
    from torch.distributed.fsdp import (FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy,
                                        BackwardPrefetch)
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    hybrid = mesh.ndim == 2
    strat = {(3, False): ShardingStrategy.FULL_SHARD, (2, False): ShardingStrategy.SHARD_GRAD_OP,
             (3, True): ShardingStrategy.HYBRID_SHARD, (2, True): ShardingStrategy._HYBRID_SHARD_ZERO2}[(args.zero, hybrid)]
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype, buffer_dtype=torch.bfloat16) \
        if args.precision == "bf16-mixed" else None
    wrap_cls = {type(b) for b in model.layers}

    def param_init_fn(m):
        m.to_empty(device=device, recurse=False)
        init_weights_(m)

    kw = dict(auto_wrap_policy=ModuleWrapPolicy(wrap_cls), sharding_strategy=strat, mixed_precision=mp,
              device_id=device, limit_all_gathers=True, use_orig_params=True,
              backward_prefetch=None if args.prefetch == 0 else BackwardPrefetch.BACKWARD_PRE,
              forward_prefetch=bool(args.prefetch), param_init_fn=param_init_fn)
    if hybrid:
        kw["device_mesh"] = mesh
    else:
        kw["process_group"] = mesh.get_group()
    return FSDP(model, **kw)

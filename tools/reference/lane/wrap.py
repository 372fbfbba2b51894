"""The reference lane's parallelisms: DTensor TP, torchao float8, FSDP2, DDP and FSDP1 as the frameworks apply
them; each wrap_* returns (model, optimizer, tracker)."""
from lane.spec import PlanError
from lane.tracker import make_tracker


def apply_tp(torch, model, tp_mesh):
    """torchtitan 0.3.0's Llama 3 tensor-parallel plan (models/llama3/parallelize.py apply_tp) with sequence
    parallelism and loss parallelism (the defaults): embedding row-wise (vocab) with sequence-sharded output, norms
    SequenceParallel, q/k/v and w1/w3 column-wise, wo and w2 row-wise to sequence-sharded outputs, the head
    column-wise to vocab-sharded logits (a DTensor the loss reads under loss_parallel())."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })


def apply_float8(torch, model, plan):
    """torchtitan 0.3.0's float8 converter (components/quantization/float8.py): torchao
    convert_to_float8_training on the blocks' linear layers (the head stays bf16: filter_fqns ["output"]), recipe
    tensorwise or rowwise; --fp8-all-gather sets enable_fsdp_float8_all_gather (tensorwise only), and the step
    then calls precompute_float8_dynamic_scale_for_fsdp after the optimizer."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    if plan["fp8"] == "tensorwise":
        cfg = Float8LinearConfig(enable_fsdp_float8_all_gather=plan["fp8_all_gather"])
    else:
        cfg = Float8LinearConfig.from_recipe_name(plan["fp8"])
    convert_to_float8_training(model, config=cfg, module_filter_fn=lambda m, fqn: fqn.startswith("layers.") and
                               m.in_features % 16 == 0 and m.out_features % 16 == 0)


def wrap_fsdp2(torch, model, spec, plan, state, mesh):
    """FSDP2 as torchtitan 0.3.0 applies it (distributed/fsdp.py apply_fsdp_to_decoder); returns (model, optim,
    tracker)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if plan["precision"] in ("bf16-mixed", "fp16-mixed"):
        # fp16-mixed: MixedPrecisionPolicy(param_dtype=float16) over the fp32 shards (the emitted FSDP2 script's);
        # a 16-bit reduction is then fp16.
        half = torch.float16 if plan["precision"] == "fp16-mixed" else torch.bfloat16
        mp = MixedPrecisionPolicy(param_dtype=half,
                                  reduce_dtype=torch.float32 if plan["reduce_dtype"] == "fp32" else half)
    else:
        mp = MixedPrecisionPolicy()
    # reshard_after_forward_policy "default": tok_embeddings its own unit (resharded after forward), [norm,
    # output] one unit that is not resharded after forward ("FSDP would prefetch them immediately"; with tied
    # weights [tok_embeddings, norm, output] together, not resharded), every block resharded after forward, then
    # the root (which then owns only buffers).
    raf = plan["reshard_after_forward"]
    kw = {"mesh": mesh, "mp_policy": mp}
    units = []  # FSDP units in forward order (their modules), for explicit prefetching
    blocks = list(model.layers.values())
    if plan["keep_last_block"] and plan["root_params"] == "none":
        # torchtitan PR 382's wrapping (tok_embeddings and [norm, output] units, the last block kept).
        fully_shard(model.tok_embeddings, reshard_after_forward=raf, **kw)
        for i, block in enumerate(blocks):
            fully_shard(block, reshard_after_forward=raf and i < len(blocks) - 1, **kw)
        fully_shard([model.norm, model.output], reshard_after_forward=False, **kw)
        fully_shard(model, reshard_after_forward=raf, **kw)
    elif plan["root_params"] != "none":
        # torchtitan before 83e694105 (2025-07-28; parallelisms/parallelize_llama.py apply_fsdp at 5940ddeb5):
        # every block its own unit (the last one kept after forward under the "default" policy), then
        # fully_shard(model, reshard_after_forward=not pp_enabled): the embedding, final norm and output are the
        # root's parameters. FSDP2 before pytorch PR 154704 (2025-06) never resharded the root after forward,
        # whatever was passed; torch 2.15 does so only when reshard_after_forward is not given (_fsdp_state.py
        # _lazy_init, _auto_reshard_after_forward), so the root is wrapped without it.
        for i, block in enumerate(blocks):
            keep = plan["keep_last_block"] and i == len(blocks) - 1
            fully_shard(block, reshard_after_forward=raf and not keep, **kw)
        fully_shard(model, **kw)
    else:
        if spec.get("tied_embeddings"):
            fully_shard([model.tok_embeddings, model.norm, model.output], reshard_after_forward=False, **kw)
        else:
            fully_shard(model.tok_embeddings, reshard_after_forward=raf, **kw)
            fully_shard([model.norm, model.output], reshard_after_forward=False, **kw)
            units.append([model.tok_embeddings])
        # --wrap W: W consecutive blocks form one FSDP unit (fully_shard on a list of modules: one parameter
        # group, one all-gather).
        for i in range(0, len(blocks), plan["wrap"]):
            group = blocks[i:i + plan["wrap"]]
            fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=raf, **kw)
            units.append(group)
        if not spec.get("tied_embeddings"):
            units.append([model.norm, model.output])
        fully_shard(model, reshard_after_forward=raf, **kw)
    if plan["prefetch"] > 1:
        # torchtitan's explicit prefetching (models/llama4/infra/parallelize.py apply_fsdp, prefetch of one unit
        # there): each unit's forward pre-hook all-gathers the next `prefetch` units
        # (FSDPModule.set_modules_to_forward_prefetch), each unit's backward the previous `prefetch`
        # (set_modules_to_backward_prefetch) instead of FSDP2's implicit one-unit prefetch.
        n = plan["prefetch"]
        for i, unit in enumerate(units):
            nxt = [u[0] for u in units[i + 1:i + 1 + n]]
            if nxt:
                unit[-1].set_modules_to_forward_prefetch(nxt)
        rev = units[::-1]
        for i, unit in enumerate(rev):
            prv = [u[0] for u in rev[i + 1:i + 1 + n]]
            if prv:
                unit[0].set_modules_to_backward_prefetch(prv)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                              fused=plan["fused_optimizer"], foreach=None if plan["fused_optimizer"] else True)
    return model, optim, make_tracker(torch, model, optim, state)


class _DeferredDDP:
    """The model before DDP: run() builds DistributedDataParallel inside the tracker (wrap())."""

    def __init__(self, build):
        self.wrap = build


def wrap_ddp(torch, model, plan, state):
    """Plain data parallel, shardplan's --zero 0: torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25,
    gradient_as_bucket_view=False, the defaults), parameters in their dtype; bf16-mixed runs the forward under
    torch.autocast(bf16) (torchtitan's DDP path: `maybe_enable_amp` when no FSDP mixed-precision policy applies).
    Returns (a deferred model whose wrap() builds DDP, optim, tracker)."""
    import torch.nn.parallel.distributed as ddp_mod
    from torch.distributed._tools.mem_tracker import MemTracker

    # DDP's constructor checks parameter shapes across ranks and broadcasts rank 0's state
    # (_verify_param_shape_across_processes, _sync_module_states): both read tensor data, which fake tensors do
    # not have, and neither allocates on rank 0 beyond collective staging. Skipped.
    ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None
    ddp_mod._sync_module_states = lambda *a, **k: None
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                              fused=plan["fused_optimizer"], foreach=None if plan["fused_optimizer"] else True)
    world = torch.distributed.get_world_size()
    holder = {}

    def build():
        ddp = ddp_mod.DistributedDataParallel(model, bucket_cap_mb=25, gradient_as_bucket_view=False)

        # The fake process group's all-reduce returns a future without a value, which the Reducer asserts on:
        # a comm hook with the memory of the default one (torch/distributed/algorithms/ddp_comm_hooks/
        # default_hooks.py allreduce_hook: divide the bucket in place, all-reduce it in place, return it).
        def allreduce_in_place(_, bucket):
            buf = bucket.buffer()
            buf.div_(world)
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        ddp.register_comm_hook(None, allreduce_in_place)
        holder["ddp"] = ddp
        if plan["precision"] == "bf16-mixed":
            return _Autocast(torch, ddp)
        return ddp

    tracker = make_tracker(torch, model, optim, state, base=MemTracker)
    return _DeferredDDP(build), optim, tracker


class _Autocast:
    """model(x) under torch.autocast(bfloat16) (the device's autocast; the weight casts are cached for the
    forward, as on CUDA)."""

    def __init__(self, torch, module):
        self.torch, self.module = torch, module

    def __call__(self, *args):
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16):
            return self.module(*args)

    def parameters(self):
        return self.module.parameters()


def wrap_fsdp1(torch, model, spec, plan, state, mesh):
    """FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel) as Hugging Face accelerate / torchtune configure it:
    use_orig_params=True, a wrap policy per transformer block (the checkpoint_wrapper around it when AC is on)
    plus the root (embeddings, final norm and head), MixedPrecision(param_dtype=bf16, reduce_dtype=fp32|bf16),
    FULL_SHARD (ZeRO-3), SHARD_GRAD_OP (ZeRO-2) or HYBRID_SHARD (a shard group), backward_prefetch BACKWARD_PRE
    and limit_all_gathers=True (the defaults). device_id="cpu": FSDP1 refuses a CPU module without an
    accelerator unless the device is given (fsdp/_init_utils.py _init_device_handle)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy
    from torch.distributed.fsdp._runtime_utils import _lazy_init
    from torch.distributed._tools.mem_tracker import MemTracker
    import functools

    import torch.distributed.fsdp._flat_param as flat_param_mod

    if plan["wrap"] != 1:
        raise PlanError("--wrap: FSDP1 runs one block per unit in the reference lane")
    # FSDP1 asks whether a flat buffer is allocated through `data_ptr() > 0` (_flat_param.py _data_ptr_allocated,
    # e.g. SHARD_GRAD_OP's _writeback_orig_params); a fake tensor's data pointer is 0. Its storage size is what
    # FSDP1 itself changes (_alloc_storage / _free_storage resize the storage): ask that instead.
    flat_param_mod._data_ptr_allocated = lambda t: t.untyped_storage().size() > 0
    blocks = set(model.layers.values())
    policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m in blocks)
    mp = None
    if plan["precision"] == "bf16-mixed":
        mp = MixedPrecision(param_dtype=torch.bfloat16,
                            reduce_dtype=torch.float32 if plan["reduce_dtype"] == "fp32" else torch.bfloat16)
    if plan["shard_group"] != torch.distributed.get_world_size():
        strategy = ShardingStrategy.HYBRID_SHARD
    else:
        strategy = ShardingStrategy.FULL_SHARD if plan["zero"] == 3 else ShardingStrategy.SHARD_GRAD_OP
    kw = {"device_mesh": mesh} if strategy == ShardingStrategy.HYBRID_SHARD else {}
    fsdp = FSDP(model, auto_wrap_policy=policy, mixed_precision=mp, sharding_strategy=strategy,
                use_orig_params=True, device_id=torch.device("cpu"), sync_module_states=False, **kw)
    _lazy_init(fsdp, fsdp)  # the first forward would: create the unsharded and low-precision flat buffers
    roles = {}
    for handle in fsdp._all_handles:
        fp = handle.flat_param
        roles[fp.untyped_storage()._cdata] = "params"
        for attr in ("_full_param_padded", "_mp_shard", "_full_prec_full_param_padded"):
            t = getattr(fp, attr, None)
            if t is not None:
                roles[t.untyped_storage()._cdata] = "gathered_params"
    optim = torch.optim.AdamW(fsdp.parameters(), lr=3e-4, weight_decay=0.1,
                              fused=plan["fused_optimizer"], foreach=None if plan["fused_optimizer"] else True)
    return fsdp, optim, make_tracker(torch, fsdp, optim, state, base=MemTracker, roles=roles)

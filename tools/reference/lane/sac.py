"""The reference lane's selective activation checkpointing per block (the policy: tools/common/sac.py)."""
from common.sac import selective_policy


# ---------------------------------------------------------------------------------------------------------------
# torchtitan's selective AC policy (torchtitan 0.3.0 distributed/activation_checkpoint.py SelectiveAC): save the
# outputs of compute-intensive ops and collectives, but recompute every second matmul.


def selective_context_fn(torch):
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops.aten
    save_ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    for name in ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
                 "_scaled_dot_product_fused_attention_overrideable", "max", "linear", "topk"):
        if hasattr(ops, name):
            save_ops.add(getattr(ops, name).default)
    save_ops.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    save_ops.add(torch.ops._c10d_functional.all_to_all_single.default)
    mm_ops = (ops.mm.default, ops.linear.default)

    def context_fn():
        return create_selective_checkpoint_contexts(selective_policy(CheckpointPolicy, save_ops, mm_ops))

    return context_fn


def apply_ac(torch, layers, ac):
    """Activation checkpointing as torchtitan applies it: one checkpoint_wrapper per block of `layers` (a
    ModuleDict), with the selective policy's context for --ac selective."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if ac == "none":
        return
    ctx = selective_context_fn(torch) if ac == "selective" else None
    for name, block in list(layers.named_children()):
        kw = {"context_fn": ctx} if ctx else {}
        layers.register_module(name, checkpoint_wrapper(block, preserve_rng_state=True, early_stop=False, **kw))

"""torchtitan's op-level selective activation checkpointing policy (torchtitan 0.3.0
distributed/activation_checkpoint.py SelectiveAC, 83c879f18 parallelize_llama.py _custom_policy): save the outputs
of the ops in a save list, but recompute every second matmul (counted separately in forward and recompute). The
save list is the caller's: it changed across torchtitan versions."""


def selective_policy(CheckpointPolicy, save_ops, mm_ops):
    """A new policy function (one per checkpointed forward: it counts the matmuls it sees) for
    torch.utils.checkpoint.create_selective_checkpoint_contexts. `CheckpointPolicy` is torch's enum, `save_ops`
    the ops whose outputs are saved, `mm_ops` those counted as matmuls (every second one of them recomputed)."""
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def policy(ctx, func, *args, **kwargs):
        key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
        if func in mm_ops:
            meta[key] += 1
        if func in save_ops and not (func in mm_ops and meta[key] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy

"""The published runs' plan fields: activation checkpointing, float8, runtime, ZeRO stage, skip reasons."""

# --------------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------------
def map_ac(txt):
    t = (txt or "").lower()
    if not t or t == "none" or t.startswith("none"):
        return "none"
    if "selective" in t or "sac" in t:
        return "selective"
    if "full" in t or "checkpoint" in t:
        return "full"
    return None


def fp8_text(rec):
    p = rec["precision"]
    texts = [str(p.get("compute") or ""), str(p.get("published_precision") or ""),
             str((rec["parallel"].get("other") or {}).get("quantization") or ""),
             str((rec["parallel"].get("other") or {}).get("float8") or "")]
    return " ".join(texts).lower()


def fp8_recipe(rec):
    """None (16-bit GEMMs), "mx" (MX block scaling: not modelled), "rowwise" or "tensorwise" (torchao recipes)."""
    t = fp8_text(rec)
    if "mxfp" in t:
        return "mx"
    if "rowwise" in t:  # torchao recipe names (rowwise, rowwise_with_gw_hp) even when the text says "bfloat16 ..."
        return "rowwise"
    if any(k in t for k in ("fp8", "float8", "tensorwise")):
        return "tensorwise"
    return None


def runtime_of(rec):
    fw = str(rec["parallel"].get("framework") or "").lower()
    sh = str(rec["parallel"].get("sharding") or "").lower()
    if "nemo" in fw or "megatron-core" in fw:
        return "megatron"
    if "deepspeed" in fw or "deepspeed" in sh:
        return "deepspeed"
    if "fsdp1" in sh or "composer" in fw:
        return "fsdp1"
    if "fsdp2" in sh or "fsdp2" in fw or "fully_shard" in sh or "fully_shard" in fw:
        return "fsdp2"
    if "fsdp" in sh or "fsdp" in fw:
        # FSDP without a version (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD are FSDP1's ShardingStrategy names)
        return "fsdp1"
    if sh == "ddp" or sh.startswith("ddp ") or "distributeddataparallel" in sh:
        return "fsdp2"
    return None


def zero_of(rec):
    """ZeRO stage: the record's zero_stage_equivalent, else read from the sharding name; None when unknowable."""
    p = rec["parallel"]
    z = p.get("zero_stage_equivalent")
    if isinstance(z, int) and not isinstance(z, bool) and 0 <= z <= 3:
        return z
    sh = str(p.get("sharding") or "").upper()
    for key, stage in (("SHARD_GRAD_OP", 2), ("FULL_SHARD", 3), ("HYBRID_SHARD", 3), ("FULLY_SHARD", 3),
                       ("HSDP", 3), ("ZERO-3", 3), ("ZERO3", 3), ("ZERO-2", 2), ("ZERO2", 2), ("ZERO-1", 1),
                       ("ZERO1", 1), ("NO_SHARD", 0), ("DDP", 0)):
        if key in sh:
            return stage
    return None


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")


def _positive_int(x):
    return isinstance(x, int) and not isinstance(x, bool) and x > 0

"""The reference lane's command line (run.py): the plan flags as `shardplan simulate` spells them, checked and
resolved into the plan the run builds."""
import argparse

from common.knob_args import add_knob_args, tool_error
from lane.spec import PlanError

DESCRIPTION = ("The reference lane: runs the real PyTorch training step of a shardplan model (FSDP2, FSDP1 or DDP; "
               "optionally")


# ---------------------------------------------------------------------------------------------------------------
# Plan flags: shardplan's knob table (tools/common/knobs.json, `shardplan list knobs --json`) spelt, valued and
# explained as `shardplan simulate` has them; the lane's own flags (paths, world size, what is measured) by hand.

# The plan knobs the lane reads. Their defaults are the knob table's, except where the lane needs to see that a
# flag was not given (LANE_DEFAULTS) or leaves the value to resolve_plan (--reshard-after-forward, --reduce-dtype:
# None, derived as shardplan derives it).
PLAN_KNOBS = ("runtime", "zero", "shard_group", "tp", "seq", "mbs", "grad_accum", "ac", "wrap", "prefetch",
              "reshard_after_forward", "precision", "reduce_dtype", "offload", "async_tp", "fused_optimizer",
              "compile", "hold_logits", "root_params", "keep_last_block", "loss_dtype", "fp8", "fp8_all_gather", "pp",
              "pp_schedule", "virtual_stages", "pp_layers", "activation_offload", "loss_impl", "loss_chunks")
TABLE_DEFAULTS = ("runtime", "zero", "shard_group", "tp", "mbs", "ac", "wrap", "prefetch", "precision", "offload",
                  "root_params", "loss_dtype", "fp8", "pp", "pp_schedule", "activation_offload")
# 0 / "": not given (the model's sequence length; --global-batch or one micro-batch; the schedule's stages per rank;
# torchtitan's split).
LANE_DEFAULTS = {"seq": 0, "grad_accum": 0, "virtual_stages": 0, "pp_layers": ""}


def parse_args(argv):
    p = argparse.ArgumentParser(description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="llama3-70b")
    p.add_argument("--cluster", default="dgx-h100", help="written to the record only")
    p.add_argument("--gpus", type=int, required=True)
    add_knob_args(p, PLAN_KNOBS, table_defaults=TABLE_DEFAULTS, defaults=LANE_DEFAULTS,
                  choices={"loss_impl": ("eager", "chunked")})
    p.add_argument("--global-batch", type=int, default=0)
    p.add_argument("--pp-rank", type=int, default=-1,
                   help="pipeline rank run and measured (default: the last; shardplan validate compares the "
                        "record with that rank's peak)")
    p.add_argument("--steps", type=int, default=1,
                   help="training steps measured (default 1), after an optimizer warm-up that creates the AdamW "
                        "states as a first step would (see --warmup)")
    p.add_argument("--warmup", default="init", choices=("init", "step"),
                   help="init (default): zero gradients + one optimizer step, no forward/backward; step: one full "
                        "training step (slow; same state after it)")
    p.add_argument("--layers", type=int, default=0,
                   help="override the model's number of blocks (a shallower model of the same widths; the record "
                        "carries the modified spec inline)")
    p.add_argument("--no-clip", action="store_true", help="skip clip_grad_norm_ (torchtitan clips by default)")
    p.add_argument("--id", default=None, help="record id (default: derived from the plan)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--trace", default=None)
    tool_error(p, PlanError)
    return p.parse_args(argv)


def resolve_plan(a, spec) -> dict:
    def bad(flag, why):
        raise PlanError(f"{flag}: {why}")

    if a.gpus < 1:
        bad("--gpus", "must be >= 1")
    if a.steps < 1:
        bad("--steps", "must be >= 1")
    if a.mbs < 1:
        bad("--mbs", "must be >= 1")
    if a.grad_accum < 0:
        bad("--grad-accum", "must be >= 1")
    if a.global_batch and a.grad_accum:
        bad("--global-batch", "give --global-batch or --grad-accum, not both")
    if a.precision == "fp16-mixed" and (a.runtime != "fsdp2" or a.zero not in (2, 3) or a.pp > 1 or a.tp > 1
                                        or a.fp8 != "none"):
        bad("--precision", "fp16-mixed is covered with FSDP2 ZeRO-2/3 without PP, TP or float8 only")
    # What the reference lane does not run yet (docs/reference-lane.md, "Not covered"). ZeRO-0 is plain data
    # parallel: torch.nn.parallel.DistributedDataParallel (shardplan spells it --zero 0 on fsdp2 or fsdp1).
    if a.runtime not in ("fsdp2", "fsdp1"):
        bad("--runtime", f"{a.runtime} is not covered by the reference lane yet (fsdp2, fsdp1, or --zero 0 for DDP)")
    if a.zero not in (0, 2, 3):
        bad("--zero", f"ZeRO {a.zero} is not covered by the reference lane (0 = DDP, 2, 3)")
    if a.zero == 0 and a.runtime != "fsdp2":
        bad("--zero", "0 (DDP) is shardplan's --runtime fsdp2 --zero 0; FSDP1 NO_SHARD is not covered")
    if a.tp < 1 or a.gpus % a.tp:
        bad("--tp", f"{a.tp} does not divide --gpus {a.gpus}")
    dp = a.gpus // a.tp
    if a.tp > 1 and (a.runtime != "fsdp2" or a.zero == 0 or a.shard_group):
        bad("--tp", "tensor parallelism is covered with FSDP2 ZeRO-2/3 on a 2-D (dp, tp) mesh only (no HSDP)")
    if a.tp > 1 and (spec.get("moe") or spec["mlp"] != "swiglu" or spec.get("attn_bias") or spec["norm"] != "rmsnorm"
                     or spec.get("tied_embeddings") or spec["heads"] % a.tp or spec["kv_heads"] % a.tp):
        bad("--tp", "torchtitan's Llama TP plan needs an untied Llama-style decoder with heads and kv_heads "
                    "divisible by tp")
    shard = a.shard_group or dp
    if shard < 1 or dp % shard:
        bad("--shard-group", f"{a.shard_group} does not divide --gpus {dp}")
    if a.offload != "none":
        bad("--offload", "CPU offload is not covered by the reference lane yet")
    if a.activation_offload not in ("none", "all"):
        bad("--activation-offload", f"{a.activation_offload} (Megatron-core's first N layers) is not covered by the "
                                    "reference lane (none, all)")
    if a.activation_offload != "none" and (a.runtime not in ("fsdp2", "fsdp1") or a.ac != "none" or a.pp != 1
                                           or a.compile or a.tp > 1 or a.fp8 != "none"):
        bad("--activation-offload", "covered with FSDP2 / FSDP1 / DDP, no AC, TP, PP, float8 or compile only (what "
                                    "shardplan's capability table allows for save_on_cpu, less TP and float8)")
    if a.fp8 not in ("none", "tensorwise", "rowwise"):
        bad("--fp8", f"{a.fp8} is not covered by the reference lane (none, tensorwise, rowwise)")
    if a.fp8 != "none" and (a.runtime != "fsdp2" or a.zero == 0 or a.tp > 1):
        bad("--fp8", "float8 is covered with FSDP2 ZeRO-2/3 without TP only")
    if a.fp8_all_gather and a.fp8 != "tensorwise":
        bad("--fp8-all-gather", "needs --fp8 tensorwise")
    if a.compile:
        bad("--compile", "torch.compile is not covered by the reference lane")
    if (a.root_params != "none" or a.keep_last_block) and (
            a.runtime != "fsdp2" or a.zero not in (2, 3) or a.pp > 1 or a.tp > 1 or a.wrap != 1 or a.prefetch != 1
            or a.fp8 != "none" or spec.get("tied_embeddings")):
        bad("--root-params" if a.root_params != "none" else "--keep-last-block",
            "covered with FSDP2 ZeRO-2/3 of an untied decoder without TP, PP, float8, --wrap or explicit "
            "prefetch only")
    if a.async_tp:
        bad("--async-tp", "needs tensor parallelism")
    chunked = a.loss_impl == "chunked"
    if a.loss_chunks is not None and not chunked:
        bad("--loss-chunks", "applies only to --loss-impl chunked")
    if chunked and (a.runtime != "fsdp2" or a.zero not in (2, 3) or a.tp > 1 or a.pp > 1 or a.hold_logits
                    or a.loss_dtype != "fp32" or spec.get("tied_embeddings") or a.root_params != "none"
                    or a.keep_last_block or a.activation_offload != "none"):
        bad("--loss-impl", "chunked (torchtitan's ChunkedLossWrapper) is covered with FSDP2 ZeRO-2/3 of an untied "
                           "decoder, fp32 loss, without TP, PP, --hold-logits, --root-params, --keep-last-block or "
                           "activation offload only")
    if a.wrap < 1:
        bad("--wrap", "must be >= 1")
    if a.prefetch < 1:
        bad("--prefetch", "must be >= 1")
    if a.prefetch != 1 and (a.runtime != "fsdp2" or a.zero == 0):
        bad("--prefetch", "explicit prefetch of more than one unit is FSDP2's set_modules_to_*_prefetch only")
    if a.zero == 0 and (a.shard_group or a.wrap != 1 or a.reshard_after_forward not in (None, "false")):
        bad("--zero", "0 is DDP: no shard group, wrap or resharding")
    if a.zero == 0 and a.precision == "fp32" and a.reduce_dtype == "bf16":
        bad("--reduce-dtype", "DDP reduces in the gradients' dtype")
    if a.zero == 0 and (a.grad_accum > 1 or a.global_batch):
        bad("--grad-accum", "DDP rebuilds its buckets in the second forward (Reducer::sync_bucket_indices reads "
                            "tensor data, which fake tensors lack): one micro-batch per step only")
    if a.zero == 0 and a.reduce_dtype and a.reduce_dtype != ("bf16" if a.precision in ("bf16", "bf16-true") else "fp32"):
        bad("--reduce-dtype", "DDP reduces in the gradients' dtype (fp32 for bf16-mixed, bf16 for bf16-true)")
    if a.zero == 0:
        raf = False
    elif a.reshard_after_forward is None:
        raf = a.zero == 3
    else:
        raf = a.reshard_after_forward == "true"
    if a.zero == 2 and raf:
        bad("--reshard-after-forward", "ZeRO-2 keeps the gathered parameters: reshard_after_forward must be false")
    if a.zero == 3 and not raf:
        bad("--reshard-after-forward", "false with --zero 3 is ZeRO-2: pass --zero 2")
    reduce = a.reduce_dtype or ("fp32" if a.precision in ("bf16-mixed", "fp32", "fp16-mixed") else "bf16")
    if a.precision == "fp32" and reduce == "bf16":
        bad("--reduce-dtype", "bf16 reduction with fp32 precision is not covered")
    seq = a.seq or spec["seq"]
    chunks = (a.loss_chunks or 8) if chunked else 1  # torchtitan 0.3.0 ChunkedLossWrapper.Config num_chunks = 8
    if seq % chunks:
        bad("--loss-chunks", f"sequence {seq} does not divide into {chunks} chunks")
    if a.global_batch:
        if a.global_batch % (a.mbs * dp):
            bad("--global-batch", f"{a.global_batch} is not a multiple of mbs x dp = {a.mbs * dp}")
        ga = a.global_batch // (a.mbs * dp)
    else:
        ga = a.grad_accum or 1
    return {"runtime": a.runtime, "zero": a.zero, "seq": seq, "shard_group": shard, "wrap": a.wrap,
            "prefetch": a.prefetch, "tp": a.tp, "fp8": a.fp8, "fp8_all_gather": a.fp8_all_gather,
            "mbs": a.mbs, "grad_accum": ga, "ac": a.ac,
            "reshard_after_forward": raf, "precision": a.precision, "reduce_dtype": reduce,
            "fused_optimizer": not a.foreach_optimizer, "hold_logits": a.hold_logits, "loss_dtype": a.loss_dtype,
            "root_params": a.root_params, "keep_last_block": a.keep_last_block,
            "activation_offload": a.activation_offload, "loss_impl": a.loss_impl or "eager",
            "loss_chunks": chunks}

#!/usr/bin/env python3
"""shardplan real-run harness: train a shardplan model spec for a few steps under FSDP2/FSDP1 and write
one `shardplan.run/1` record (docs/formats.md) with measured peak memory and step time.

    torchrun --nproc-per-node 8 tools/realrun/realrun.py --model llama3-8b --seq 4096 --mbs 1 \
        --zero 3 --ac full --precision bf16-mixed --out run.json

    python3 tools/realrun/realrun.py ...   (one GPU without torchrun: a 1-rank process group is created)

torch only (no Hugging Face).  Model construction (build_model, param_count, build_record) also works on CPU
with torch 1.13; the FSDP2 / SAC / checkpoint-wrapper imports are guarded and only needed for a real run.
See tools/realrun/README.md.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))  # tools/common/: shared with the reference lane and the converter
from common.knob_args import add_knob_args  # noqa: E402
from common.params import param_count  # noqa: E402
from common.teardown import end_distributed  # noqa: E402
from harness.model import _nullctx, build_model, init_weights_, loss_fn  # noqa: E402
from harness.parallel import apply_ac, dtype_of, shard_fsdp1, shard_fsdp2  # noqa: E402
from harness.record import (_write_json, build_record, detect_cluster, environment, mem_stats,  # noqa: E402
                            validate_record)
from harness.spec import MODEL_KEYS, load_spec, normalize_spec  # noqa: E402

# What tests/realrun/test_realrun_smoke.py reads from this module.
__all__ = ["param_count", "build_model", "loss_fn", "build_record", "validate_record", "normalize_spec",
           "parse_args", "main", "_write_json"]


# ================================================================================================
# Distributed run
# ================================================================================================
# The plan knobs the harness runs, from shardplan's knob table (tools/common/knobs.json): the table's flag, help and
# values, narrowed to what the harness runs; the harness's own flags by hand.
PLAN_KNOBS = ("runtime", "zero", "shard_group", "seq", "mbs", "grad_accum", "ac", "precision", "reduce_dtype",
              "prefetch", "compile")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="shardplan real-run harness (FSDP2/FSDP1, synthetic tokens)")
    ap.add_argument("--model", required=True, help="models/NAME.json preset name, a model spec file, or an HF config.json")
    ap.add_argument("--layers", type=int, help="override the number of blocks (smaller test models)")
    add_knob_args(ap, PLAN_KNOBS, table_defaults=("runtime", "zero", "mbs", "grad_accum", "ac", "precision"),
                  defaults={"seq": 2048},
                  choices={"runtime": ("fsdp2", "fsdp1"), "zero": (2, 3),
                           "precision": ("bf16-mixed", "bf16-true", "fp32")},
                  help_suffix={"zero": "3: reshard after forward; 2: keep unsharded",
                               "shard_group": "the harness: ranks per shard group, HSDP when < world size",
                               "seq": "the harness's default: 2048",
                               "prefetch": "the harness: explicit forward/backward prefetch depth (blocks ahead), "
                                           "none unless given",
                               "compile": "the harness: torch.compile each block"})
    ap.add_argument("--accum-no-sync", action="store_true",
                    help="skip the gradient reduce on non-final micro-batches (default: sync every micro-batch)")
    ap.add_argument("--sac-mode", choices=["op", "layer"], default="op",
                    help="selective AC: op = torchtitan per-op policy; layer = checkpoint every other block")
    ap.add_argument("--steps", type=int, default=6, help="measured steps after warm-up")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--cluster", help="cluster preset for the record (default: from the GPU name)")
    ap.add_argument("--id", help="record id (default: derived from the plan)")
    ap.add_argument("--snapshot", help="write a CUDA memory snapshot (pickle) of steps 1-2 to this path (rank 0)")
    ap.add_argument("--profile", help="write a Chrome trace of two steps to this path (rank 0)")
    ap.add_argument("--out", required=True, help="record JSON path (details go to OUT.details.json)")
    return ap.parse_args(argv)


def init_distributed(args):
    """The process group (NCCL, one GPU per rank) and the FSDP mesh (HSDP with --shard-group); returns
    (device, world, rank, shard group, mesh)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29511"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                 ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    try:
        dist.init_process_group("nccl", device_id=device)  # torch >= 2.3: eager NCCL init, bound to this GPU
    except TypeError:
        dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    sg = args.shard_group or world
    if world % sg:
        raise SystemExit("--shard-group must divide the world size")
    mesh = init_device_mesh("cuda", (world // sg, sg), mesh_dim_names=("replicate", "shard")) if sg < world \
        else init_device_mesh("cuda", (world,), mesh_dim_names=("shard",))

    return device, world, rank, sg, mesh


def build(args, device, mesh):
    """The spec, the wrapped model and its AdamW; returns (spec, model, optimizer, optimizer implementation,
    reduce dtype name)."""
    spec = load_spec(args.model)
    if args.layers:
        spec["layers"] = args.layers
        spec["name"] = "%s-L%d" % (spec["name"], args.layers)
    if spec["positions"] == "learned":
        spec["max_positions"] = max(spec.get("max_positions", 0), args.seq)
    spec["seq"] = args.seq
    reduce_name = args.reduce_dtype or ("fp32" if args.precision in ("bf16-mixed", "fp32") else "bf16")
    reduce_dtype = dtype_of(reduce_name)
    param_dtype = torch.bfloat16 if args.precision == "bf16-true" else torch.float32

    torch.manual_seed(0)
    tied = spec["tied_embeddings"]
    # Untied: build on meta, wrap, shard, materialise shards (torchtitan order).  Tied: meta->device would untie
    # the shared weight, so tied models are built on the device before sharding.
    if args.runtime == "fsdp2":
        model = build_model(spec, args.seq, device=device if tied else "meta", dtype=param_dtype)
        if param_dtype != torch.float32 and not tied:
            model = model.to(param_dtype)
        apply_ac(model, args.ac, args.sac_mode)
        if args.compile:
            for i, blk in enumerate(model.layers):
                model.layers[i] = torch.compile(blk)
        shard_fsdp2(model, args, mesh, reduce_dtype)
        if not tied:
            model.to_empty(device=device)
            for mod in model.modules():
                init_weights_(mod)
    else:
        model = build_model(spec, args.seq, device="meta" if not tied else device, dtype=param_dtype)
        if param_dtype != torch.float32 and not tied:
            model = model.to(param_dtype)
        apply_ac(model, args.ac, args.sac_mode)
        model = shard_fsdp1(model, args, mesh, reduce_dtype, device)
        if args.compile:
            model = torch.compile(model)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        opt_impl = "fused"
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
        opt_impl = "foreach"

    return spec, model, opt, opt_impl, reduce_name


def measure(args, spec, model, opt, device, rank):
    """Warm-up and measured steps: the memory statistics after init, after step 1 and at the end, the step times
    and losses; returns (details, measured step times, total steps)."""
    g = torch.Generator(device=device)
    g.manual_seed(1234 + rank)

    def batch():
        t = torch.randint(0, spec["vocab"], (args.mbs, args.seq + 1), device=device, generator=g)
        return t[:, :-1], t[:, 1:]

    def step():
        for mb in range(args.grad_accum):
            last = mb == args.grad_accum - 1
            if args.accum_no_sync and args.grad_accum > 1:
                if args.runtime == "fsdp2":
                    model.set_requires_gradient_sync(last)
                    ctx = _nullctx()
                else:
                    ctx = model.no_sync() if not last else _nullctx()
            else:
                ctx = _nullctx()
            with ctx:
                x, y = batch()
                loss = loss_fn(model(x), y) / args.grad_accum
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.synchronize()
    base = mem_stats()
    torch.cuda.reset_peak_memory_stats()
    if args.snapshot and rank == 0:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    times, losses = [], []
    details = {"after_init": base}
    total = args.warmup + args.steps
    prof = None
    for i in range(total):
        if args.profile and rank == 0 and i == args.warmup:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA], record_shapes=False)
            prof.__enter__()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach().float().item()))
        if prof is not None and i == args.warmup + 1:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(args.profile)
            prof = None
        if i == 0:
            details["step1"] = mem_stats()
            torch.cuda.reset_peak_memory_stats()
        if i == 1 and args.snapshot and rank == 0:
            torch.cuda.memory._dump_snapshot(args.snapshot)
            torch.cuda.memory._record_memory_history(enabled=None)
        if i >= args.warmup:
            times.append(dt)
    details["steady"] = mem_stats()
    details["step_times_s"] = times
    details["losses"] = losses
    return details, times, total


def write_record(args, spec, allr, world, sg, reduce_name, opt_impl, times, total, inner):
    """Rank 0: the record (peaks over ranks, the median step time of the slowest rank) and its details file."""
    s1 = [r["details"]["step1"] for r in allr]
    ss = [r["details"]["steady"] for r in allr]

    def peak(key):
        return max(max(a[key] for a in s1), max(b[key] for b in ss))
    med = statistics.median(max(r["details"]["step_times_s"][i] for r in allr) for i in range(len(times)))
    tokens = args.mbs * args.seq * args.grad_accum
    env = allr[0]["env"]
    cluster = args.cluster or detect_cluster(env.get("gpu")) or "dgx-h100"
    plan = {"runtime": args.runtime, "zero": args.zero, "shard_group": sg, "tp": 1, "seq": args.seq,
            "mbs": args.mbs, "grad_accum": args.grad_accum, "ac": args.ac, "wrap": 1,
            "precision": args.precision, "reduce_dtype": reduce_name, "compile": bool(args.compile),
            "reshard_after_forward": args.zero == 3}
    if args.prefetch is not None:
        plan["prefetch"] = args.prefetch
    measured = {"peak_allocated_bytes": peak("allocated_bytes.all.peak"),
                "peak_reserved_bytes": peak("reserved_bytes.all.peak"),
                "peak_active_bytes": peak("active_bytes.all.peak"),
                "step_s": round(med, 6), "tokens_per_s_per_gpu": round(tokens / med, 3)}
    rid = args.id or "realrun-%s-%s-z%d-s%d-mbs%d-ga%d-%s-%s-g%d" % (
        spec["name"], args.runtime, args.zero, args.seq, args.mbs, args.grad_accum, args.ac, args.precision, world)
    retries = max(r["details"]["steady"]["num_alloc_retries"] for r in allr)
    notes = ("tools/realrun/realrun.py; env torch %s, CUDA %s, NCCL %s, GPU %s; optimizer AdamW %s; "
             "peaks = max over ranks of max(step 1, steps 2..%d); step_s = median over %d steps after %d "
             "warm-up of the slowest rank; num_alloc_retries %d; selective AC mode %s; details in %s"
             % (env.get("torch"), env.get("cuda"), env.get("nccl"), env.get("gpu"), opt_impl, total,
                len(times), args.warmup, retries, args.sac_mode if args.ac == "selective" else "-",
                os.path.basename(args.out) + ".details.json"))
    spec_out = {k: v for k, v in spec.items() if k in MODEL_KEYS}
    rec = build_record(rid, spec_out, cluster, world, plan, measured, notes,
                       "measured with tools/realrun/realrun.py on %s" % env.get("host"))
    _write_json(args.out, rec)
    _write_json(args.out + ".details.json",
                {"environment": env, "args": vars(args), "parameters": param_count(spec),
                 "param_count_model": sum(p.numel() for p in inner.parameters()) if args.runtime == "fsdp2" else None,
                 "ranks": allr})
    print(json.dumps(rec["measured"]))

def main(argv=None):
    args = parse_args(argv)
    import torch.distributed as dist

    device, world, rank, sg, mesh = init_distributed(args)
    spec, model, opt, opt_impl, reduce_name = build(args, device, mesh)
    inner = model.module if args.runtime == "fsdp1" and hasattr(model, "module") else model
    details, times, total = measure(args, spec, model, opt, device, rank)
    mine = {"rank": rank, "details": details, "env": environment()}
    allr = [None] * world
    dist.all_gather_object(allr, mine)
    if rank == 0:
        write_record(args, spec, allr, world, sg, reduce_name, opt_impl, times, total, inner)
    end_distributed(0)


if __name__ == "__main__":
    sys.exit(main())

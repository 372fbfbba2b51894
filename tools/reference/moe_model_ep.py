#!/usr/bin/env python3
"""Whole torchtitan 0.3.0 MoE models (qwen3 MoE, deepseek_v3; tools/reference/lane/titan_moe.py) with expert
parallelism and FSDP2 over gloo: `world` CPU processes (torch.multiprocessing spawn, FileStore), real tensors, one
training step per rank as torchtitan's trainer takes it (forward, fp32 cross-entropy, `del pred`, backward,
torchtitan's clip_grad_norm_ with EP, AdamW, zero_grad), after a warm-up that creates the AdamW states (zero
gradients, one step; the lane's --warmup init) so the states are live through the measured step, as in a run.

Measured per rank with the reference lane's tracker (lane/tracker.py: PyTorch's FSDPMemTracker categories, every
allocation rounded up to 512 B as the CUDA caching allocator does; CPU has no caching allocator, so this is the
"peak allocated" of the same allocations): params, grads and optimizer at the end; everything live per category
when the forward ends (the saved activations, before backward); the peak of live bytes over the step and its
breakdown; the router's per-expert counts of every MoE layer (this rank's tokens) and the rows each rank's
experts receive after the dispatch all-to-all (the busiest rank's / (T·top_k) is the measured imbalance).
Compared: `shardplan memory` of the same spec and plan (--ep, --ep-backend alltoall, fsdp2, bf16-mixed, AC off,
--sdpa-backend flash: the CPU's flash kernel saves what FlashAttention-2 saves).
Usage: moe_model_ep.py --model qwen3|deepseek_v3 --shardplan BIN [--world 2 --ep 2 --seq 64 --mbs 1] (JSON)."""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/common/
from common.teardown import end_distributed  # noqa: E402

from lane import titan_moe  # noqa: E402
from lane.moe_listed import listed_blocks  # noqa: E402
from lane.tracker import CATEGORIES, summarize  # noqa: E402

PERSISTENT = ("params", "grads", "optimizer")


def live_at(events, index):
    """Bytes live per category after event `index` (exclusive)."""
    live = dict.fromkeys(CATEGORIES, 0)
    for op, nbytes, cat, _, _, _ in events[:index]:
        live[cat] += nbytes if op == "alloc" else -nbytes
    return live


def saved_per_block(events, index):
    """Activations live at event `index` (the end of the forward) by the unit whose forward allocated them
    ("forward layers.3, ..." -> "3", the embedding, final norm, head and loss -> "root")."""
    live = {}
    for op, nbytes, cat, phase, _, sid in events[:index]:
        if op == "alloc" and cat == "activations":
            live[sid] = (nbytes, phase.split(",")[0].split(".")[-1].replace("forward root", "root"))
        elif op == "free":
            live.pop(sid, None)
    out = {}
    for nbytes, unit in live.values():
        out[unit] = out.get(unit, 0) + nbytes
    return out


def spy_routers(model, counts, experts):
    """Wraps every MoE router's forward: this rank's (token, choice) pairs per expert, per layer."""
    import torch

    for name, mod in model.named_modules():
        if type(mod).__name__ == "TokenChoiceTopKRouter":
            orig = mod.forward

            def spy(*args, _orig=orig, _name=name, **kw):
                out = _orig(*args, **kw)
                ids = out[1]  # (top_scores, selected_experts_indices, ...)
                counts[_name] = torch.bincount(ids.reshape(-1), minlength=experts).tolist()
                return out

            mod.forward = spy


def grad_storage_ids(model, tracker):
    """The tracker's ids of the storages the sharded gradients live in. FSDP2 assigns a group's sharded gradients
    (views of its reduce-scatter output when reduce_dtype is the parameters' dtype: _fsdp_collectives.py
    foreach_reduce) only when the asynchronous reduce-scatter is waited, after FSDPMemTracker's post_backward
    wrapper has looked (on gloo every block's; the root's final callback catches only the root-level units'), so
    those storages keep the category of their first op (Temp -> activations). The ids name them grads."""
    sids = set()
    for p in model.parameters():
        g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
        winfo = tracker._WINFO.get(g.untyped_storage(), (None, None))[0] if g is not None else None
        if winfo is not None and hasattr(winfo, "_sp_id"):
            sids.add(winfo._sp_id)
    return sids


def final_categories(events, grad_sids):
    """Each storage counted in the category it ends in, over its whole life: FSDPMemTracker renames a storage
    when FSDP2 hands it a role (the unsharded gradients autograd produced in param_dtype become `Unsharded Grad`
    at the unit's post_backward, after the unit's whole backward counted them as activations); shardplan's
    lowering creates them as comm_buffers. Storages the sharded gradients live in are grads."""
    final = {}
    for op, _, cat, _, _, sid in events:
        if op == "alloc":
            final[sid] = cat
    for sid in grad_sids:
        final[sid] = "grads"
    return [(op, b, final[sid], ph, fn, sid) for op, b, _, ph, fn, sid in events]


def train_step(torch, model, optim, state, tracker, a, vocab, forward, clip):
    """One micro-batch as torchtitan's train_step takes it (trainer.py forward_backward_step, components/loss.py
    cross_entropy_loss: fp32 logits; `del pred` before backward): `forward(tokens)` gives the logits; then
    `clip()`, AdamW, zero_grad. Records the event indices the comparisons read (end of forward, after the optimizer
    step) and the sharded gradients' storages."""
    state["phase"] = "step"
    tracker.reset_mod_stats()
    tokens = torch.randint(0, vocab, (a.mbs, a.seq))
    labels = torch.randint(0, vocab, (a.mbs, a.seq))
    pred = forward(tokens)
    loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    del pred
    state["end_forward"] = len(tracker.events)
    loss.backward()
    del loss, tokens, labels
    state["grad_sids"] = grad_storage_ids(model, tracker)
    state["phase"] = "optimizer"
    clip()
    optim.step()
    state["after_step"] = len(tracker.events)  # gradients and states live: the persistent state of a step
    optim.zero_grad()


def step(torch, model, optim, a, vocab, state, tracker):
    """torchtitan's train_step with its clip_grad_norm_ under EP."""
    from torchtitan.distributed import utils as dist_utils

    train_step(torch, model, optim, state, tracker, a, vocab, model,
               lambda: dist_utils.clip_grad_norm_(list(model.parameters()), 1.0, foreach=True, ep_enabled=True))


def traced_step(torch, model, optim, state, tracker, rank, run):
    """Under the tracker: the warm-up that creates the AdamW states (zero gradients, one step; the lane's --warmup
    init), then the measured step `run()`; each rank's own batch seed, the garbage collector off (torchtitan's
    GarbageCollection: frees by reference counting only, a deterministic trace)."""
    torch.manual_seed(1000 + rank)
    gc.collect()
    gc.disable()
    with tracker:
        state["phase"] = "optimizer"
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optim.step()
        optim.zero_grad()
        state["step"] = 1
        run()
        state["phase"] = "end"


def worker(rank, world, a, store_path, out_dir):
    import torch
    import torch.distributed as dist
    from lane.fsdp_groups import patch_fsdp_param_group, patch_reduce_role
    from lane.tracker import make_tracker

    patch_fsdp_param_group()
    titan_moe.patch_rms_norm()

    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=world)
    dims = titan_moe.QWEN3 if a.model == "qwen3" else titan_moe.DSV3
    cfg = (titan_moe.qwen3_config if a.model == "qwen3" else titan_moe.dsv3_config)(dims, a.seq)
    torch.manual_seed(0)  # the same full weights on every rank before sharding
    model = cfg.build()
    model.init_states()
    titan_moe.parallelize(a.model, model, world, a.ep)
    counts = {}
    spy_routers(model, counts, dims["experts"])
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = {"phase": "init", "step": 0, "micro": 0, "propagating": False}
    tracker = make_tracker(torch, model, optim, state)
    patch_reduce_role(tracker)
    traced_step(torch, model, optim, state, tracker, rank,
                lambda: step(torch, model, optim, a, dims["vocab"], state, tracker))
    events = final_categories(tracker.events, state["grad_sids"])
    peak, at_peak, peak_phase, _, _ = summarize(events)
    res = {"rank": rank, "peak": peak, "peak_phase": peak_phase, "at_peak": at_peak,
           "end_forward": live_at(events, state["end_forward"]),
           "saved_per_block": saved_per_block(events, state["end_forward"]),
           "persistent": {c: v for c, v in live_at(events, state["after_step"]).items() if c in PERSISTENT},
           "router_counts": counts}
    if a.trace_dir:
        Path(a.trace_dir, f"{a.model}-rank{rank}.json").write_text(json.dumps(
            {"end_forward": state["end_forward"], "events": events}))
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))
    end_distributed(0)


def received_rows(ranks, experts, ep):
    """Per MoE layer, per rank: the rows the rank's experts receive. ParallelDims's sparse mesh is (efsdp, ep)
    with ep innermost: rank i is EP index i % ep in the EP group of ranks (i // ep)·ep ..; its E/ep experts
    receive every group member's (token, choice) pairs routed to them."""
    out = {}
    per = experts // ep
    for layer in ranks[0]["router_counts"]:
        rows = []
        for i in range(len(ranks)):
            group = ranks[(i // ep) * ep:(i // ep + 1) * ep]
            j = i % ep
            rows.append(sum(sum(r["router_counts"][layer][j * per:(j + 1) * per]) for r in group))
        out[layer] = rows
    return out


def shardplan(bin_, spec, a, imbalance=None):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(spec, fh)
        fh.flush()
        cmd = [bin_, "memory", "--model", fh.name, "--gpus", str(a.world), "--ep", str(a.ep), "--ep-backend",
               "alltoall", "--runtime", "fsdp2", "--precision", "bf16-mixed", "--ac", "none", "--seq", str(a.seq),
               "--mbs", str(a.mbs), "--sdpa-backend", "flash", "--json", "-"]
        if imbalance:
            cmd += ["--moe-imbalance", f"{imbalance:.6f}"]
        return shardplan_memory(cmd, fh.name, spec["name"] + ".json")


def shardplan_memory(cmd, model_path, label):
    """Runs `shardplan memory ... --json -` (cmd): the peak, its breakdown and phase, the persistent state, and the
    command line with the model file named `label`."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    m = json.loads(r.stdout)["memory"]
    return {"peak": m["peak_bytes"], "at_peak": m["breakdown"], "peak_phase": m["peak_phase"],
            "persistent": m["persistent"], "cmd": " ".join(cmd[1:]).replace(model_path, label)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("qwen3", "deepseek_v3"), required=True)
    ap.add_argument("--shardplan", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--mbs", type=int, default=1)
    ap.add_argument("--trace-dir", help="write each rank's allocation events here")
    ap.add_argument("--spec-out", help="also write the shardplan model spec here")
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    dims = titan_moe.QWEN3 if a.model == "qwen3" else titan_moe.DSV3
    if a.world % a.ep or dims["experts"] % a.ep:
        print(f"moe_model_ep.py: --ep {a.ep} must divide --world {a.world} and the {dims['experts']} experts",
              file=sys.stderr)
        return 2
    spec = titan_moe.spec_json(a.model, dims, a.seq)
    if a.spec_out:
        Path(a.spec_out).write_text(json.dumps(spec, indent=1) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, (a.world, a, os.path.join(tmp, "store"), tmp), nprocs=a.world)
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(a.world)]
    recv = received_rows(ranks, dims["experts"], a.ep)
    t_k = a.mbs * a.seq * dims["top_k"]
    imbalance = max(max(v) for v in recv.values()) / t_k
    tokens = a.mbs * a.seq
    for i, r in enumerate(ranks):
        rows = {layer.split(".")[1]: v[i] for layer, v in recv.items()}
        r["listed_per_block"] = listed_blocks(a.shardplan, spec, tokens, rows)
    out = {"model": a.model, "world": a.world, "ep": a.ep, "seq": a.seq, "mbs": a.mbs, "spec": spec,
           "received_rows": recv, "imbalance": imbalance, "ranks": ranks,
           "shardplan": shardplan(a.shardplan, spec, a),
           "shardplan_imbalance": shardplan(a.shardplan, spec, a, imbalance)}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

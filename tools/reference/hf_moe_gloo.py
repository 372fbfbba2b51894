#!/usr/bin/env python3
"""Hugging Face transformers' MoE decoders (MixtralForCausalLM, Qwen3MoeForCausalLM; transformers 5.23.0,
models/mixtral/modeling_mixtral.py, models/qwen3_moe/modeling_qwen3_moe.py) at tiny sizes of their real
architectures, data parallel with FSDP2 over gloo: `world` CPU processes (torch.multiprocessing spawn, FileStore),
real tensors, the real router (per-expert token counts depend on the values), one training step per rank.

Wrapped as PyTorch's FSDP2 tutorial and accelerate's FSDP2 path wrap a transformers model: `fully_shard` on every
decoder layer (the class in `_no_split_modules`), then on the root (which holds the embedding, final norm and
lm_head and, with the default reshard_after_forward=None, keeps them unsharded from forward to backward:
shardplan's --root-params embedding-head); MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (the lane's
bf16-mixed). With --ep N, transformers' own expert parallelism instead (load_ep: from_pretrained with a
DistributedConfig; configuration_mixtral.py base_model_ep_plan: the experts' 3-D weights "grouped_gemm", the
experts module "ep_dispatch_experts", dispatched by distributed/expert_parallel.py AllToAllEP; its FSDP plan).

The experts are transformers 5's `@use_experts_implementation` MixtralExperts / Qwen3MoeExperts: one 3-D
parameter per projection (gate_up_proj [E, 2F, h], down_proj [E, h, F]); the default implementation
(modeling_utils.py get_correct_experts_implementation) is "grouped_mm" (integrations/moe.py
grouped_mm_experts_forward: sort the (token, choice) pairs by expert, gather, two torch grouped GEMMs, weight,
un-permute, sum over the top-k), which on torch 2.15's CPU runs torch.nn.functional.grouped_mm; "eager" (the
per-expert loop of MixtralExperts.forward) with --experts-impl eager.

The step (the lane's, as torchtitan's trainer takes it): forward to the logits, fp32 cross-entropy, `del` the
logits, backward, clip_grad_norm_(1.0), AdamW, zero_grad; after a warm-up that creates the AdamW states (zero
gradients, one step; the lane's --warmup init). Measured per rank with the lane's tracker (lane/tracker.py,
FSDPMemTracker categories, 512-B rounding): params/grads/optimizer after the optimizer step, everything live at
the end of the forward per block, the peak and its breakdown, the router's per-expert counts per layer.
Compared with `shardplan memory` of the same Hugging Face config.json (shardplan reads it: model/hf_config.cpp).
Usage: hf_moe_gloo.py --model mixtral|qwen3_moe --shardplan BIN [--world 2 --seq 64 --mbs 1] (JSON on stdout)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/common/
from common.teardown import end_distributed  # noqa: E402

from lane.moe_listed import HF_ONLY, listed_blocks  # noqa: E402
from moe_model_ep import (PERSISTENT, final_categories, live_at, saved_per_block, shardplan_memory,  # noqa: E402
                          traced_step, train_step)

# The tiny architectures: hidden 64, 4 heads / 2 KV heads of 16, 8 experts of 32, top-2, vocab 256, 2 layers (the
# sizes of tools/reference/lane/titan_moe.py's torchtitan rows). Qwen3-MoE as Qwen3-30B-A3B: every layer sparse,
# norm_topk_prob true, q/k norms.
DIMS = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=256, experts=8, top_k=2, moe_ffn=32)


def hf_config(name, seq):
    """The transformers config of the tiny model (its to_dict() is the config.json shardplan reads)."""
    d = DIMS
    common = dict(vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
                  num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"], head_dim=d["head_dim"],
                  num_experts_per_tok=d["top_k"], max_position_embeddings=seq, tie_word_embeddings=False)
    if name == "mixtral":
        from transformers import MixtralConfig

        return MixtralConfig(intermediate_size=d["moe_ffn"], num_local_experts=d["experts"], **common)
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(moe_intermediate_size=d["moe_ffn"], intermediate_size=4 * d["hidden"],
                          num_experts=d["experts"], norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                          **common)


def build(name, seq, experts_impl):
    import transformers

    cfg = hf_config(name, seq)
    cls = transformers.MixtralForCausalLM if name == "mixtral" else transformers.Qwen3MoeForCausalLM
    model = cls(cfg)  # fp32 parameters, _init_weights with the seed set by the caller
    if experts_impl:
        model.set_experts_implementation(experts_impl)
    model.train()
    return model


def wrap(model, world):
    """FSDP2 per decoder layer, then the root (PyTorch's FSDP2 tutorial, accelerate's fsdp2_prepare_model)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def load_ep(a, model_dir, world):
    """transformers' own expert parallelism with FSDP2 (from_pretrained with a DistributedConfig:
    distributed/utils.py initialize_distributed_mesh builds the dense (pp, dp_replicate, fsdp, tp) and expert (pp,
    dp_replicate, efsdp, ep) meshes; the model's base_model_ep_plan shards the experts' 3-D weights Shard(0) over
    `ep` and dispatches with all-to-all; distributed/fsdp.py apply_fully_sharded_data_parallelism: the experts
    module its own FSDP unit on `efsdp`, then embed_tokens and every layer resharded after forward, [norm,
    lm_head] one unit kept unsharded, the root; bf16 parameters, fp32 reduction with fsdp_mixed_precision)."""
    import torch
    import transformers
    from transformers.distributed import DistributedConfig

    cls = transformers.MixtralForCausalLM if a.model == "mixtral" else transformers.Qwen3MoeForCausalLM
    dc = DistributedConfig(fsdp_size=world, ep_size=a.ep, ep_implementation="all_to_all", fsdp_mixed_precision=True)
    kw = {"experts_implementation": a.experts_impl} if a.experts_impl else {}
    model = cls.from_pretrained(model_dir, distributed_config=dc, dtype=torch.float32, **kw)
    model.train()
    compact_shards(torch, model)
    # from_pretrained loads the checkpoint after fully_shard into new DTensor parameters; FSDP2 adopts them at
    # its lazy init (_fsdp_param.py reset_sharded_param), which the first forward would run after the tracker
    # looked at the old ones: run it now.
    model._get_fsdp_state()._lazy_init()
    return model


def compact_shards(torch, model):
    """from_pretrained's sharded parameters on the CPU are views of the whole checkpoint tensor (distributed/
    sharding_utils.py: `source[slices].to(device=device, dtype=dtype)`, which copies nothing on the CPU in the
    checkpoint's dtype), so every rank would hold whole dense weights; on a GPU the copy to the device is the shard
    alone. Each such parameter becomes a DTensor of a compact copy of its shard."""
    from torch.distributed.tensor import DTensor

    for mod in model.modules():
        for name, p in list(mod.named_parameters(recurse=False)):
            local = p.to_local() if isinstance(p, DTensor) else p.data
            if local.untyped_storage().nbytes() > local.numel() * local.element_size():
                new = DTensor.from_local(local.clone(), p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                setattr(mod, name, torch.nn.Parameter(new, requires_grad=p.requires_grad))


def received_rows(ranks, ep):
    """{rank: {block: rows}}: the (token, choice) pairs the rank's experts get. Without EP its own T·top_k; with
    EP (the expert mesh's `ep` innermost: rank i is EP index i % ep, its experts the i % ep-th contiguous E/ep)
    every member of its EP group's pairs routed to them."""
    per = DIMS["experts"] // ep
    out = {}
    for i in range(len(ranks)):
        group, j = ranks[(i // ep) * ep:(i // ep + 1) * ep], i % ep
        out[i] = {layer.split(".")[2]: sum(sum(r["router_counts"][layer][j * per:(j + 1) * per]) for r in group)
                  for layer in ranks[i]["router_counts"]}
    return out


def spy_routers(model, counts, experts):
    """Every router's (token, choice) pairs per expert, per layer (MixtralTopKRouter / Qwen3MoeTopKRouter return
    (logits, scores, indices))."""
    import torch

    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("TopKRouter"):
            orig = mod.forward

            def spy(*args, _orig=orig, _name=name, **kw):
                out = _orig(*args, **kw)
                counts[_name] = torch.bincount(out[2].reshape(-1), minlength=experts).tolist()
                return out

            mod.forward = spy


def backward_ops_at(events, index):
    """The activations allocated in backward and live at event `index`, bytes per op that allocated them."""
    live = {}
    for op, nbytes, cat, phase, fn, sid in events[:index + 1]:
        if op == "alloc" and cat == "activations" and phase.startswith("backward"):
            live[sid] = (fn, nbytes)
        elif op == "free":
            live.pop(sid, None)
    out = {}
    for fn, nbytes in live.values():
        out[fn] = out.get(fn, 0) + nbytes
    return out


def mark_gloo_copies(tracker, state):
    """gloo's reduce-scatter copies its whole input (ProcessGroupGloo's work: a buffer the tracker first sees at
    the work's aten.split, freed when the call returns); NCCL reduces from the input itself. FSDP2 calls it
    synchronously (_fsdp_collectives.py DefaultReduceScatter.__call__, async_op False): every storage allocated
    inside the call is gloo's, collected in state["gloo_copies"] so the comparison can leave it out."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    orig = DefaultReduceScatter.__call__

    def call(self, *args, **kwargs):
        first = len(tracker.events)
        try:
            return orig(self, *args, **kwargs)
        finally:
            state["gloo_copies"].update(e[5] for e in tracker.events[first:] if e[0] == "alloc")

    DefaultReduceScatter.__call__ = call


def step(torch, model, optim, a, state, tracker):
    """The lane's step with transformers' forward (the logits) and gradient clipping: clip_grad_norm_, or under EP
    (gradients on two meshes, fsdp and efsdp x ep) the Trainer's per-mesh norm (trainer.py _mixed_mesh_grad_norm)."""
    def clip():
        if a.ep > 1:
            from transformers import Trainer

            Trainer._mixed_mesh_grad_norm(None, model, 1.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)

    train_step(torch, model, optim, state, tracker, a, DIMS["vocab"],
               lambda tokens: model(input_ids=tokens, use_cache=False).logits, clip)


def worker(rank, world, a, store_path, out_dir):
    import torch
    import torch.distributed as dist
    from lane.fsdp_groups import patch_reduce_role
    from lane.tracker import make_tracker, summarize

    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=world)
    if a.ep > 1:
        os.environ["LOCAL_RANK"] = str(rank)
        model = load_ep(a, os.path.join(out_dir, "model"), world)
    else:
        torch.manual_seed(0)  # the same full weights on every rank before sharding
        model = build(a.model, a.seq, a.experts_impl)
        wrap(model, world)
    impl = model.config._experts_implementation
    counts = {}
    spy_routers(model, counts, DIMS["experts"])
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = {"phase": "init", "step": 0, "micro": 0, "propagating": False, "gloo_copies": set()}
    tracker = make_tracker(torch, model, optim, state)
    patch_reduce_role(tracker)
    mark_gloo_copies(tracker, state)
    traced_step(torch, model, optim, state, tracker, rank, lambda: step(torch, model, optim, a, state, tracker))
    events = final_categories(tracker.events, state["grad_sids"])
    gloo = [e for e in events if e[5] in state["gloo_copies"]]
    raw_peak, _, raw_phase, _, _ = summarize(events)
    # The step as on NCCL: without gloo's copies (the end-of-forward index moves by the events dropped before it).
    end_forward = state["end_forward"] - sum(1 for e in events[:state["end_forward"]] if e[5] in state["gloo_copies"])
    after_step = state["after_step"] - sum(1 for e in events[:state["after_step"]] if e[5] in state["gloo_copies"])
    events = [e for e in events if e[5] not in state["gloo_copies"]]
    peak, at_peak, peak_phase, peak_index, _ = summarize(events)
    res = {"rank": rank, "experts_impl": impl, "peak": peak, "peak_phase": peak_phase, "peak_op": events[peak_index][4],
           "gloo_peak": raw_peak, "gloo_peak_phase": raw_phase,
           "gloo_copies": [e[1] for e in gloo if e[0] == "alloc"],
           "at_peak": at_peak, "backward_ops_at_peak": backward_ops_at(events, peak_index),
           "end_forward": live_at(events, end_forward),
           "saved_per_block": saved_per_block(events, end_forward),
           "persistent": {c: v for c, v in live_at(events, after_step).items() if c in PERSISTENT},
           "router_counts": counts}
    if a.trace_dir:
        Path(a.trace_dir, f"{a.model}-rank{rank}.json").write_text(json.dumps(
            {"end_forward": end_forward, "peak_index": peak_index, "events": events}))
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))
    end_distributed(0)


def shardplan(bin_, config_path, a, moe_impl, imbalance=None):
    # Without EP the FSDP2 tutorial's wrap (the root holds embedding, norm and head); transformers' EP path wraps
    # as torchtitan does (shardplan's default).
    wrap_flags = ["--ep", str(a.ep), "--ep-backend", "alltoall"] if a.ep > 1 else ["--root-params", "embedding-head"]
    cmd = [bin_, "memory", "--model", config_path, "--gpus", str(a.world), "--runtime", "fsdp2", "--precision",
           "bf16-mixed", "--ac", "none", "--seq", str(a.seq), "--mbs", str(a.mbs), "--sdpa-backend", "flash",
           *wrap_flags, "--fp32-norm", "--moe-impl", moe_impl, "--json", "-"]
    if imbalance:
        cmd += ["--moe-imbalance", f"{imbalance:.6f}"]
    return shardplan_memory(cmd, config_path, a.model + "-tiny.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("mixtral", "qwen3_moe"), required=True)
    ap.add_argument("--shardplan", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--mbs", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1,
                    help="expert parallel degree through transformers' DistributedConfig (default 1: fully_shard)")
    ap.add_argument("--experts-impl", choices=("grouped_mm", "eager"),
                    help="transformers' experts implementation (default: the one transformers picks)")
    ap.add_argument("--trace-dir", help="write each rank's allocation events here")
    ap.add_argument("--config-out", help="also write the Hugging Face config.json shardplan reads here")
    a = ap.parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    if a.ep > 1 and (a.world % a.ep or DIMS["experts"] % a.ep):
        print(f"hf_moe_gloo.py: --ep {a.ep} must divide --world {a.world} and the {DIMS['experts']} experts",
              file=sys.stderr)
        return 2
    config = hf_config(a.model, a.seq).to_dict()
    with tempfile.TemporaryDirectory() as tmp:
        config_path = os.path.join(tmp, f"{a.model}-tiny.json")
        Path(config_path).write_text(json.dumps(config, indent=1) + "\n")
        if a.config_out:
            Path(a.config_out).write_text(json.dumps(config, indent=1) + "\n")
        if a.ep > 1:  # the checkpoint every rank loads its shards from (deepspeed, imported on the way, logs to stdout)
            torch.manual_seed(0)
            with contextlib.redirect_stdout(sys.stderr):
                build(a.model, a.seq, None).save_pretrained(os.path.join(tmp, "model"))
        mp.spawn(worker, (a.world, a, os.path.join(tmp, "store"), tmp), nprocs=a.world)
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(a.world)]
        tk = a.mbs * a.seq * DIMS["top_k"]
        busiest = max(max(c) for r in ranks for c in r["router_counts"].values())
        recv = received_rows(ranks, a.ep)
        # --moe-imbalance: the busiest EP rank's received rows over the mean T·top_k (without EP: no effect in
        # shardplan; the busiest expert over the mean T·k/E is reported beside it).
        imbalance = max(max(v.values()) for v in recv.values()) / tk
        # Without EP every --moe-impl: torchtitan's grouped, transformers 4's loop and transformers 5.23's two
        # (hf-grouped-mm, hf-eager: the implementations this run has, measured against the one it ran).
        impls = ("grouped",) if a.ep > 1 else ("grouped", "loop", "hf-grouped-mm", "hf-eager")
        per_tensor, ep_only = {}, ("moe_ep",) if a.ep > 1 else ()
        for i, r in enumerate(ranks):
            r["received_rows"] = recv[i]
            r["listed_per_block"] = {impl: listed_blocks(
                a.shardplan, config, a.mbs * a.seq, recv[i], top_k=DIMS["top_k"], only=HF_ONLY[impl] + ep_only,
                cpu_bf16=(), per_tensor=per_tensor.setdefault(impl, {}) if i == 0 else None) for impl in impls}
        out = {"model": a.model, "world": a.world, "ep": a.ep, "seq": a.seq, "mbs": a.mbs, "config": config,
               "experts_impl": ranks[0]["experts_impl"], "busiest_expert_rows": busiest,
               "busiest_expert_ratio": busiest * DIMS["experts"] / tk, "imbalance": imbalance,
               "ranks": ranks, "listed_tensors_rank0": per_tensor,
               "shardplan": {impl: shardplan(a.shardplan, config_path, a, impl) for impl in impls},
               "shardplan_imbalance": shardplan(a.shardplan, config_path, a, "grouped", imbalance)}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

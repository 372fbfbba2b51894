#!/usr/bin/env python3
"""Runs DeepSpeed 0.19.8's MoE layer (deepspeed/moe/sharded_moe.py TopKGate and MOELayer, deepspeed/moe/experts.py
Experts; the pinned environment) forward on small CPU tensors, ep_size 1 (no process group: MOELayer skips the
all-to-all), and records what its capacity does: the capacity C the gate returns (the experts' input is
[ep, E / ep, C, M]), the rows the experts run (E x C), the largest tensor autograd saves, and whether any saved
tensor has the shape [S, E, C] (the dense combine weights / dispatch mask of DeepSpeed releases before the sparse
routes). With --skew the gate's weight sends every token's first choice to expert 0 (the busiest expert's load
far above the capacity), to show that the rows the experts run do not depend on the routing.
With --shardplan BIN it also runs `BIN simulate` on the same MoE dimensions (--runtime megatron --zero 1 --ep 2
--ep-backend alltoall --moe-capacity-factor F --moe-pad-to-capacity --json) and reports its
parallelism.moe_expert_capacity and parallelism.moe_busiest_rows (shardplan's capacity is Megatron-core's get_capacity,
the same ceil(S x k / E x F) as DeepSpeed's _capacity when min_capacity does not bind).
Usage: deepspeed_moe_capacity.py [--tokens S --hidden M --ffn F --experts E --top-k K --factor CF
--min-capacity N] [--skew] [--shardplan BIN]   (prints JSON)."""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile

import torch
from torch import nn


def run_deepspeed(s, m, f, e, k, factor, min_capacity, skew):
    from deepspeed.moe.experts import Experts
    from deepspeed.moe.sharded_moe import MOELayer, TopKGate

    torch.manual_seed(0)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(m, f, bias=False)
            self.fc2 = nn.Linear(f, m, bias=False)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    gate = TopKGate(m, e, k, capacity_factor=factor, min_capacity=min_capacity, use_rts=False)
    if skew:
        with torch.no_grad():
            gate.wg.weight.zero_()
            gate.wg.weight[0].fill_(1.0)  # expert 0's logit is sum(x), the others' 0
    layer = MOELayer(gate, Experts(Mlp(), e), "ep_size_1", 1, e)
    expert_inputs = []
    layer.experts.register_forward_pre_hook(lambda mod, args: expert_inputs.append(tuple(args[0].shape)))
    saved = []

    def pack(t):
        saved.append({"shape": list(t.shape), "numel": t.numel(), "bytes": t.untyped_storage().nbytes()})
        return t

    x = torch.randn(1, s, m)
    if skew:
        x = x.abs() + 1.0  # positive inputs: expert 0's logit is the largest for every token
    x.requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x, None)
    y.float().sum().backward()
    shape = expert_inputs[0]  # [ep, E / ep, C, M]
    capacity = shape[2]
    counts = layer.exp_counts.tolist()
    return {
        "expert_input_shape": list(shape),
        "capacity": capacity,
        "expert_rows": shape[0] * shape[1] * capacity,
        "routed_rows": s * k,
        "busiest_expert_routed": max(counts),
        "largest_saved_numel": max(t["numel"] for t in saved),
        "dense_sec_saved": any(sorted(t["shape"]) == sorted([s, e, capacity]) for t in saved),
    }


def run_shardplan(bin_, s, m, f, e, k, factor):
    spec = {"schema": "shardplan.model/1", "name": "tiny-moe", "layers": 1, "hidden": m, "heads": 4,
            "kv_heads": 4, "ffn_hidden": f, "vocab": 256, "seq": s, "moe": {"experts": e, "top_k": k}}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(spec, fh)
        fh.flush()
        out = subprocess.run([bin_, "simulate", "--model", fh.name, "--gpus", "2", "--runtime", "megatron",
                              "--zero", "1", "--ep", "2", "--ep-backend", "alltoall", "--seq", str(s),
                              "--moe-capacity-factor", repr(factor), "--moe-pad-to-capacity", "--json", "-"],
                             check=True, capture_output=True, text=True).stdout
    par = json.loads(out)["parallelism"]
    return {"capacity": par["moe_expert_capacity"], "busiest_rows": par["moe_busiest_rows"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=48)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--factor", type=float, default=1.0)
    ap.add_argument("--min-capacity", type=int, default=4)  # deepspeed/moe/layer.py MoE's default
    ap.add_argument("--skew", action="store_true")
    ap.add_argument("--shardplan")
    a = ap.parse_args()
    out = {"deepspeed": run_deepspeed(a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.factor, a.min_capacity,
                                      a.skew)}
    if a.shardplan:
        out["shardplan"] = run_shardplan(a.shardplan, a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.factor)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

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
With --saved it runs the layer in bf16 with SwiGLU experts (w1, w3, w2 without bias: shardplan's default MLP) and
records every storage autograd saves and backward reads (torch.autograd.graph.saved_tensors_hooks' unpack; the
parameters and the layer's input left out, each storage once), and with --shardplan BIN too, shardplan's saved bytes of the same layer under
--moe-impl deepspeed: the MoE layer's eager-saved activations (`show model SPEC --graph`, the `always` and
`moe_deepspeed` entries, the input left out), the expert-side ones at the busiest rows that `simulate --runtime
deepspeed --moe-impl deepspeed` reports (parallelism.moe_busiest_rows), the others at S tokens.
Usage: deepspeed_moe_capacity.py [--tokens S --hidden M --ffn F --experts E --top-k K --factor CF
--min-capacity N] [--skew] [--saved] [--shardplan BIN]   (prints JSON)."""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile

import torch
from torch import nn


class Expert(nn.Module):
    """One expert without biases: ReLU (fc1, fc2) or, with `swiglu`, shardplan's default SwiGLU (w1, w3, w2)."""

    def __init__(self, m, f, swiglu):
        super().__init__()
        self.w1 = nn.Linear(m, f, bias=False)
        self.w3 = nn.Linear(m, f, bias=False) if swiglu else None
        self.w2 = nn.Linear(f, m, bias=False)

    def forward(self, x):
        if self.w3 is None:
            return self.w2(torch.relu(self.w1(x)))
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


def run_deepspeed(s, m, f, e, k, factor, min_capacity, skew):
    from deepspeed.moe.experts import Experts
    from deepspeed.moe.sharded_moe import MOELayer, TopKGate

    torch.manual_seed(0)
    gate = TopKGate(m, e, k, capacity_factor=factor, min_capacity=min_capacity, use_rts=False)
    if skew:
        with torch.no_grad():
            gate.wg.weight.zero_()
            gate.wg.weight[0].fill_(1.0)  # expert 0's logit is sum(x), the others' 0
    layer = MOELayer(gate, Experts(Expert(m, f, swiglu=False), e), "ep_size_1", 1, e)
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


def shardplan(bin_, s, m, f, e, k, *args):
    """Runs `BIN ARGS...` on the one-block MoE spec of those dimensions ("{}" in args: the spec's path); its
    stdout as JSON."""
    spec = {"schema": "shardplan.model/1", "name": "tiny-moe", "layers": 1, "hidden": m, "heads": 4,
            "kv_heads": 4, "ffn_hidden": f, "vocab": 256, "seq": s, "moe": {"experts": e, "top_k": k}}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(spec, fh)
        fh.flush()
        argv = [bin_, *(fh.name if x == "{}" else x for x in args)]
        return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def run_shardplan(bin_, s, m, f, e, k, factor):
    par = shardplan(bin_, s, m, f, e, k, "simulate", "--model", "{}", "--gpus", "2", "--runtime", "megatron",
                    "--zero", "1", "--ep", "2", "--ep-backend", "alltoall", "--seq", str(s),
                    "--moe-capacity-factor", repr(factor), "--moe-pad-to-capacity", "--json", "-")["parallelism"]
    return {"capacity": par["moe_expert_capacity"], "busiest_rows": par["moe_busiest_rows"]}


def saved_deepspeed(s, m, f, e, k, factor, min_capacity):
    """Every storage the bf16 layer's forward saves, once: [bytes, shape, dtype] sorted, and their sum."""
    from deepspeed.moe.experts import Experts
    from deepspeed.moe.sharded_moe import MOELayer, TopKGate

    torch.manual_seed(0)
    # top2_2nd_expert_sampling off: its Gumbel noise is added in place to the logits, no saved tensor.
    gate = TopKGate(m, e, k, capacity_factor=factor, min_capacity=min_capacity, use_rts=False,
                    top2_2nd_expert_sampling=False)
    # The engine's bf16 cast (deepspeed.initialize: module.bfloat16()) covers the gate's wg as well.
    layer = MOELayer(gate, Experts(Expert(m, f, swiglu=True), e), "ep_size_1", 1, e).to(torch.bfloat16)
    x = torch.randn(1, s, m, dtype=torch.bfloat16, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {x.untyped_storage().data_ptr()}
    saved = {}

    # Counted when backward unpacks it: a tensor saved by a node that dies in forward (its output feeds only
    # argmax, a mask, an index) is freed then, and its address may be reused by a later saved tensor; every
    # tensor backward unpacks is alive at once when backward starts.
    def unpack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            saved[st.data_ptr()] = (st.nbytes(), list(t.shape), str(t.dtype).replace("torch.", ""))
        return t

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        y = layer(x, None)
    # The load-balancing loss joins the training loss (DeepSpeed's MoE returns it for that).
    (y.float().sum() + layer.l_aux).backward()
    tensors = sorted(saved.values())
    return {"tensors": tensors, "bytes": sum(t[0] for t in tensors)}


BYTES = {"compute": 2, "fp32": 4, "int64": 8, "bool": 1}


def listed_shardplan(bin_, s, m, f, e, k, factor):
    """shardplan's saved bytes of the MoE layer under --moe-impl deepspeed at S tokens, by tensor name."""
    graph = shardplan(bin_, s, m, f, e, k, "show", "model", "{}", "--graph")
    rows = shardplan(bin_, s, m, f, e, k, "simulate", "--model", "{}", "--gpus", "2", "--runtime", "deepspeed",
                     "--zero", "1", "--ep", "2", "--moe-impl", "deepspeed", "--seq", str(s),
                     "--moe-capacity-factor", repr(factor), "--json", "-")["parallelism"]["moe_busiest_rows"]
    layer = next(l for l in graph["layers"] if l["kind"] == "moe")
    tensors = {}
    for a in layer["activations"]:
        if a.get("only", "moe_deepspeed") != "moe_deepspeed" or a["name"] == "input" or not a["eager"]:
            continue
        # an expert-side entry lists top_k rows per token: rows / (S x top_k) of them per listed row
        scale = rows / (s * k) if a.get("expert_rows") else 1.0
        tensors[a["name"]] = a["per_token"] * s * BYTES[a["dtype"]] * scale
    return {"tensors": tensors, "bytes": sum(tensors.values()), "busiest_rows": rows}


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
    ap.add_argument("--saved", action="store_true")
    ap.add_argument("--shardplan")
    a = ap.parse_args()
    out = {"deepspeed": run_deepspeed(a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.factor, a.min_capacity,
                                      a.skew)}
    if a.shardplan:
        out["shardplan"] = run_shardplan(a.shardplan, a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.factor)
    if a.saved:
        out["saved"] = saved_deepspeed(a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.factor, a.min_capacity)
        if a.shardplan:
            out["listed"] = listed_shardplan(a.shardplan, a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.factor)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

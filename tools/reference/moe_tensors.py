#!/usr/bin/env python3
"""Runs torchtitan 0.3.0's MoE layer (models/common/moe.py: TokenChoiceTopKRouter, LocalTokenDispatcher,
GroupedExperts; the pinned environment) forward and backward on small CPU tensors and compares what autograd
(or, with --compile, inductor) saves with the MoE layer's tensor list that shardplan builds for the same
dimensions (`shardplan show model SPEC --graph`; simulator/model/moe_tensors.cpp and layer_builders.cpp).

Measured: every storage the forward's saved_tensors_hooks see, once, without the parameters and the layer's
input; listed: the MoE layer's activations that the regime saves, without "input". Both in bytes per token.
On the CPU the router's gate does not run under an fp32 autocast (CPU autocast supports only 16-bit dtypes),
so its scores, and the sorted scores taken from them, are bf16 where CUDA makes them fp32: the listed
figures are computed with those two at 2 bytes for the comparison.
With --lane: the reference lane's SparseMoe (tools/reference/run.py, Hugging Face's loop over the experts, its
router's softmax in fp32 on the CPU too) against the list of --moe-impl loop.
With --packs: what torch's save_on_cpu would copy, every pack at its shape (a tensor saved by k ops k times, an
expanded view at its expanded size), the layer's input included, against the list's packs (ActTensor::packs and
the pack_only tensors).
Usage: moe_tensors.py --shardplan BIN [--tokens T --hidden D --ffn F --experts E --top-k K] [--compile|--lane]
[--packs]
(prints JSON; exit 1 when the two differ)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/common/
from common.knob_args import add_knob_args  # noqa: E402

CPU_BF16 = {"router.probs", "dispatch.scores_sorted"}  # fp32 under CUDA autocast, bf16 on the CPU
# The `only` conditions of the MoE layer's list that exist under each --moe-impl (simulator/memory/
# layer_memory.cpp act_condition): a tensor shared by several implementations carries the set's name.
IMPL_ONLY = {"moe_grouped": ("moe_grouped", "moe_sorted"),
             "moe_loop": ("moe_loop", "moe_hf_router", "moe_expert_loop"),
             "moe_hf_grouped_mm": ("moe_hf_grouped_mm", "moe_hf_router", "moe_sorted"),
             "moe_hf_eager": ("moe_hf_eager", "moe_hf_router", "moe_expert_loop")}
BYTES = {"compute": 2, "fp32": 4, "int64": 8, "bool": 1}


def tiny_spec(d, f, e, k):
    """The one-block MoE model spec these comparisons give shardplan."""
    return {"schema": "shardplan.model/1", "name": "tiny-moe", "layers": 1, "hidden": d, "heads": 4,
            "kv_heads": 4, "ffn_hidden": f, "vocab": 256, "seq": 64, "moe": {"experts": e, "top_k": k}}


def moe_layer(bin_, d, f, e, k):
    """shardplan's MoE layer (`show model SPEC --graph`) for those dimensions."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(tiny_spec(d, f, e, k), fh)
        fh.flush()
        graph = json.loads(subprocess.run([bin_, "show", "model", fh.name, "--graph"], check=True,
                                          capture_output=True, text=True).stdout)
    return next(l for l in graph["layers"] if l["kind"] == "moe")


def listed(bin_, d, f, e, k, compiled, impl="moe_grouped", also=(), packs=False):
    """shardplan's saved bytes per token of the MoE layer's tensors under `impl` (and the `only` conditions in
    `also`, e.g. "moe_ep"), the layer's input left out; with `packs`, save_on_cpu's copies: each eager-saved
    tensor `packs` times and the pack_only ones, the input included."""
    layer = moe_layer(bin_, d, f, e, k)
    out = {}
    for a in layer["activations"]:
        if a.get("only", impl) not in (*IMPL_ONLY[impl], *also):
            continue
        if packs:
            if not (a["eager"] or a.get("pack_only")):
                continue
        elif a["name"] == "input" or not a["compiled" if compiled else "eager"]:
            continue
        # torchtitan's router under the CPU's autocast (no fp32): bf16; the lane's softmax(dtype=float): fp32
        b = 2 if impl == "moe_grouped" and a["name"] in CPU_BF16 else BYTES[a["dtype"]]
        out[a["name"]] = a["per_token"] * b * (a.get("packs", 1) if packs else 1)
    return out


def measured_lane(t, d, f, e, k, packs=False):
    """The reference lane's SparseMoe (tools/reference/run.py: Hugging Face's loop over the experts)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lane.models import build_model_classes
    from lane.spec import load_spec, normalize_spec
    spec, _ = load_spec("mixtral-8x7b")
    spec = normalize_spec(dict(spec, hidden=d, ffn_hidden=f, heads=4, kv_heads=4, head_dim=d // 4, layers=1,
                                   vocab=64, moe={"experts": e, "top_k": k}))
    model = build_model_classes(torch)(spec, t)
    m = next(mod for mod in model.modules() if type(mod).__name__ == "SparseMoe").to(torch.bfloat16)
    return saved_by(m, m, t, d, packs)


def saved_by(m, fn, t, d, packs=False):
    """Storages the forward of `fn` saves (parameters of `m` and the input left out); with `packs`, every pack the
    saved-tensor hooks see at its own shape, as save_on_cpu copies it (the input included, the parameters not)."""
    x = torch.randn(1, t, d, dtype=torch.bfloat16, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in m.parameters()}
    if not packs:
        skip.add(x.untyped_storage().data_ptr())
    saved = {}

    def pack(s):
        st = s.untyped_storage()
        if st.data_ptr() not in skip:
            entry = (s.numel() * s.element_size() if packs else st.nbytes(), list(s.shape),
                     str(s.dtype).replace("torch.", ""))
            saved[len(saved) if packs else st.data_ptr()] = entry
        return s

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda s: s):
        y = fn(x)
    y.float().sum().backward()
    return sorted(saved.values())


def measured(t, d, f, e, k, compiled, packs=False):
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import GroupedExperts, MoE, RoutedExperts, TokenChoiceTopKRouter
    from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher
    cfg = MoE.Config(
        num_experts=e,
        routed_experts=RoutedExperts.Config(
            inner_experts=GroupedExperts.Config(dim=d, hidden_dim=f, num_experts=e),
            token_dispatcher=LocalTokenDispatcher.Config(num_experts=e, top_k=k)),
        router=TokenChoiceTopKRouter.Config(num_experts=e, gate=Linear.Config(in_features=d, out_features=e),
                                            top_k=k, score_func="softmax"))
    torch.manual_seed(0)
    m = cfg.build()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.02)
    m = m.to(torch.bfloat16).train()
    return saved_by(m, torch.compile(m) if compiled else m, t, d, packs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardplan", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=48)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    add_knob_args(ap, ["compile"],
                  help_suffix={"compile": "the MoE layer compiled (inductor), against the compiled list"})
    ap.add_argument("--lane", action="store_true",
                    help="the reference lane's SparseMoe (Hugging Face's loop) against --moe-impl loop's list")
    ap.add_argument("--packs", action="store_true",
                    help="every pack save_on_cpu makes (eager) against the list's packs")
    a = ap.parse_args(argv)
    t, d, f, e, k = a.tokens, a.hidden, a.ffn, a.experts, a.top_k
    lst = listed(a.shardplan, d, f, e, k, a.compile, "moe_loop" if a.lane else "moe_grouped", packs=a.packs)
    meas = (measured_lane(t, d, f, e, k, a.packs) if a.lane else measured(t, d, f, e, k, a.compile, a.packs))
    # Per-layer tensors (the grouped GEMMs' expert offsets, E int32) are not per token: left out.
    per_layer = [m for m in meas if m[1] == [e] and m[2] == "int32"]
    meas_tok = sum(m[0] for m in meas if m not in per_layer) / t
    out = {"listed_bytes_per_token": sum(lst.values()), "measured_bytes_per_token": meas_tok,
           "listed": lst, "measured": meas, "per_layer_left_out": per_layer}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0 if abs(out["listed_bytes_per_token"] - meas_tok) < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs torchtitan 0.3.0's ChunkedLossWrapper (components/loss.py) on the CPU over the final norm and lm_head of
a real torchtitan llama3 "debugmodel" (dim 256, vocabulary 2,048), FSDP2-wrapped as torchtitan wraps them
(distributed/fsdp.py: fully_shard([norm, lm_head]) under a root, MixedPrecisionPolicy bf16 parameters and an
fp32 reduction; a one-rank gloo group), and records every storage the loss call allocates and frees (the
TorchDispatchMode of tools/reference/loss_tensors.py). Reported per (B, L, N): the loss call's peak live bytes
above what was live when it started, and the bytes live when it returns (the assembled gradient of h), next to
the closed form of the loss layer's chunked list (simulator/model/chunked_loss_tensors.cpp).

Usage: chunked_loss.py [--cases B:L:N,...]  (JSON on stdout)."""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loss_tensors import Tracker  # noqa: E402


def closed_form(B, L, N, V, D, shard=1, compute=2, reduce=4):
    """Bytes of the kChunked list at its forward peak and at the call's return (chunked_loss_tensors.cpp,
    the same closed form as tests/simulator/test_chunked_loss.cpp). T = B L, Tc = T / N, c = compute bytes,
    R = max(reduce, compute) bytes, G = R V D when N >= 2 (FSDP2's held lm_head gradient), else 0. The loop
    holds X + 4 T D (X = c T D when B > 1: the chunks' contiguous copies; the fp32 accumulator); on top, the
    largest of op 5: G + 14 Tc V (logits, log-softmax output and its two gradients); op 7: G + 4 Tc V + c Tc D
    + c V D (logits, cast gradient, lm_head's two gradients); op 8: G + 2 Tc V + c Tc D + c V D + G (dW's
    upcast); op 9: G + 2 Tc V + c Tc D + R V D (the reduce-scatter input; with one chunk the .grad, c V D,
    instead of G); op 10: 2 Tc V + c Tc D + R V D (1 + 1 / shard) + 4 Tc D. At return: c T D (the assembled
    gradient) + R V D (the reduce-scatter input FSDP2 still holds) + R V D / shard (lm_head's sharded
    gradient)."""
    T = B * L
    Tc = T / N
    R = max(reduce, compute)
    X = compute * T * D if B > 1 else 0
    G = R * V * D if N >= 2 else 0
    rs_source = G if N >= 2 else compute * V * D
    inner = max(G + 14 * Tc * V, G + 4 * Tc * V + compute * (Tc * D + V * D),
                2 * G + 2 * Tc * V + compute * (Tc * D + V * D), rs_source + 2 * Tc * V + compute * Tc * D + R * V * D,
                2 * Tc * V + compute * Tc * D + R * V * D * (1 + 1 / shard) + 4 * Tc * D)
    return {"peak": X + 4 * T * D + inner, "after": compute * T * D + R * V * D * (1 + 1 / shard),
            "held_after": R * V * D * (1 + 1 / shard)}


def build_head():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchtitan.models.llama3 import model_registry

    cfg = model_registry("debugmodel").model
    model = cfg.build()

    class Top(torch.nn.Module):
        """The decoder's tail as the trainer runs it with _skip_lm_head: the root returns norm(h)."""

        def __init__(self, norm, lm_head):
            super().__init__()
            self.norm, self.lm_head = norm, lm_head

        def forward(self, x):
            return self.norm(x)

    mesh = init_device_mesh("cpu", (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    top = Top(model.norm, model.lm_head)
    fully_shard([top.norm, top.lm_head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(top, mesh=mesh, mp_policy=mp)
    return top, cfg.dim, cfg.vocab_size


def run_case(top, D, V, B, L, N):
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

    loss_fn = ChunkedLossWrapper.Config(num_chunks=N, loss_fn=CrossEntropyLoss.Config()).build()
    loss_fn.set_lm_head(top.lm_head)
    torch.manual_seed(0)
    x = torch.randn(B, L, D, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (B, L))
    tokens = torch.tensor(B * L)
    h = top(x)
    tr = Tracker(0)
    # Storages alive before the call (h, the gathered bf16 parameters, the labels): their views inside the
    # loss (split, t) are not allocations.
    pre = [h, x, labels] + [p.to_local() if hasattr(p, "to_local") else p for p in top.parameters()]
    for t in pre:
        tr.live[t.untyped_storage().data_ptr()] = 0
    with tr:
        tr.mark("start")
        loss, _ = loss_fn(h, labels, tokens)
        tr.mark("returned")
    live, base, peak, after = 0, None, 0, None
    for kind, what, n, _ in tr.events:
        if kind == "mark":
            if what == "start":
                base = live
            else:
                after = live - base
            continue
        live += n if kind == "alloc" else -n
        if base is not None and after is None:
            peak = max(peak, live - base)
    loss.backward()
    for p in top.parameters():  # the optimizer step's zero_grad(set_to_none=True)
        p.grad = None
    return {"B": B, "L": L, "N": N, "V": V, "D": D, "peak_bytes": peak, "after_bytes": after,
            "closed_form": closed_form(B, L, N, V, D)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="1:1024:4,2:512:8,1:512:1")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        out = []
        for c in args.cases.split(","):  # a fresh head per case: its first step, as the list models it
            top, D, V = build_head()
            out.append(run_case(top, D, V, *map(int, c.split(":"))))
    finally:
        dist.destroy_process_group()
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()

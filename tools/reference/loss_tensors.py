#!/usr/bin/env python3
"""Runs the real losses on small CPU tensors and records every buffer they allocate and free, to check the loss
layer's tensor lists (simulator/model/loss_tensors.cpp; docs/model.md "Logits and loss").

Each loss runs as in its training loop: the head's GEMM makes the compute-dtype logits from a small hidden
state, the loss is taken, the loop drops its reference to the logits, and backward runs through the head. A
TorchDispatchMode records each op output's storage (bytes, when made) and a finalizer when the storage dies.
Reported per loss, in units of T x V bytes (T tokens, V vocabulary): the live vocabulary-sized bytes at the
loss forward's peak and at the backward's peak before the head's GEMM runs, the saved vocabulary-sized tensors
(saved_tensors_hooks), and every vocabulary-sized allocation in order.

Losses: torchtitan 0.3.0 components/loss.py cross_entropy_loss (eager), Hugging Face transformers
loss/loss_utils.py ForCausalLMLoss, and Megatron-core's vocab_parallel_cross_entropy when --megatron FILE names
its megatron/core/tensor_parallel/cross_entropy.py (loaded with a one-rank gloo group; not in the pinned
environment). Usage: loss_tensors.py [--megatron FILE] [--sizes T:V,...]  (JSON on stdout)."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import types
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Tracker(TorchDispatchMode):
    """Live bytes of the storages made under it; a storage counts once, at its first op output."""

    def __init__(self, big: int):
        super().__init__()
        self.big, self.live, self.events = big, {}, []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            s = t.untyped_storage()
            key = s.data_ptr()
            if s.nbytes() == 0 or key in self.live:
                continue
            self.live[key] = s.nbytes()
            self.events.append(("alloc", str(func), s.nbytes(), str(t.dtype).replace("torch.", "")))
            weakref.finalize(s, self._dead, key)
        return out

    def _dead(self, key):
        n = self.live.pop(key, None)
        if n is not None:
            self.events.append(("free", "", n, ""))

    def mark(self, what):
        self.events.append(("mark", what, 0, ""))


def summarize(events, big, tv):
    """Peaks of the live vocabulary-sized bytes per phase (between marks), the allocation sequence."""
    live, peaks, phase, seq = 0, {}, "forward", []
    for kind, what, n, dtype in events:
        if kind == "mark":
            phase = what
            continue
        if n < big:
            continue
        live += n if kind == "alloc" else -n
        peaks[phase] = max(peaks.get(phase, 0), live)
        if kind == "alloc":
            seq.append(f"{phase}:{what.replace('aten.', '')}:{dtype}:{n / tv:g}")
    return {k: v / tv for k, v in peaks.items()}, seq


def run_loss(loss_fn, T, V, hidden=8):
    """The head GEMM, the loss, `del pred`, backward; returns the summary in T x V bytes."""
    tv = T * V
    torch.manual_seed(0)
    h = torch.randn(1, T, hidden, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(V, hidden, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (1, T))
    saved = {}  # storage -> bytes in T x V (log_softmax and nll_loss save the same output)

    def pack(t):
        s = t.untyped_storage()
        if s.nbytes() >= tv:
            saved[s.data_ptr()] = s.nbytes() / tv
        return t

    tracker = Tracker(big=tv)  # a bf16 T x V tensor is 2 units; anything vocab-sized is >= 1
    with tracker:
        pred = torch.nn.functional.linear(h, w)  # the head: logits in the compute dtype
        tracker.mark("loss_forward")
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn(pred, labels)
        del pred
        tracker.mark("loss_backward")
        loss.backward()
        del loss
    peaks, seq = summarize(tracker.events, tv, tv)
    return {"T": T, "V": V, "peaks_TV": peaks, "saved_TV": sorted(saved.values()), "allocs": seq}


def torchtitan_eager():
    from torchtitan.components.loss import cross_entropy_loss
    return lambda pred, labels: cross_entropy_loss(pred, labels)


def hf_eager(V):
    from transformers.loss.loss_utils import ForCausalLMLoss
    return lambda pred, labels: ForCausalLMLoss(pred, labels, vocab_size=V)


def megatron(path):
    """Megatron-core's vocab_parallel_cross_entropy from its source file, on a one-rank gloo group."""
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=0, world_size=1)
    pkg = types.ModuleType("megatron_ce")
    pkg.__path__ = []
    ps = types.ModuleType("megatron.core.parallel_state")
    ps.get_tensor_model_parallel_group = lambda: dist.group.WORLD
    utils = types.ModuleType("megatron.core.utils")
    utils.get_pg_rank = dist.get_rank
    utils.get_pg_size = dist.get_world_size
    local = types.ModuleType("megatron_ce.utils")

    class VocabUtility:  # megatron/core/tensor_parallel/utils.py: the rank's [first, last) vocabulary range
        @staticmethod
        def vocab_range_from_per_partition_vocab_size(per_partition, rank, world_size):
            return rank * per_partition, (rank + 1) * per_partition

    local.VocabUtility = VocabUtility
    for name, mod in {"megatron": types.ModuleType("megatron"), "megatron.core": types.ModuleType("megatron.core"),
                      "megatron.core.parallel_state": ps, "megatron.core.utils": utils, "megatron_ce": pkg,
                      "megatron_ce.utils": local}.items():
        sys.modules.setdefault(name, mod)
    spec = importlib.util.spec_from_file_location("megatron_ce.cross_entropy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # GPTModel.compute_language_model_loss: labels [b, s] -> [s, b]; logits [s, b, V/tp].
    return lambda pred, labels: mod.vocab_parallel_cross_entropy(
        pred.transpose(0, 1), labels.transpose(0, 1).contiguous()).sum()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron", help="path of Megatron-LM's megatron/core/tensor_parallel/cross_entropy.py")
    ap.add_argument("--sizes", default="64:1000,128:4096,256:2048")
    a = ap.parse_args(argv)
    sizes = [tuple(int(x) for x in s.split(":")) for s in a.sizes.split(",")]
    out = {}
    for T, V in sizes:
        out.setdefault("torchtitan_eager", []).append(run_loss(torchtitan_eager(), T, V))
        out.setdefault("hf_for_causal_lm", []).append(run_loss(hf_eager(V), T, V))
        if a.megatron:
            out.setdefault("megatron", []).append(run_loss(megatron(a.megatron), T, V))
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

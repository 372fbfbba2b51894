#!/usr/bin/env python3
"""Logs the order of FSDP2's parameter-group calls (unshard, reshard, pre_backward, post_backward with the number of
retained reduce-scatter inputs, and the root's final callback) in one training step of a small decoder wrapped as
torchtitan 0.3.0 wraps it (tok_embeddings, each block, [norm, lm_head] not resharded after forward, the root), on a
one-rank gloo group with real CPU tensors: with the eager loss or torchtitan's ChunkedLossWrapper, and optionally
under torch's FSDPMemTracker (the reference lane's tracker), with or without the lane's restored group gating
(lane/group_hooks.py). What it shows (torch 2.15, docs/reference-lane.md "The chunked loss"): real FSDP2 runs the
[norm, lm_head] group's backward once (one pre_backward, the last block prefetched there, one post_backward);
FSDPMemTracker's per-module hooks make it post-backward after lm_head, gather again for the norm and end an
iteration per chunk of the chunked loss; the gating restores the real order.

Usage: fsdp2_hook_order.py eager|chunked [plain|tracker|gated]   (the log on stdout)"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as G, _fsdp_state as S

V, D, BLOCKS, L = 2048, 256, 3, 64


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(D, D, bias=False)

    def forward(self, x):
        return x + self.w(x)


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(V, D)
        self.layers = torch.nn.ModuleDict({str(i): Block() for i in range(BLOCKS)})
        self.norm = torch.nn.RMSNorm(D)
        self.lm_head = torch.nn.Linear(D, V, bias=False)
        self.skip_lm_head = False

    def forward(self, t):
        h = self.tok_embeddings(t)
        for b in self.layers.values():
            h = b(h)
        h = self.norm(h)
        return h if self.skip_lm_head else self.lm_head(h)


def logged(cls, name):
    orig = getattr(cls, name)

    def f(self, *a, **k):
        extra = f" rs_states={len(self.comm_ctx.reduce_scatter_states)}" if name == "post_backward" else ""
        print(f"{name} {self._module_fqn or 'root'}{extra}")
        return orig(self, *a, **k)

    setattr(cls, name, f)


def main():
    loss_impl = sys.argv[1] if len(sys.argv) > 1 else "eager"
    mode = sys.argv[2] if len(sys.argv) > 2 else "plain"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29557")
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = Decoder()
    mesh = init_device_mesh("cpu", (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model.tok_embeddings, mesh=mesh, mp_policy=mp)
    for b in model.layers.values():
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard([model.norm, model.lm_head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    for n in ("unshard", "reshard", "pre_backward", "post_backward"):
        logged(G.FSDPParamGroup, n)
    final = S.FSDPState._root_post_backward_final_callback

    def cb(self):
        print("root_final_callback rs_states", len(self._comm_ctx.reduce_scatter_states))
        return final(self)

    S.FSDPState._root_post_backward_final_callback = cb
    optim = torch.optim.AdamW(model.parameters())
    tracker = None
    if mode in ("tracker", "gated"):
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        cls = FSDPMemTracker
        if mode == "gated":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from lane.group_hooks import GroupHooks

            class Gated(GroupHooks, FSDPMemTracker):
                lane_state = {"group_hooks": True}

            cls = Gated
        tracker = cls(model, optim)
        tracker.__enter__()
    tokens, labels = torch.randint(0, V, (1, L)), torch.randint(0, V, (1, L))
    for step in range(2):  # the second step is the one to read (the first runs FSDP2's lazy init)
        if tracker is not None:
            tracker.reset_mod_stats()
        print("=== step", step)
        if loss_impl == "chunked":
            from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

            fn = ChunkedLossWrapper.Config(num_chunks=4, loss_fn=CrossEntropyLoss.Config()).build()
            fn.set_lm_head(model.lm_head)
            model.skip_lm_head = True
            print("--- forward")
            h = model(tokens)
            print("--- loss call")
            if tracker is not None:  # a parent for the head's per-chunk calls (as lane/step.py)
                model.lm_head.register_forward_pre_hook(
                    lambda *_: tracker._mod_tracker.parents.add("ChunkedLossWrapper"), prepend=True)
            loss, _ = fn(h, labels, torch.tensor(L))
            del h
        else:
            print("--- forward")
            pred = model(tokens)
            loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
            del pred
        print("--- backward")
        loss.backward()
        optim.step()
        optim.zero_grad()
    if tracker is not None:
        tracker.__exit__(None, None, None)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

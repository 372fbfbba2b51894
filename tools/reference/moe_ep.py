#!/usr/bin/env python3
"""torchtitan 0.3.0's MoE layer (models/common/moe.py, token_dispatcher.py: AllToAllTokenDispatcher) with expert
parallelism over gloo: `world` CPU processes (torch.multiprocessing spawn, FileStore), real tensors, one forward,
backward and AdamW step per rank; the variable-split all-to-all (torch.distributed._functional_collectives.
all_to_all_single, which torchtitan calls outside the spmd_types backend) runs on gloo.

EP as torchtitan applies it (RoutedExperts.parallelize: the experts' weights are DTensors Shard(0) on the EP mesh,
GroupedExperts.forward takes .to_local(); the dispatcher's ep_mesh wired by wire_meshes): each rank builds the
E/world local experts directly (the same local tensors) and wires the EP mesh. No FSDP: with EP = world the
experts' FSDP mesh (dp_shard·cp/ep) has one rank, so torchtitan leaves the expert weights unsharded; the router
gate (replicated here) is the one dense parameter FSDP would shard.

Measured per rank: parameters, gradients and AdamW state (bytes of live storages); the storages the forward's
saved_tensors_hooks see (the parameters and the layer's input left out), each with its shape; the router's
per-expert token counts (this rank's tokens) and the rows the rank's experts receive after the all-to-all (R);
the peak of live storages during forward+backward (a TorchDispatchMode counting each op's new output storages
until freed). Listed: shardplan's MoE tensor list for the same dimensions (`shardplan show model SPEC --graph`),
each tensor's per-token bytes times T (dense) or times R/top_k (routed rows on the expert side). The busiest
rank (largest R) against `shardplan memory` of the same layer with --moe-imbalance R / (T·top_k): its expert-side
bytes (`parallelism.moe_expert_side_bytes`) and rows.
Usage: moe_ep.py --shardplan BIN [--world 2 --tokens T --hidden D --ffn F --experts E --top-k K] (prints JSON)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/common/
from common.teardown import end_distributed  # noqa: E402
from moe_tensors import listed, moe_layer, tiny_spec  # noqa: E402  (shardplan's MoE list, CPU dtypes of the router's scores)


class LiveBytes(TorchDispatchMode):
    """Bytes of live storages that ops create (each storage once, until it is freed); the maximum seen."""

    def __init__(self, base):
        super().__init__()
        self.live, self.peak, self.seen = base, base, set()

    def _free(self, key, n):
        self.seen.discard(key)
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            # plain tensors only: a wrapper subclass (the functional collectives' AsyncCollectiveTensor) has no
            # storage of its own; the tensor it wraps is an op output seen here
            if type(t) is torch.Tensor and t.device.type == "cpu":
                st = t.untyped_storage()
                key = st.data_ptr()
                if key and key not in self.seen:
                    self.seen.add(key)
                    self.live += st.nbytes()
                    self._track(t, key, st.nbytes())
        self.peak = max(self.peak, self.live)
        return out

    def _track(self, t, key, n):
        # The storage dies with the last tensor on it; a view keeps its base alive, so the base is watched.
        base = t._base if t._base is not None else t
        weakref.finalize(base, self._free, key, n)


def build(e, e_local, d, f, k):
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import GroupedExperts, MoE, RoutedExperts, TokenChoiceTopKRouter
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher
    cfg = MoE.Config(
        num_experts=e,
        routed_experts=RoutedExperts.Config(
            inner_experts=GroupedExperts.Config(dim=d, hidden_dim=f, num_experts=e_local),
            token_dispatcher=AllToAllTokenDispatcher.Config(num_experts=e, top_k=k)),
        router=TokenChoiceTopKRouter.Config(num_experts=e, gate=Linear.Config(in_features=d, out_features=e),
                                            top_k=k, score_func="softmax"))
    return cfg.build()


def nbytes(ts):
    return sum(t.untyped_storage().nbytes() for t in ts)


def worker(rank, world, a, store_path, out_dir):
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=world)
    from torchtitan.distributed import utils as dist_utils
    # parallelism.spmd_backend = "partial_dtensor" (config/configs.py; the default "spmd_types" needs the trainer's
    # current_spmd_mesh): the dispatcher then calls _functional_collectives.all_to_all_single on the EP mesh.
    dist_utils.set_spmd_backend("partial_dtensor")
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
    t, d, f, e, k = a.tokens, a.hidden, a.ffn, a.experts, a.top_k
    torch.manual_seed(0)  # the router gate: the same on every rank
    m = build(e, e // world, d, f, k)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.02)
    torch.manual_seed(1000 + rank)  # each rank's local experts and tokens differ, as under EP
    for p in m.routed_experts.inner_experts.parameters():
        torch.nn.init.normal_(p, std=0.02)
    m = m.to(torch.bfloat16).train()
    m.routed_experts.token_dispatcher.wire_meshes(ep_mesh=mesh["ep"])
    x = torch.randn(1, t, d, dtype=torch.bfloat16, requires_grad=True)
    params = list(m.parameters())
    skip = {p.untyped_storage().data_ptr() for p in params} | {x.untyped_storage().data_ptr()}
    saved = {}

    def pack(s):
        st = s.untyped_storage()
        if st.data_ptr() not in skip:
            saved[st.data_ptr()] = (st.nbytes(), list(s.shape), str(s.dtype).replace("torch.", ""))
        return s

    counts = {}
    router = m.router
    orig = router.forward

    def spy(*args, **kw):
        out = orig(*args, **kw)
        ids = out[1]  # (topk_scores_BLK, topk_expert_ids_BLK, scores_BLE): this rank's tokens per expert
        counts["local"] = torch.bincount(ids.reshape(-1), minlength=e).tolist()
        return out

    router.forward = spy
    base = nbytes(params) + nbytes([x])
    with LiveBytes(base) as live:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda s: s):
            y = m(x)
        y.float().sum().backward()
    opt = torch.optim.AdamW(params, lr=1e-3)
    opt.step()
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    res = {"rank": rank, "params": nbytes(params), "grads": nbytes([p.grad for p in params]),
           "adam_state": nbytes(state), "tokens_per_expert": counts["local"],
           "saved": sorted(saved.values()), "saved_bytes": sum(v[0] for v in saved.values()),
           "peak_fwd_bwd": live.peak}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))
    end_distributed(0)


def compare(bin_, a, ranks):
    """Per rank: the listed bytes with the routed (expert-side) rows at the rank's received R."""
    t, d, f, e, k, w = a.tokens, a.hidden, a.ffn, a.experts, a.top_k, a.world
    lst = listed(bin_, d, f, e, k, False, also=("moe_ep",))
    graph_routed = expert_side(moe_layer(bin_, d, f, e, k), lst)
    totals = [sum(r["tokens_per_expert"][j] for r in ranks) for j in range(e)]
    for rank, r in enumerate(ranks):
        r["received_rows"] = sum(totals[rank * (e // w):(rank + 1) * (e // w)])
        listed_b = 0.0
        for name, per_tok in lst.items():
            rows = r["received_rows"] / k if name in graph_routed else t
            listed_b += per_tok * rows
        r["listed_bytes"] = listed_b
    return lst, graph_routed, totals


def expert_side(layer, lst):
    """Names of the listed tensors whose rows are the expert side's (after the dispatch all-to-all): those the
    graph gives `expert_rows` (the received input, _permute's index, the grouped GEMMs' tensors). The token
    side's index and combine tensors are `expert` too (T·top_k rows on the rank that routed them)."""
    return {x["name"] for x in layer["activations"] if x.get("expert_rows", 0) > 0 and x["name"] in lst}


def busiest(bin_, a, ranks):
    """The busiest rank against shardplan run with --moe-imbalance F = its received rows R / (T·top_k): measured,
    the bytes of the saved storages with R rows (the expert side; the token side has T or T·top_k rows, the
    grouped GEMMs' offsets E/W); shardplan, `memory --json`'s parallelism.moe_expert_side_bytes and
    moe_busiest_rows at F and at 1 (the balanced mean it assumed before)."""
    t, k, w = a.tokens, a.top_k, a.world
    r = max(ranks, key=lambda x: x["received_rows"])
    rows = r["received_rows"]
    imbalance = rows / (t * k)  # exact here: T·top_k = 128 is a power of two
    out = {"rank": r["rank"], "received_rows": rows, "moe_imbalance": imbalance,
           "measured_expert_side_bytes": sum(n for n, shape, _ in r["saved"] if shape and shape[0] == rows)}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(tiny_spec(a.hidden, a.ffn, a.experts, k), fh)
        fh.flush()
        for key, f in (("shardplan", imbalance), ("shardplan_balanced", 1.0)):
            cmd = [bin_, "memory", "--model", fh.name, "--gpus", str(w), "--ep", str(w), "--seq", str(t),
                   "--moe-imbalance", repr(f), "--json", "-"]
            par = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout)["parallelism"]
            out[key + "_rows"] = par["moe_busiest_rows"]
            out[key + "_expert_side_bytes"] = par["moe_expert_side_bytes"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardplan", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=48)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    a = ap.parse_args(argv)
    if a.experts % a.world:
        print(f"moe_ep.py: --experts {a.experts} is not a multiple of --world {a.world}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, (a.world, a, os.path.join(tmp, "store"), tmp), nprocs=a.world)
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(a.world)]
    lst, routed, totals = compare(a.shardplan, a, ranks)
    json.dump({"listed_per_token": lst, "expert_side": sorted(routed), "tokens_per_expert_all_ranks": totals,
               "ranks": ranks, "busiest": busiest(a.shardplan, a, ranks)}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

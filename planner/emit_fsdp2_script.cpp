// The first half of the script `--emit fsdp2` writes: a self-contained PyTorch FSDP2 training script that
// applies the PLAN dict emit_fsdp2 writes above it (planner/emit.cpp) to Hugging Face transformers or
// torchtitan models (or, with --tiny, a tiny model of its own), and prints what it built next to the
// simulated units (SIM_UNITS). In four quarters: imports, module names, the tiny model and the meshes (here);
// the models, TP, AC and FSDP (emit_fsdp2_script_parallel.cpp); LoRA, materialising, the step and the
// optimizers (emit_fsdp2_script_step.cpp); what was built and main (emit_fsdp2_script_main.cpp). Kept as raw
// strings so the script needs no package; tests/emit runs it (torchrun, gloo, CPU).
#include "planner/emit.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptHead;
const char* const kFsdp2ScriptHead = R"PY(
import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper, checkpoint_wrapper
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

# Module names of the model families (--model-source): where the embedding, the blocks, the final norm and the
# head are, and (for --tiny's own model and its TP plan) the names inside a block. Hugging Face transformers 5.23.0
# (models/llama|qwen3|mixtral/modeling_*.py): *ForCausalLM.model.embed_tokens / .model.layers (nn.ModuleList) /
# .model.norm / .lm_head. torchtitan 0.3.0 (models/common/decoder.py Decoder): tok_embeddings / layers (a ModuleDict
# keyed "0", "1", ...) / norm / lm_head.
NAMES = {
    "hf": dict(blocks="model.layers", embed="model.embed_tokens", norm="model.norm", out="lm_head",
               attn="self_attn", mlp="mlp", q="q_proj", k="k_proj", v="v_proj", o="o_proj", gate="gate_proj",
               up="up_proj", down="down_proj", attn_norm="input_layernorm", mlp_norm="post_attention_layernorm"),
    "titan": dict(blocks="layers", embed="tok_embeddings", norm="norm", out="lm_head", attn="attention",
                  mlp="feed_forward", q="wq", k="wk", v="wv", o="wo", gate="w1", up="w3", down="w2",
                  attn_norm="attention_norm", mlp_norm="ffn_norm"),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def log(msg):
    if int(os.environ.get("RANK", "0")) == 0:
        print(msg, file=sys.stderr, flush=True)


def get(root, dotted):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def clean(fqn):
    """A module or parameter name without the wrappers' levels (checkpoint_wrapper, torch.compile)."""
    return ".".join(p for p in fqn.split(".") if p not in ("_checkpoint_wrapped_module", "_orig_mod"))


# --- a tiny model of the same family, built locally (no download) for --tiny -----------------------------------
class _Attn(nn.Module):
    def __init__(self, n, dim, heads, kv_heads):
        super().__init__()
        self.hd = dim // heads
        self.n = n
        setattr(self, n["q"], nn.Linear(dim, heads * self.hd, bias=False))
        setattr(self, n["k"], nn.Linear(dim, kv_heads * self.hd, bias=False))
        setattr(self, n["v"], nn.Linear(dim, kv_heads * self.hd, bias=False))
        setattr(self, n["o"], nn.Linear(heads * self.hd, dim, bias=False))

    def forward(self, x=None, hidden_states=None):
        x = hidden_states if x is None else x
        b, s, _ = x.shape
        q = get(self, self.n["q"])(x).view(b, s, -1, self.hd).transpose(1, 2)
        k = get(self, self.n["k"])(x).view(b, s, -1, self.hd).transpose(1, 2)
        v = get(self, self.n["v"])(x).view(b, s, -1, self.hd).transpose(1, 2)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        p = PLAN["attention_dropout"] if self.training else 0.0
        if PLAN["attention"] == "eager":
            # Hugging Face's eager attention, op by op (transformers eager_attention_forward): s x s scores,
            # fp32 softmax, dropout, a batched GEMM with V.
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = (q @ k.transpose(-2, -1) * self.hd ** -0.5).masked_fill(causal, float("-inf"))
            probs = F.dropout(scores.softmax(-1, dtype=torch.float32).to(q.dtype), p, self.training)
            y = probs @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        return get(self, self.n["o"])(y.transpose(1, 2).reshape(b, s, -1))


class _Mlp(nn.Module):
    def __init__(self, n, dim, hidden):
        super().__init__()
        self.n = n
        setattr(self, n["gate"], nn.Linear(dim, hidden, bias=False))
        setattr(self, n["up"], nn.Linear(dim, hidden, bias=False))
        setattr(self, n["down"], nn.Linear(hidden, dim, bias=False))

    def forward(self, x):
        n = self.n
        return get(self, n["down"])(F.silu(get(self, n["gate"])(x)) * get(self, n["up"])(x))


class _Block(nn.Module):
    def __init__(self, n, dim, heads, kv_heads, hidden):
        super().__init__()
        self.n = n
        setattr(self, n["attn_norm"], nn.RMSNorm(dim))
        setattr(self, n["attn"], _Attn(n, dim, heads, kv_heads))
        setattr(self, n["mlp_norm"], nn.RMSNorm(dim))
        setattr(self, n["mlp"], _Mlp(n, dim, hidden))

    def forward(self, x):
        n = self.n
        # Hugging Face decoder layers call attention with keyword arguments; torchtitan's positionally.
        h = get(self, n["attn_norm"])(x)
        a = get(self, n["attn"])(hidden_states=h) if n is NAMES["hf"] else get(self, n["attn"])(h)
        x = x + a
        return x + get(self, n["mlp"])(get(self, n["mlp_norm"])(x))


class _Body(nn.Module):
    def __init__(self, n, vocab, dim, layers, heads, kv_heads, hidden):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_Block(n, dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)


class TinyModel(nn.Module):
    """Llama-shaped, with the module names of the chosen family (HF: model.layers / lm_head; torchtitan:
    layers / lm_head)."""

    def __init__(self, source, vocab=256, dim=64, layers=4, heads=4, kv_heads=2, hidden=128):
        super().__init__()
        n = NAMES[source]
        self.n = n
        self.vocab = vocab
        if source == "hf":
            self.model = _Body(n, vocab, dim, layers, heads, kv_heads, hidden)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
        else:
            self.tok_embeddings = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(_Block(n, dim, heads, kv_heads, hidden) for _ in range(layers))
            self.norm = nn.RMSNorm(dim)
            self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        n = self.n
        h = get(self, n["embed"])(tokens)
        for block in get(self, n["blocks"]):
            h = block(h)
        return get(self, n["out"])(get(self, n["norm"])(h))


# --- the mesh -------------------------------------------------------------------------------------------------
def mesh_shape(world):
    """(replicate, shard, tp) of the plan; with --tiny on fewer ranks the same structure at the smallest size
    (TP 2 if the plan has TP, 2 replicas if it is HSDP)."""
    rep, shard, tp = PLAN["replicas"], PLAN["shard_group"], PLAN["tp"]
    if PLAN["zero"] == 0:
        # ZeRO-0 (plain data parallelism) runs as torchtitan 0.3.0 runs data_parallel_replicate_degree = dp with
        # data_parallel_shard_degree 1: fully_shard over a (replicate dp, shard 1) mesh, every rank holding the
        # whole state, gradients all-reduced (llama3/parallelize.py: "with shard_degree=1 it is a no-op for the
        # all-gather"). torch's replicate() (DDP) drops the TP DTensors of a TP plan between forwards.
        rep, shard = rep * shard, 1
    if rep * shard * tp == world:
        return rep, shard, tp
    if not ARGS.tiny:
        raise SystemExit(f"the plan is for {rep * shard * tp} ranks, this job has {world}")
    tp = 2 if tp > 1 and world % 2 == 0 else 1
    rep = 2 if rep > 1 and (world // tp) % 2 == 0 else 1
    return rep, world // tp // rep, tp


class Meshes:
    """The data-parallel mesh FSDP shards over (HSDP: replicate x shard) and the TP mesh."""

    def __init__(self, dp, tp, titan_dims=None):
        self.dp, self.tp, self.titan_dims = dp, tp, titan_dims

    def describe(self):
        return {"dp": {"shape": list(self.dp.shape), "dim_names": list(self.dp.mesh_dim_names)},
                "tp": {"shape": list(self.tp.shape), "dim_names": list(self.tp.mesh_dim_names)}}


def build_meshes(world):
    rep, shard, tp = mesh_shape(world)
    log(f"mesh: replicate {rep} x shard {shard} x tp {tp}")
    if ARGS.model_source == "titan" and not ARGS.tiny:
        return titan_meshes(rep, shard, tp, world)
    mesh = init_device_mesh(ARGS.device, (rep, shard, tp), mesh_dim_names=("dp_replicate", "dp_shard", "tp"))
    dp = mesh["dp_replicate", "dp_shard"] if rep > 1 else mesh["dp_shard"]
    return Meshes(dp, mesh["tp"])


def titan_meshes(rep, shard, tp, world):
    """torchtitan 0.3.0's own meshes (distributed/parallel_dims.py ParallelDims.build_mesh), with the
    "partial_dtensor" SPMD backend: DTensor on the TP axis, FSDP over dp_replicate x fsdp, as its
    parallelize_llama / parallelize_qwen3 run it for that backend."""
    from torchtitan.distributed import parallel_dims as pd
    from torchtitan.distributed import utils as dist_utils
    # ParallelDims.build_mesh makes the world mesh on torchtitan.tools.utils.device_type, which is "cuda" on a
    # machine without an accelerator: the device this job runs on instead.
    pd.device_type = ARGS.device
    dist_utils.set_spmd_backend("partial_dtensor")  # what Trainer.__init__ sets from ParallelismConfig
    dims = pd.ParallelDims(dp_replicate=rep, dp_shard=shard, cp=1, tp=tp, pp=1, ep=1, world_size=world,
                           spmd_backend="partial_dtensor")
    dims.build_mesh()
    dp = dims.get_mesh(["dp_replicate", "fsdp"] if rep > 1 else "fsdp")
    tp_mesh = dims._single_axis_meshes["tp"]  # get_mesh("tp") refuses a size-1 axis
    return Meshes(dp, tp_mesh, dims)


)PY";

}  // namespace shardplan

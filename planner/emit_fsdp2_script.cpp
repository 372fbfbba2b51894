// The body of the script `--emit fsdp2` writes: a self-contained PyTorch FSDP2 training script that applies
// the PLAN dict emit_fsdp2 writes above it (planner/emit.cpp) to Hugging Face transformers or torchtitan
// models (or, with --tiny, a tiny model of its own), and prints what it built next to the simulated units
// (SIM_UNITS). Kept as one raw string so the script needs no package; tests/emit runs it (torchrun, gloo,
// CPU).
#include "planner/emit.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptBody;
const char* const kFsdp2ScriptBody = R"PY(
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


# --- the models ------------------------------------------------------------------------------------------------
def hf_path():
    """A local directory with config.json and *.safetensors, or a Hugging Face model id (downloaded once)."""
    if not ARGS.model_path:
        raise SystemExit("--model-source hf needs --model-path (a directory with config.json and safetensors, "
                         "or a Hugging Face model id)")
    if os.path.isdir(ARGS.model_path):
        return ARGS.model_path
    from huggingface_hub import snapshot_download
    return snapshot_download(ARGS.model_path, allow_patterns=["*.json", "*.safetensors"])


def build_hf():
    """The checkpoint's architecture from transformers, on the meta device (no memory): from_config builds the
    same modules from_pretrained would, without loading anything."""
    from transformers import AutoConfig, AutoModelForCausalLM
    path = hf_path()
    kw = {"attention_dropout": PLAN["attention_dropout"]} if PLAN["attention_dropout"] else {}
    config = AutoConfig.from_pretrained(path, **kw)
    with torch.device("meta"):
        # The attention core the plan simulated: sdpa (flash-type kernels) or eager (op by op).
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation="eager" if PLAN["attention"] == "eager" else "sdpa", dtype=torch.float32)
    model.config.use_cache = False  # no KV cache in training
    return model, path


def titan_config():
    """A torchtitan 0.3.0 model config: --model-factory MODULE:FUNCTION returning a Decoder.Config (or a
    ModelSpec), else the registry flavor of the plan's model (torchtitan.models.<module>.model_registry)."""
    if ARGS.model_factory:
        mod, fn = ARGS.model_factory.split(":")
        cfg = getattr(importlib.import_module(mod), fn)()
    elif TITAN_FLAVOR is not None:
        module, flavor = TITAN_FLAVOR
        # FlexAttention (the registry's default) on the GPU; varlen (the FlashAttention kernel) when the plan
        # simulated --sdpa-backend flash (planner/emit.cpp emit_torchtitan writes the same).
        backend = "varlen" if PLAN["sdpa_backend"] == "FLASH_ATTENTION" else "flex"
        cfg = importlib.import_module(f"torchtitan.models.{module}").model_registry(flavor, attn_backend=backend)
    else:
        raise SystemExit("torchtitan 0.3.0 has no flavor of this model's dimensions: pass --model-factory "
                         "MODULE:FUNCTION returning its torchtitan model config")
    return getattr(cfg, "model", cfg)  # ModelSpec.model is the Decoder.Config


def build_titan(meshes, seq):
    """torchtitan's model on the meta device, its TP sharding config filled in as the Trainer does
    (trainer.py: model_config.update_from_config, then build under torch.device("meta"))."""
    from torchtitan.config import ParallelismConfig
    cfg = titan_config()
    par = ParallelismConfig(data_parallel_replicate_degree=meshes.titan_dims.dp_replicate,
                            data_parallel_shard_degree=meshes.titan_dims.dp_shard,
                            tensor_parallel_degree=meshes.titan_dims.tp, spmd_backend="partial_dtensor")
    # Decoder.Config.update_from_config (models/common/decoder.py) checks the TP degree against the heads and,
    # through the model's own override (llama3 / qwen3 model.py), sets each module's sharding_config (the TP
    # plan, with sequence parallelism). Given a Trainer.Config it also cuts the RoPE cache to training.seq_len;
    # given only the parallelism, that is done here.
    cfg.update_from_config(config=types.SimpleNamespace(parallelism=par))
    for layer in cfg.layers:
        attention = getattr(layer, "attention", None)
        if attention is not None and getattr(attention, "rope", None) is not None:
            if seq > attention.rope.max_seq_len:
                raise SystemExit(f"seq {seq} exceeds the model's RoPE max_seq_len {attention.rope.max_seq_len}")
            attention.rope = dataclasses.replace(attention.rope, max_seq_len=seq)
    with torch.device("meta"):
        model = cfg.build()
    return model, cfg


def parts_of(model):
    """(embedding, [(name, block)], final norm, head) of the model, by the family's module names."""
    n = NAMES[ARGS.model_source]
    blocks = get(model, n["blocks"])
    return get(model, n["embed"]), list(blocks.named_children()), get(model, n["norm"]), get(model, n["out"])


def is_moe(model):
    return any(type(m).__name__.endswith(("SparseMoeBlock", "MoE")) for m in model.modules())


# --- tensor parallelism ----------------------------------------------------------------------------------------
def tp_styles():
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    col, row, prep = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if PLAN["fp8"] == "tensorwise" and ARGS.device != "cpu":
        from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                           PrepareFloat8ModuleInput)
        col, row, prep = Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput
    return col, row, prep, SequenceParallel


def apply_tp_hf(model, tp_mesh):
    """Megatron-style TP with sequence parallelism on the Hugging Face decoder, the plan torchtitan runs on its
    own Llama (torchtitan 0.3.0 models/common/decoder_sharding.py: vocab-parallel embedding reduce-scattered to
    the sequence shard, norms sequence-parallel with replicated weights, attention / MLP inputs all-gathered,
    q/k/v and gate/up colwise, o and down rowwise reduce-scattered, the head colwise with vocab-parallel logits
    for the loss). transformers 5.23.0 decoder layers (models/llama/modeling_llama.py LlamaDecoderLayer) call
    self_attn(hidden_states=..., ...) by keyword and mlp(hidden_states) positionally; Qwen3Attention applies
    q_norm / k_norm (RMSNorm over head_dim) to the TP-local heads, so they are sequence-parallel over the heads
    dim with replicated weights, as torchtitan's qwen3/sharding.py shards its qk_norm (weight R, input S(2)).
    Mixture-of-experts blocks have no TP plan here."""
    from torch.distributed.tensor.parallel import parallelize_module
    if is_moe(model):
        raise SystemExit("--tp > 1 with a mixture-of-experts Hugging Face model: this script has no TP plan for "
                         "its experts (use --model-source titan, or --fix tp=1)")
    col, row, prep, sp = tp_styles()
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    plan = {
        "model.embed_tokens": row(input_layouts=Replicate(), output_layouts=Shard(1)),
        # The final norm returns the local sequence shard (transformers slices it before the head).
        "model.norm": sp(use_local_output=True),
        "lm_head": col(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    for i, layer in enumerate(model.model.layers):
        p = f"model.layers.{i}"
        plan.update({
            f"{p}.input_layernorm": sp(),
            f"{p}.self_attn": prep(input_kwarg_layouts={"hidden_states": Shard(1)},
                                   desired_input_kwarg_layouts={"hidden_states": Replicate()},
                                   use_local_output=True),
            f"{p}.self_attn.q_proj": col(), f"{p}.self_attn.k_proj": col(), f"{p}.self_attn.v_proj": col(),
            f"{p}.self_attn.o_proj": row(output_layouts=Shard(1)),
            f"{p}.post_attention_layernorm": sp(),
            f"{p}.mlp": prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True),
            f"{p}.mlp.gate_proj": col(), f"{p}.mlp.up_proj": col(), f"{p}.mlp.down_proj": row(output_layouts=Shard(1)),
        })
        for qk in ("q_norm", "k_norm"):
            if hasattr(layer.self_attn, qk):
                plan[f"{p}.self_attn.{qk}"] = sp(sequence_dim=2, use_local_output=True)
    parallelize_module(model, tp_mesh, plan)
    if tied:  # both were sharded on the vocab dim; one parameter again
        model.lm_head.weight = model.model.embed_tokens.weight


def apply_tp_tiny(model, tp_mesh, n):
    """--tiny: the same plan on the script's own model."""
    from torch.distributed.tensor.parallel import parallelize_module
    col, row, prep, sp = tp_styles()
    parallelize_module(model, tp_mesh, {
        n["embed"]: row(input_layouts=Replicate(), output_layouts=Shard(1)),
        n["norm"]: sp(),
        n["out"]: col(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    if ARGS.model_source == "hf":  # attention is called with hidden_states=...
        attn_in = prep(input_kwarg_layouts={"hidden_states": Shard(1)},
                       desired_input_kwarg_layouts={"hidden_states": Replicate()})
    else:
        attn_in = prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    a, m = n["attn"], n["mlp"]
    for block in get(model, n["blocks"]):
        parallelize_module(block, tp_mesh, {
            n["attn_norm"]: sp(),
            a: attn_in,
            f"{a}.{n['q']}": col(), f"{a}.{n['k']}": col(), f"{a}.{n['v']}": col(),
            f"{a}.{n['o']}": row(output_layouts=Shard(1)),
            n["mlp_norm"]: sp(),
            m: prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            f"{m}.{n['gate']}": col(), f"{m}.{n['up']}": col(),
            f"{m}.{n['down']}": row(output_layouts=Shard(1)),
        })


def apply_tp(model, meshes):
    if ARGS.tiny:
        apply_tp_tiny(model, meshes.tp, NAMES[ARGS.model_source])
    elif ARGS.model_source == "hf":
        apply_tp_hf(model, meshes.tp)
    else:
        # torchtitan's own TP: Module.parallelize (protocols/module.py) shards each module's states and wraps its
        # forward by the sharding_config update_from_config filled in, as parallelize_llama / parallelize_qwen3
        # do for the partial_dtensor backend.
        model.parallelize(meshes.titan_dims)
    if PLAN["async_tp"] and ARGS.device != "cpu":
        # Async TP as torchtitan enables it (torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp):
        # inductor's micro-pipeline pass overlaps the TP collectives of the compiled blocks with their GEMMs,
        # over symmetric memory on the TP group.
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group
        torch._inductor.config._micro_pipeline_tp = True
        enable_symm_mem_for_group(meshes.tp.get_group().group_name)


# --- activation checkpointing ----------------------------------------------------------------------------------
def sac_policy():
    """torchtitan's op-level selective AC (torchtitan 0.3.0 distributed/activation_checkpoint.py SelectiveAC and
    _get_default_save_ops): save the outputs of compute-intensive ops, attention, max, topk and the TP
    reduce-scatters, except every second mm / linear, counted per block; the simulator models exactly this
    (attention outputs, every second matmul output and, under TP, the reduce-scatter outputs saved)."""
    from torch._functorch.partitioners import get_default_op_list
    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    sdpa = ["_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
            "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable"]
    if PLAN["sac_sdpa_ops"] == "flash-efficient":
        # torchtitan before 0.2.1: cuDNN attention is not in the save list, so it is recomputed in backward.
        sdpa.remove("_scaled_dot_product_cudnn_attention")
        if hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention"):
            save.discard(torch.ops.aten._scaled_dot_product_cudnn_attention.default)
    # topk (the MoE router's choice) only for torchtitan's routers: Hugging Face's normalise the top-k values in
    # place (transformers 5.23.0 modeling_mixtral.py MixtralTopKRouter.forward: router_top_value /= ...), which
    # a saved output may not be (torch.utils.checkpoint refuses a mutated cached tensor).
    for name in sdpa + ["linear", "max"] + (["topk"] if ARGS.model_source == "titan" else []):
        if hasattr(torch.ops.aten, name):
            save.add(getattr(torch.ops.aten, name).default)
    save.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    if hasattr(torch._higher_order_ops, "flex_attention"):
        save.add(torch._higher_order_ops.flex_attention)
    mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)

    def make():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if func in mm_ops:
                count[mode] += 1
            if func in save:
                if func in mm_ops and count[mode] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return make


def apply_ac(blocks_container):
    """Every block in a checkpoint_wrapper, as torchtitan's ActivationCheckpointing.apply does (the wrapper
    registered under the block's own name, in a ModuleList or a ModuleDict); RNG state preserved (its
    default), so that dropout recomputes the same mask."""
    if PLAN["ac"] == "none":
        return
    ctx = {"context_fn": sac_policy()} if PLAN["ac"] == "selective" else {}
    for name, block in list(blocks_container.named_children()):
        blocks_container.register_module(name, checkpoint_wrapper(block, preserve_rng_state=True, **ctx))


# --- FSDP ------------------------------------------------------------------------------------------------------
def apply_fsdp(model, meshes):
    embed, blocks, norm, head = parts_of(model)
    # (ZeRO-0: the mesh has a shard dim of 1, see mesh_shape; nothing is resharded.)
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[PLAN["param_dtype"]], reduce_dtype=DTYPES[PLAN["reduce_dtype"]])
    kw = dict(mesh=meshes.dp, mp_policy=mp)
    if PLAN["offload_params"]:
        # Pinned host memory needs CUDA: on --device cpu the policy runs unpinned (the state is on the host anyway,
        # the optimizer steps on the host-side shards as it does with a GPU).
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=ARGS.device != "cpu")
    units = []
    modules = [b for _, b in blocks]
    for i in range(0, len(modules), PLAN["wrap"]):
        group = modules[i:i + PLAN["wrap"]]
        # --keep-last-block: the last unit stays gathered from its forward to its backward (torchtitan's
        # default policy before 2025-07-28).
        last = i + PLAN["wrap"] >= len(modules)
        reshard = PLAN["reshard"] and not (PLAN["keep_last_block"] and last)
        fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=reshard, **kw)
        units.append(group[0])
    tied = head.weight is embed.weight
    if PLAN["root_params"] == "embedding-head":
        # The embedding, final norm and output stay in the root unit, gathered from the forward to the end of
        # backward (torchtitan before 2025-07-28 on a torch that kept the root unsharded).
        fully_shard(model, reshard_after_forward=False, **kw)
    elif tied:
        # One parameter in two modules: one unit for both (torchtitan 0.3.0 distributed/fsdp.py
        # apply_fsdp_to_decoder groups tok_embeddings, norm and lm_head when the weights are tied).
        fully_shard([embed, norm, head], reshard_after_forward=False, **kw)
        fully_shard(model, reshard_after_forward=PLAN["reshard"], **kw)
    else:
        fully_shard([norm, head], reshard_after_forward=False, **kw)
        fully_shard(embed, reshard_after_forward=PLAN["reshard"], **kw)
        fully_shard(model, reshard_after_forward=PLAN["reshard"], **kw)
    if PLAN["prefetch"] > 1:
        # Explicit prefetch of PLAN["prefetch"] units ahead in forward and behind in backward.
        k = PLAN["prefetch"]
        for i, u in enumerate(units):
            u.set_modules_to_forward_prefetch(units[i + 1:i + 1 + k])
            u.set_modules_to_backward_prefetch(list(reversed(units[max(0, i - k):i])))


# --- materialising the sharded model ---------------------------------------------------------------------------
def load_safetensors(model, path):
    """Each parameter from the checkpoint's safetensors files, one at a time: read it (memory-mapped), keep this
    rank's piece of it (distribute_tensor with the parameter's own mesh and placements, FSDP's shard and TP's
    split together, without communication: src_data_rank=None), copy that into the sharded parameter.
    Checkpoint names become parameter names the way transformers' own loader renames and converts them
    (transformers 5.23.0 core_model_loading.py convert_and_load_state_dict_in_model, with the model's
    conversion_mapping.py get_model_conversion_mapping): e.g. Mixtral checkpoints keep one w1 / w2 / w3 per
    expert, which the model holds stacked as experts.gate_up_proj / experts.down_proj; a converted parameter is
    built from its sources (one layer's experts) when it is loaded."""
    import copy
    import functools
    import glob
    from safetensors import safe_open
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import (WeightConverter, WeightRenaming, dot_natural_key,
                                                 rename_source_key)
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise SystemExit(f"no *.safetensors in {path}")
    params = {clean(n): p for n, p in model.named_parameters()}
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    by_pattern = {sp: c for c in converters for sp in c.source_patterns}
    handles = [safe_open(f, framework="pt", device="cpu") for f in files]
    sources = {}  # parameter name -> a loader of its tensor, or the converter collecting its sources
    for key, h in sorted(((k, h) for h in handles for k in h.keys()), key=lambda kh: dot_natural_key(kh[0])):
        name, pattern = rename_source_key(key, renamings, converters, model.base_model_prefix, params)
        if name not in params and key in params:
            name, pattern = key, None
        if name not in params:
            continue
        load = functools.partial(h.get_tensor, key)
        if pattern is None:
            sources[name] = load
        else:
            conv = sources.setdefault(name, copy.deepcopy(by_pattern[pattern]))
            conv.add_tensor(name, key, pattern, load)
    missing = sorted(set(params) - set(sources))
    if missing:
        raise SystemExit(f"parameters not in the checkpoint {path}: {missing[:5]}")
    with torch.no_grad():
        for name, src in sources.items():
            if isinstance(src, WeightConverter):
                out = src.convert(name, model=model, config=model.config)
                full = out[name] if name in out else next(iter(out.values()))
            else:
                full = src()
            p = params[name]
            if tuple(full.shape) != tuple(p.shape):
                raise SystemExit(f"{name}: checkpoint shape {tuple(full.shape)}, model {tuple(p.shape)}")
            full = full.to(p.dtype)
            if isinstance(p, DTensor):
                piece = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
                p.to_local().copy_(piece.to_local())
            else:
                p.copy_(full)
            del full


def reinit_rotary(model, device):
    """The RoPE frequencies are non-persistent buffers (no checkpoint entry; to_empty leaves them
    uninitialised): computed again by each rotary module's own constructor (transformers 5.23.0
    *RotaryEmbedding(config))."""
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "config"):
            fresh = type(m)(m.config).to(device)
            for name, buf in fresh.named_buffers(recurse=False):
                setattr(m, name, buf)


def materialize(model, device):
    """Allocate this rank's shards (to_empty: nothing but the shards ever exists), then fill them: the Hugging
    Face checkpoint's tensors, torchtitan's own initialisation (Decoder.init_weights, trainer.py does the same
    after to_empty), or --tiny's reset_parameters."""
    # FSDP's CPUOffloadPolicy keeps the sharded state on the host; buffers go to the device (trainer.py:
    # init_device "cpu", buffer_device the accelerator, with enable_cpu_offload).
    init_device = torch.device("cpu") if PLAN["offload_params"] else device
    model.to_empty(device=init_device)
    with torch.no_grad():
        if ARGS.tiny:
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        elif ARGS.model_source == "hf":
            load_safetensors(model, HF_PATH)
            reinit_rotary(model, device)
        else:
            model.init_weights(buffer_device=device)
    if PLAN["offload_params"]:
        for m in model.modules():
            for name, buf in list(m.named_buffers(recurse=False)):
                setattr(m, name, buf.to(device))


# --- the step --------------------------------------------------------------------------------------------------
def forward(model, tokens):
    """The logits of one micro-batch, the way each family's training loop calls its model."""
    if ARGS.tiny:
        return model(tokens)
    b, s = tokens.shape
    positions = torch.arange(s, device=tokens.device).unsqueeze(0)
    if ARGS.model_source == "hf":
        # The positions are given: under sequence parallelism the embedding output holds s / tp tokens, from
        # which transformers would otherwise derive positions 0 .. s/tp (LlamaModel.forward), so RoPE would
        # cover the wrong length. An eager core gets its causal mask as a 4-D additive mask over the whole
        # sequence for the same reason (masking_utils create_causal_mask sizes it by the embedding output and
        # returns a 4-D mask as given); SDPA runs is_causal without one.
        mask = None
        if PLAN["attention"] == "eager":
            dtype = DTYPES[PLAN["param_dtype"]] if PLAN["zero"] > 0 else torch.float32
            mask = torch.full((s, s), torch.finfo(dtype).min, dtype=dtype, device=tokens.device).triu(1)[None, None]
        return model(input_ids=tokens, position_ids=positions, attention_mask=mask, use_cache=False).logits
    # torchtitan: FlexAttention / varlen need the block-causal masks of the positions (trainer.py
    # post_dataloading_process: Decoder.get_attention_masks); its SDPA module runs is_causal.
    from torchtitan.models.common.attention import FlexAttention, VarlenAttention
    inner = getattr(TITAN_CFG.first_attention, "inner_attention", None)
    if isinstance(inner, (FlexAttention.Config, VarlenAttention.Config)):
        positions = positions.expand(b, s)
        return model(tokens, positions=positions, attention_masks=model.get_attention_masks(positions=positions))
    return model(tokens)


class GatheredMuon(torch.optim.Optimizer):
    """Muon as shardplan simulates it (Moonlight's distributed Muon, arXiv:2502.16982 Algorithm 1): per matrix the
    momentum update of this rank's shard, gathered whole, orthogonalised on every rank by torch.optim.Muon's
    Newton-Schulz (torch/optim/_muon.py), and this rank's rows applied with Muon's learning-rate adjustment."""

    def __init__(self, params, lr=0.02, momentum=0.95, weight_decay=0.1, ns_steps=5):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS, _adjust_lr, _zeropower_via_newtonschulz
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                sharded = isinstance(p, DTensor)
                local = p.to_local() if sharded else p
                g = p.grad.to_local() if sharded else p.grad
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - group["momentum"])
                update = g.lerp(buf, group["momentum"])  # nesterov
                full = (DTensor.from_local(update, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                        .full_tensor() if sharded else update)
                ortho = _zeropower_via_newtonschulz(full, (DEFAULT_A, DEFAULT_B, DEFAULT_C), group["ns_steps"], EPS)
                if sharded:
                    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
                    ortho = ortho[offset[0]:offset[0] + shape[0]]
                local.mul_(1 - group["lr"] * group["weight_decay"])
                local.add_(ortho, alpha=-_adjust_lr(group["lr"], None, p.shape))
                del update, full, ortho  # one matrix's buffers at a time


class Optimizers:
    """Several optimizers stepped as one (Muon and the AdamW of the other parameters)."""

    def __init__(self, *opts):
        self.opts = opts

    def step(self):
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none=True):
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)


def make_optimizer(model, lr=3e-4, blocks_prefix=""):
    """The plan's optimizer (--optimizer): torch.optim AdamW / Adam / SGD / Adafactor, torchao's AdamW8bit,
    lion-pytorch's Lion, or GatheredMuon on the blocks' matrices with AdamW for the rest."""
    fused = PLAN["fused_optimizer"] and ARGS.device != "cpu"
    impl = {"fused": True} if fused else {"foreach": True}
    name, params = PLAN["optimizer"], list(model.parameters())
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, **impl)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.95), **impl)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=0.1, **impl)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2, weight_decay=0.1, foreach=ARGS.device != "cpu")
    if name == "adamw8bit":
        from torchao.optim import AdamW8bit
        return AdamW8bit(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    if name == "lion":
        from lion_pytorch import Lion
        return Lion(params, lr=lr / 3, betas=(0.9, 0.99), weight_decay=0.1)
    # muon: the blocks' 2-D weights; embeddings, head and norms with AdamW (torch.optim.Muon's documentation)
    named = [(clean(k), v) for k, v in model.named_parameters()]
    matrices = [v for k, v in named if k.startswith(blocks_prefix) and v.ndim == 2]
    rest = [v for k, v in named if not (k.startswith(blocks_prefix) and v.ndim == 2)]
    return Optimizers(GatheredMuon(matrices),
                      torch.optim.AdamW(rest, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, **impl))


def replicas_of(t):
    """How many ranks hold the same copy of this (sharded) tensor: the product of its mesh dims it replicates
    over (HSDP's replicate dim, TP for replicated weights); plain tensors are on every rank."""
    if not isinstance(t, DTensor):
        return dist.get_world_size()
    n = 1
    for i, pl in enumerate(t.placements):
        if isinstance(pl, Replicate):
            n *= t.device_mesh.size(i)
    return n


def grad_norm(model):
    """The global L2 norm of the gradients, from each rank's shards (each copy counted once)."""
    sq = torch.zeros((), dtype=torch.float64, device=DEVICE)
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            n = torch.linalg.vector_norm(g.detach(), dtype=torch.float32).to(sq.device, torch.float64)
            sq += n * n / replicas_of(p.grad)
    dist.all_reduce(sq)
    return sq.sqrt().item()


def fingerprint(model):
    """Per parameter, the first 1,024 values of this rank's shard: enough to see that a step changed the
    parameters (Adam moves every element with a gradient, weight decay every non-zero one), without copying
    them."""
    with torch.no_grad():
        return [(p.to_local() if isinstance(p, DTensor) else p).detach().flatten()[:1024].clone()
                for p in model.parameters()]


# --- what was built --------------------------------------------------------------------------------------------
def tp_dim_of(t):
    """The tensor dim TP splits this parameter on, or None (replicated, or no TP)."""
    if not isinstance(t, DTensor) or "tp" not in (t.device_mesh.mesh_dim_names or ()):
        return None
    i = t.device_mesh.mesh_dim_names.index("tp")
    if t.device_mesh.size(i) == 1:
        return None
    pl = t.placements[i]
    return pl.dim if hasattr(pl, "dim") and not isinstance(pl, Replicate) else None


def fsdp_units(model):
    """The FSDP units (one per fully_shard call): their modules, parameters, and parameter counts: global,
    TP-local (the TP shard FSDP shards further: FSDPParam._orig_size, torch 2.15
    distributed/fsdp/_fully_shard/_fsdp_param.py) split by TP dim, and this rank's shard."""
    order = {id(p): i for i, p in enumerate(model.parameters())}
    states = {}
    for fqn, m in model.named_modules():
        if not hasattr(m, "_get_fsdp_state"):
            continue
        st = m._get_fsdp_state()
        states.setdefault(id(st), (st, []))[1].append(clean(fqn))
    units = []
    for st, modules in states.values():
        g = st._fsdp_param_group
        fps = list(g.fsdp_params) if g is not None else []
        u = dict(modules=modules, params=[clean(fp._param_fqn) for fp in fps], global_elems=0, tp_local_elems=0,
                 local_elems=0, tp_dim0=0, tp_dim1=0, tp_replicated=0,
                 reshard_after_forward=bool(g is not None and g.post_forward_mesh_info is not None))
        for fp in fps:
            sp = fp.sharded_param
            tp_local = fp._orig_size.numel()
            u["global_elems"] += sp.numel()
            u["tp_local_elems"] += tp_local
            u["local_elems"] += sp.to_local().numel() if isinstance(sp, DTensor) else sp.numel()
            d = tp_dim_of(sp)
            u["tp_dim0" if d == 0 else "tp_dim1" if d == 1 else "tp_replicated"] += tp_local
        u["_first"] = min((order.get(id(fp.sharded_param), 1 << 30) for fp in fps), default=1 << 30)
        units.append(u)
    units.sort(key=lambda u: u.pop("_first"))
    return units


def ac_wrappers(model):
    """The checkpoint wrappers: the module each wraps, and whether it recomputes everything (full) or follows a
    selective policy (a context_fn given to torch.utils.checkpoint)."""
    out = []
    for fqn, m in model.named_modules():
        if isinstance(m, CheckpointWrapper):
            kw = getattr(m.checkpoint_fn, "keywords", {})
            out.append({"module": clean(fqn), "mode": "selective" if "context_fn" in kw else "full"})
    return out


def tp_plan(model):
    """Per module with TP-sharded or TP-replicated parameters, the style its parameters show: colwise / rowwise
    (a linear's weight split on dim 0 / 1), vocab (an embedding split on the vocab dim), replicate (a norm's
    weight on the TP mesh, sequence-parallel)."""
    plan = {}
    for fqn, m in model.named_modules():
        styles = set()
        for name, p in m.named_parameters(recurse=False):
            if not isinstance(p, DTensor) or "tp" not in (p.device_mesh.mesh_dim_names or ()):
                continue
            if p.device_mesh.size(p.device_mesh.mesh_dim_names.index("tp")) == 1:
                continue
            d = tp_dim_of(p)
            if d is None:
                styles.add("replicate")
            elif isinstance(m, nn.Embedding):
                styles.add("vocab")
            elif name == "weight":
                styles.add("colwise" if d == 0 else "rowwise")
        if styles:
            plan[clean(fqn)] = "+".join(sorted(styles))
    return plan


def main():
    global ARGS, DEVICE, HF_PATH, TITAN_CFG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-source", choices=["hf", "titan"], default="hf")
    ap.add_argument("--model-path", default="", help="hf: a directory with config.json and *.safetensors, or a "
                    "Hugging Face model id")
    ap.add_argument("--model-factory", default="", help="titan: MODULE:FUNCTION returning the torchtitan model "
                    "config (default: the registry flavor of the plan's model)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model of the same family, built locally")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ARGS = ap.parse_args()
    backend = "gloo" if ARGS.device == "cpu" else "nccl"
    dist.init_process_group(backend)
    world, rank = dist.get_world_size(), dist.get_rank()
    if ARGS.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        DEVICE = torch.device("cuda", torch.cuda.current_device())
    else:
        DEVICE = torch.device("cpu")
    torch.manual_seed(0)
    meshes = build_meshes(world)
    rep, shard, tp = mesh_shape(world)
    seq = 16 if ARGS.tiny else PLAN["seq"]
    mbs = 2 if ARGS.tiny else PLAN["mbs"]
    accum = 1 if ARGS.tiny else PLAN["grad_accum"]

    # 1. The model on the meta device: parameters without memory.
    if ARGS.tiny:
        with torch.device("meta"):
            model = TinyModel(ARGS.model_source)
        vocab = model.vocab
    elif ARGS.model_source == "hf":
        model, HF_PATH = build_hf()
        vocab = model.config.vocab_size
    else:
        if PLAN["attention"] != "flash" or PLAN["attention_dropout"]:
            log(f"note: the plan simulated {PLAN['attention']} attention with dropout {PLAN['attention_dropout']}; "
                "torchtitan's model attends as its config says")
        model, TITAN_CFG = build_titan(meshes, seq)
        vocab = TITAN_CFG.vocab_size
    # 2. float8, TP, AC, compile, FSDP: the plan, applied to the meta model (torchtitan's order, parallelize.py).
    n = NAMES[ARGS.model_source]
    if PLAN["fp8"] != "none":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        cfg = (Float8LinearConfig.from_recipe_name("rowwise") if PLAN["fp8"] == "rowwise" else
               Float8LinearConfig(enable_fsdp_float8_all_gather=PLAN["fp8_all_gather"]))
        if ARGS.device == "cpu":
            # The CPU has no float8 GEMM: torchao's emulation casts and scales to float8 exactly as on the GPU and
            # multiplies in high precision (Float8LinearConfig.emulate), so the float8 path itself runs.
            log("note: float8 GEMMs emulated on --device cpu (torchao Float8LinearConfig emulate=True)")
            cfg = dataclasses.replace(cfg, emulate=True)
        blocks_prefix = n["blocks"] + "."
        convert_to_float8_training(model, config=cfg, module_filter_fn=lambda m, fqn: fqn.startswith(blocks_prefix))
    if tp > 1:
        apply_tp(model, meshes)
    blocks = get(model, n["blocks"])
    apply_ac(blocks)
    if PLAN["compile"] and ARGS.device != "cpu":
        for name, block in list(blocks.named_children()):
            blocks.register_module(name, torch.compile(block))
    if PLAN["precision"] in ("bf16", "bf16-true"):
        model.to(torch.bfloat16)  # parameters, gradients and optimizer state in bf16
    apply_fsdp(model, meshes)
    # 3. This rank's shards, filled from the checkpoint or initialised.
    materialize(model, DEVICE)
    model.train()
    opt = make_optimizer(model, blocks_prefix=n["blocks"] + ".")
    before = fingerprint(model)

    gen = torch.Generator().manual_seed(1000 + rank // tp)  # one data stream per data-parallel rank
    loss_fn = F.cross_entropy
    if PLAN["compile_loss"] and ARGS.device != "cpu":
        loss_fn = torch.compile(F.cross_entropy)  # the compiled loss the plan simulated

    def attention_kernel():
        # The SDPA kernel the plan simulated (--sdpa-backend); otherwise torch's choice. The CPU has none of them.
        if PLAN["sdpa_backend"] is None or ARGS.device == "cpu":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, PLAN["sdpa_backend"]))

    # fp16-mixed: dynamic loss scaling with FSDP's ShardedGradScaler (torch 2.15
    # torch/distributed/fsdp/sharded_grad_scaler.py; init_scale 2**16, growth_interval 2000): the loss is scaled
    # before backward, unscale_ checks and unscales this rank's gradient shards and all-reduces found_inf over the
    # ranks, step() skips the optimizer step on inf/nan, update() adjusts the scale.
    scaler = None
    if PLAN["precision"] == "fp16-mixed":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        scaler = ShardedGradScaler(device=DEVICE.type)
    opts = opt.opts if isinstance(opt, Optimizers) else (opt,)
    scale_steps = []

    losses, norms = [], []
    for step in range(ARGS.steps):
        # One step's batch for this data-parallel rank, cut into `accum` micro-batches of `mbs` sequences.
        batch = torch.randint(0, vocab, (mbs * accum, seq + 1), generator=gen).to(DEVICE)
        step_loss = 0.0
        for tokens in batch.split(mbs):
            logits = None
            with attention_kernel():
                # --activation-offload all: every tensor the model's forward saves goes to pinned host memory
                # (torch.autograd.graph.save_on_cpu); the loss runs outside it.
                offload = PLAN.get("activation_offload") == "all"
                with (torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext()):
                    logits = forward(model, tokens[:, :-1])
                # Vocab-parallel logits (TP: the head's output sharded on the vocab dim) go to a vocab-parallel
                # cross-entropy (torch.distributed.tensor.parallel.loss_parallel), forward and backward.
                parallel = isinstance(logits, DTensor) and any(isinstance(p, Shard) for p in logits.placements)
                with (torch.distributed.tensor.parallel.loss_parallel() if parallel else contextlib.nullcontext()):
                    if PLAN["loss_dtype"] == "fp32":
                        logits = logits.float()
                    # The mean over the micro-batch's tokens, divided by the micro-batches of the step: the
                    # accumulated gradient is the step's mean (torchtitan trainer.py: the sum loss over the global
                    # token count of all micro-batches).
                    loss = loss_fn(logits.flatten(0, 1), tokens[:, 1:].flatten()) / accum
                    if not PLAN["hold_logits"]:
                        del logits  # torchtitan's `del pred`: the logits do not live through backward
                    (scaler.scale(loss) if scaler else loss).backward()
            step_loss += (loss.full_tensor() if isinstance(loss, DTensor) else loss).item()
        if scaler:
            for o in opts:
                scaler.unscale_(o)
        norms.append(grad_norm(model))
        if scaler:
            for o in opts:
                scaler.step(o)
            scale_steps.append(scaler.get_scale())
            scaler.update()
        else:
            opt.step()
        # set_to_none=False keeps the gradients allocated across steps (--zero-grad-in-place).
        opt.zero_grad(set_to_none=not PLAN["zero_grad_in_place"])
        losses.append(step_loss)
    changed = any(not torch.equal(a, b) for a, b in zip(before, fingerprint(model)))
    finite = all(torch.isfinite(torch.tensor(losses)).tolist())
    float8_linears = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    # FSDPParam.offload_to_cpu: the CPUOffloadPolicy reached the sharded parameters.
    groups = [m._get_fsdp_state()._fsdp_param_group for m in model.modules() if hasattr(m, "_get_fsdp_state")]
    offloaded = any(p.offload_to_cpu for g in groups if g is not None for p in g.fsdp_params)
    built = {"fsdp_units": fsdp_units(model), "ac": ac_wrappers(model), "tp_plan": tp_plan(model),
             "meshes": meshes.describe(), "micro_batches": {"mbs": mbs, "grad_accum": accum, "seq": seq,
                                                            "loss_scale": 1.0 / accum}}
    if rank == 0:
        print(json.dumps({"losses": losses, "grad_norms": norms, "loss_finite": finite, "params_changed": changed,
                          "mesh": [rep, shard, tp], "float8_linears": float8_linears,
                          "cpu_offload_policy": offloaded, "loss_scales": scale_steps, "built": built}),
              flush=True)
    # Every rank finishes its collectives before the group goes away (a rank tearing down gloo while another still
    # gathers aborts with "terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if finite and changed else 1)


ARGS = argparse.Namespace(tiny=False, device="cuda", model_source="hf")
DEVICE = torch.device("cpu")
HF_PATH = None
TITAN_CFG = None
if __name__ == "__main__":
    main()
)PY";

}  // namespace shardplan

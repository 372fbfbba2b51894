// The body of the script `--emit fsdp2` writes: a self-contained PyTorch FSDP2 training script that applies
// the PLAN dict emit_fsdp2 writes above it (planner/emit.cpp). Kept as one raw string so the script needs no
// package.
#include "planner/emit.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptBody;
const char* const kFsdp2ScriptBody = R"PY(
import argparse
import contextlib
import functools
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

# Module names of the two supported model families (--model-source).
NAMES = {
    "hf": dict(blocks="model.layers", embed="model.embed_tokens", norm="model.norm", out="lm_head",
               attn="self_attn", mlp="mlp", q="q_proj", k="k_proj", v="v_proj", o="o_proj", gate="gate_proj",
               up="up_proj", down="down_proj", attn_norm="input_layernorm", mlp_norm="post_attention_layernorm"),
    "titan": dict(blocks="layers", embed="tok_embeddings", norm="norm", out="output", attn="attention",
                  mlp="feed_forward", q="wq", k="wk", v="wv", o="wo", gate="w1", up="w3", down="w2",
                  attn_norm="attention_norm", mlp_norm="ffn_norm"),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def log(msg):
    if int(os.environ.get("RANK", "0")) == 0:
        print(msg, file=sys.stderr, flush=True)


def get(root, dotted):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


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
    layers / output)."""

    def __init__(self, source, vocab=256, dim=64, layers=4, heads=4, kv_heads=2, hidden=128):
        super().__init__()
        n = NAMES[source]
        self.n = n
        if source == "hf":
            self.model = _Body(n, vocab, dim, layers, heads, kv_heads, hidden)
            self.lm_head = nn.Linear(dim, vocab, bias=False)
        else:
            self.tok_embeddings = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(_Block(n, dim, heads, kv_heads, hidden) for _ in range(layers))
            self.norm = nn.RMSNorm(dim)
            self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        n = self.n
        h = get(self, n["embed"])(tokens)
        for block in get(self, n["blocks"]):
            h = block(h)
        return get(self, n["out"])(get(self, n["norm"])(h))


# --- the plan -------------------------------------------------------------------------------------------------
def mesh_shape(world):
    """(replicate, shard, tp) of the plan; with --tiny on fewer ranks the same structure at the smallest size
    (TP 2 if the plan has TP, 2 replicas if it is HSDP)."""
    rep, shard, tp = PLAN["replicas"], PLAN["shard_group"], PLAN["tp"]
    if rep * shard * tp == world:
        return rep, shard, tp
    if not ARGS.tiny:
        raise SystemExit(f"the plan is for {rep * shard * tp} ranks, this job has {world}")
    tp = 2 if tp > 1 and world % 2 == 0 else 1
    rep = 2 if rep > 1 and (world // tp) % 2 == 0 else 1
    return rep, world // tp // rep, tp


def build_mesh(world, device):
    rep, shard, tp = mesh_shape(world)
    log(f"mesh: replicate {rep} x shard {shard} x tp {tp}")
    return init_device_mesh(device, (rep, shard, tp), mesh_dim_names=("dp_replicate", "dp_shard", "tp"))


def apply_tp(model, tp_mesh, n):
    """Tensor parallelism with sequence parallel on the norms (torchtitan's Llama plan)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    col, row, prep = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if PLAN["fp8"] == "tensorwise" and ARGS.device != "cpu":
        from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                           PrepareFloat8ModuleInput)
        col, row, prep = Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput
    parallelize_module(model, tp_mesh, {
        n["embed"]: RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        n["norm"]: SequenceParallel(),
        n["out"]: ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    if ARGS.model_source == "hf":  # attention is called with hidden_states=...
        attn_in = prep(input_kwarg_layouts={"hidden_states": Shard(1)},
                       desired_input_kwarg_layouts={"hidden_states": Replicate()})
    else:
        attn_in = prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    a, m = n["attn"], n["mlp"]
    for block in get(model, n["blocks"]):
        parallelize_module(block, tp_mesh, {
            n["attn_norm"]: SequenceParallel(),
            a: attn_in,
            f"{a}.{n['q']}": col(), f"{a}.{n['k']}": col(), f"{a}.{n['v']}": col(),
            f"{a}.{n['o']}": row(output_layouts=Shard(1)),
            n["mlp_norm"]: SequenceParallel(),
            m: prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            f"{m}.{n['gate']}": col(), f"{m}.{n['up']}": col(),
            f"{m}.{n['down']}": row(output_layouts=Shard(1)),
        })
    if PLAN["async_tp"] and ARGS.device != "cpu":
        # Async TP as torchtitan enables it (torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp):
        # inductor's micro-pipeline pass overlaps the TP collectives of the compiled blocks with their GEMMs,
        # over symmetric memory on the TP group.
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group
        torch._inductor.config._micro_pipeline_tp = True
        enable_symm_mem_for_group(tp_mesh.get_group().group_name)


def sac_policy():
    """torchtitan's op-level selective AC (torchtitan/distributed/activation_checkpoint.py, v0.3.0): save the
    outputs of compute-intensive ops and attention, except every second mm / linear, counted per block; the
    simulator models exactly this (attention outputs and every second matmul output saved)."""
    from torch._functorch.partitioners import get_default_op_list
    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    sdpa = ["_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
            "_scaled_dot_product_flash_attention_for_cpu"]
    if PLAN["sac_sdpa_ops"] == "flash-efficient":
        # torchtitan before 0.2.1: cuDNN attention is not in the save list, so it is recomputed in backward.
        sdpa.remove("_scaled_dot_product_cudnn_attention")
        if hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention"):
            save.discard(torch.ops.aten._scaled_dot_product_cudnn_attention.default)
    for name in sdpa + ["linear", "max"]:
        if hasattr(torch.ops.aten, name):
            save.add(getattr(torch.ops.aten, name).default)
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


def apply_plan(model, mesh, source):
    n = NAMES[source]
    if PLAN["fp8"] != "none":
        import dataclasses
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
    if mesh["tp"].size() > 1:
        apply_tp(model, mesh["tp"], n)
    blocks = get(model, n["blocks"])
    if PLAN["ac"] != "none":
        ctx = {"context_fn": sac_policy()} if PLAN["ac"] == "selective" else {}
        for i in range(len(blocks)):
            blocks[i] = checkpoint_wrapper(blocks[i], preserve_rng_state=False, **ctx)
    if PLAN["compile"] and ARGS.device != "cpu":
        for i in range(len(blocks)):
            blocks[i] = torch.compile(blocks[i])
    if PLAN["precision"] in ("bf16", "bf16-true"):
        model.to(torch.bfloat16)  # parameters, gradients and optimizer state in bf16
    if PLAN["zero"] == 0:
        # ZeRO-0 is plain data parallel: every rank holds the full state (FSDP2's replicate()).
        from torch.distributed._composable.replicate import replicate
        replicate(model, device_mesh=mesh["dp_replicate", "dp_shard"]._flatten("dp"))
        return model
    dp_mesh = mesh["dp_replicate", "dp_shard"] if mesh["dp_replicate"].size() > 1 else mesh["dp_shard"]
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[PLAN["param_dtype"]], reduce_dtype=DTYPES[PLAN["reduce_dtype"]])
    kw = dict(mesh=dp_mesh, mp_policy=mp)
    if PLAN["offload_params"]:
        # Pinned host memory needs CUDA: on --device cpu the policy runs unpinned (the state is on the host anyway,
        # the optimizer steps on the host-side shards as it does with a GPU).
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=ARGS.device != "cpu")
    units = []
    for i in range(0, len(blocks), PLAN["wrap"]):
        group = list(blocks[i:i + PLAN["wrap"]])
        # --keep-last-block: the last unit stays gathered from its forward to its backward (torchtitan's
        # default policy before 2025-07-28).
        last = i + PLAN["wrap"] >= len(blocks)
        reshard = PLAN["reshard"] and not (PLAN["keep_last_block"] and last)
        fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=reshard, **kw)
        units.append(group[0])
    if PLAN["root_params"] == "embedding-head":
        # The embedding, final norm and output stay in the root unit, gathered from the forward to the end of
        # backward (torchtitan before 2025-07-28 on a torch that kept the root unsharded).
        fully_shard(model, reshard_after_forward=False, **kw)
    else:
        fully_shard([get(model, n["norm"]), get(model, n["out"])], reshard_after_forward=False, **kw)
        fully_shard(get(model, n["embed"]), reshard_after_forward=PLAN["reshard"], **kw)
        fully_shard(model, reshard_after_forward=PLAN["reshard"], **kw)
    if PLAN["prefetch"] > 1:
        # Explicit prefetch of PLAN["prefetch"] units ahead in forward and behind in backward.
        k = PLAN["prefetch"]
        for i, u in enumerate(units):
            u.set_modules_to_forward_prefetch(units[i + 1:i + 1 + k])
            u.set_modules_to_backward_prefetch(list(reversed(units[max(0, i - k):i])))
    return model


def make_optimizer(model, lr=3e-4):
    fused = PLAN["fused_optimizer"] and ARGS.device != "cpu"
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1,
                             **({"fused": True} if fused else {"foreach": True}))


def load_model(source):
    if ARGS.tiny:
        return TinyModel(source)
    if source == "hf":
        from transformers import AutoModelForCausalLM
        # The attention core the plan simulated: sdpa (flash-type kernels) or eager (op by op); a config
        # attribute given to from_pretrained (attention_dropout) overrides the checkpoint's.
        kw = {"attention_dropout": PLAN["attention_dropout"]} if PLAN["attention_dropout"] else {}
        return AutoModelForCausalLM.from_pretrained(ARGS.model_path, torch_dtype=torch.float32,
                                                    attn_implementation="eager" if PLAN["attention"] == "eager"
                                                    else "sdpa", **kw)
    if not ARGS.model_factory:
        raise SystemExit("--model-source titan needs --model-factory MODULE:FUNCTION returning the torchtitan model")
    if PLAN["attention"] != "flash" or PLAN["attention_dropout"]:
        log(f"note: the plan simulated {PLAN['attention']} attention with dropout {PLAN['attention_dropout']}; "
            "the factory's model attends as its code says")
    import importlib
    mod, fn = ARGS.model_factory.split(":")
    return getattr(importlib.import_module(mod), fn)()


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model-source", choices=["hf", "titan"], default="hf")
    ap.add_argument("--model-path", default="", help="Hugging Face model id or directory (hf)")
    ap.add_argument("--model-factory", default="", help="MODULE:FUNCTION building the torchtitan model (titan)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model of the same family, built locally")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ARGS = ap.parse_args()
    backend = "gloo" if ARGS.device == "cpu" else "nccl"
    dist.init_process_group(backend)
    world, rank = dist.get_world_size(), dist.get_rank()
    if ARGS.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.manual_seed(0)
    mesh = build_mesh(world, ARGS.device)
    model = load_model(ARGS.model_source)
    if ARGS.device == "cuda" and not PLAN["offload_params"]:
        model.cuda()
    model = apply_plan(model, mesh, ARGS.model_source)
    opt = make_optimizer(model)
    before = [p.detach().full_tensor().clone() if hasattr(p, "full_tensor") else p.detach().clone()
              for p in model.parameters()]
    seq = 16 if ARGS.tiny else PLAN["seq"]
    vocab = get(model, NAMES[ARGS.model_source]["out"]).weight.shape[0]
    if hasattr(get(model, NAMES[ARGS.model_source]["out"]).weight, "full_tensor"):
        vocab = get(model, NAMES[ARGS.model_source]["out"]).weight.full_tensor().shape[0]
    dp_rank = mesh["dp_replicate", "dp_shard"]._flatten("dp_data").get_local_rank()
    gen = torch.Generator().manual_seed(1000 + dp_rank)
    loss_fn = F.cross_entropy
    if PLAN["compile_loss"] and ARGS.device != "cpu":
        loss_fn = torch.compile(F.cross_entropy)  # the compiled loss the plan simulated

    def attention_kernel():
        # The SDPA kernel the plan simulated (--sdpa-backend); otherwise torch's choice. The CPU has none of them.
        if PLAN["sdpa_backend"] is None or ARGS.device == "cpu":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, PLAN["sdpa_backend"]))

    losses = []
    for step in range(ARGS.steps):
        for _ in range(PLAN["grad_accum"] if not ARGS.tiny else 1):
            tokens = torch.randint(0, vocab, (PLAN["mbs"] if not ARGS.tiny else 2, seq + 1), generator=gen)
            tokens = tokens.to(ARGS.device)
            with attention_kernel():
                logits = model(tokens[:, :-1])
                if PLAN["loss_dtype"] == "fp32":
                    logits = logits.float()
                loss = loss_fn(logits.flatten(0, 1), tokens[:, 1:].flatten())
                if not PLAN["hold_logits"]:
                    del logits  # torchtitan's `del pred`: the logits do not live through backward
                loss.backward()
        opt.step()
        # set_to_none=False keeps the gradients allocated across steps (--zero-grad-in-place).
        opt.zero_grad(set_to_none=not PLAN["zero_grad_in_place"])
        losses.append(loss.item())
    after = [p.detach().full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in model.parameters()]
    changed = any(not torch.equal(a.float().cpu(), b.float().cpu()) for a, b in zip(before, after))
    finite = all(torch.isfinite(torch.tensor(losses)).tolist())
    float8_linears = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    # FSDPParam.offload_to_cpu: the CPUOffloadPolicy reached the sharded parameters.
    groups = [m._get_fsdp_state()._fsdp_param_group for m in model.modules() if hasattr(m, "_get_fsdp_state")]
    offloaded = any(p.offload_to_cpu for g in groups if g is not None for p in g.fsdp_params)
    if rank == 0:
        print(json.dumps({"losses": losses, "loss_finite": finite, "params_changed": changed,
                          "mesh": list(mesh_shape(world)), "float8_linears": float8_linears,
                          "cpu_offload_policy": offloaded}), flush=True)
    # Every rank finishes its collectives before the group goes away (a rank tearing down gloo while another still
    # gathers aborts with "terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if finite and changed else 1)


ARGS = argparse.Namespace(tiny=False, device="cuda", model_source="hf")
if __name__ == "__main__":
    main()
)PY";

}  // namespace shardplan

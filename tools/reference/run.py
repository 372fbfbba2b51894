#!/usr/bin/env python3
"""The reference lane: runs the real PyTorch training step of a shardplan model (FSDP2, FSDP1 or DDP; optionally
torchao float8 or DTensor TP) as rank 0 of a world of N (fake process group, fake tensors: no real memory, no GPU)
and records every allocation and free with its category and phase; writes a shardplan.run/1 record
(measured.peak_allocated_bytes) and optionally the trace.

Usage: run.py --model M --gpus N [PLAN-FLAGS as `shardplan simulate`] -o RECORD.json [--trace TRACE.json]
       run.py --batch CONFIGS.txt --out-dir DIR   (every line "MODEL GPUS FLAGS", one process)
Unsupported plans exit 2 with one line on stderr. See docs/reference-lane.md.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class PlanError(Exception):
    """A plan or model the reference lane cannot run: exit 2 with one line."""


# ---------------------------------------------------------------------------------------------------------------
# Model spec (simulator/model/model_spec.cpp reads the same fields with the same defaults).


def load_spec(model: str) -> tuple[dict, str | dict]:
    """Returns (spec, record_model): record_model is the preset name or the inline spec."""
    path = Path(model)
    if path.suffix == ".json" and path.is_file():
        try:
            spec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PlanError(f"{model}: cannot read model spec: {e}")
        return spec, spec
    preset = ROOT / "models" / f"{model}.json"
    if not preset.is_file():
        raise PlanError(f"--model: no preset \"{model}\" in models/ and no such spec file")
    return json.loads(preset.read_text()), model


def normalize_spec(spec: dict) -> dict:
    s = dict(spec)
    for key in ("layers", "hidden", "heads", "ffn_hidden", "vocab"):
        if not isinstance(s.get(key), int) or s[key] < 1:
            raise PlanError(f"model spec: field \"{key}\" must be a positive integer")
    s.setdefault("kv_heads", s["heads"])
    s.setdefault("head_dim", s["hidden"] // s["heads"])
    s.setdefault("mlp", "swiglu")
    s.setdefault("norm", "rmsnorm")
    s.setdefault("norm_bias", s["norm"] == "layernorm")
    s.setdefault("positions", "rotary")
    s.setdefault("seq", 4096)
    unsupported = []
    if s["mlp"] not in ("swiglu", "gelu"):
        unsupported.append(f"mlp {s['mlp']}")
    if s["norm"] not in ("rmsnorm", "layernorm"):
        unsupported.append(f"norm {s['norm']}")
    if s["norm"] == "rmsnorm" and s["norm_bias"]:
        unsupported.append("rmsnorm with bias")
    if s.get("mlp_bias"):
        unsupported.append("mlp biases")
    if s["positions"] not in ("rotary", "alibi"):
        unsupported.append(f"positions {s['positions']}")
    moe = s.get("moe") or {}
    if moe and (moe.get("shared_experts") or moe.get("router_bias") or moe.get("first_dense")
                or moe.get("dense_layers") or moe.get("interval", 1) != 1 or moe.get("ffn_hidden")):
        unsupported.append("moe beyond top-k routed experts in every block (Mixtral)")
    if moe and s["mlp"] != "swiglu":
        unsupported.append("moe with gelu experts")
    for key in ("fused_qkv", "fused_gate_up", "mla", "norm_placement", "attn_softcap", "final_softcap"):
        if s.get(key) not in (None, False, "pre", 0):
            unsupported.append(key)
    if s.get("qk_norm") not in (None, "none"):
        unsupported.append("qk_norm")
    if s.get("sliding_window") or s.get("window"):
        unsupported.append("sliding window")
    if s.get("embedding_norm"):
        unsupported.append("embedding_norm")
    if s["heads"] % s["kv_heads"]:
        unsupported.append("heads not a multiple of kv_heads")
    if s["head_dim"] % 2 and s["positions"] == "rotary":
        unsupported.append("odd head_dim (rotary)")
    if unsupported:
        raise PlanError(f"model {s.get('name', 'custom')}: not a decoder the reference lane builds "
                        f"({', '.join(unsupported)})")
    return s


def param_count(s: dict) -> int:
    """Closed form of the modules built below (same tensors as the simulator's graph, simulator/model/model_graph.cpp)."""
    h, hd, q, kv, f, v = s["hidden"], s["head_dim"], s["heads"], s["kv_heads"], s["ffn_hidden"], s["vocab"]
    norm = 2 * h if s["norm_bias"] else h
    attn = h * q * hd + 2 * h * kv * hd + q * hd * h
    if s.get("attn_bias"):
        attn += q * hd + 2 * kv * hd + (0 if s.get("qkv_bias_only") else h)
    mlp = (3 if s["mlp"] == "swiglu" else 2) * h * f
    if s.get("moe"):
        mlp = s["moe"]["experts"] * (mlp + h)  # experts' MLPs and the router's row per expert
    block = attn + mlp + 2 * norm
    head = 0 if s.get("tied_embeddings") else v * h
    return v * h + s["layers"] * block + norm + head


# ---------------------------------------------------------------------------------------------------------------
# Plan flags (planner/cli/common.cpp add_plan_options; defaults from planner/cli/common.hpp PlanFlags).


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="llama3-70b")
    p.add_argument("--cluster", default="dgx-h100", help="written to the record only")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--runtime", default="fsdp2")
    p.add_argument("--zero", type=int, default=3)
    p.add_argument("--shard-group", type=int, default=0)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=0)
    p.add_argument("--global-batch", type=int, default=0)
    p.add_argument("--ac", default="none")
    p.add_argument("--wrap", type=int, default=1)
    p.add_argument("--prefetch", type=int, default=1)
    p.add_argument("--reshard-after-forward", default=None)
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--reduce-dtype", default=None)
    p.add_argument("--offload", default="none")
    p.add_argument("--async-tp", action="store_true")
    p.add_argument("--foreach-optimizer", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--hold-logits", action="store_true")
    p.add_argument("--root-params", default="none",
                   help="FSDP2 root unit's parameters: none (torchtitan 0.3.0) or embedding-head (torchtitan "
                        "before 83e694105, 2025-07-28)")
    p.add_argument("--keep-last-block", action="store_true",
                   help="the last block is not resharded after forward (torchtitan before 2025-07-28)")
    p.add_argument("--loss-dtype", default="fp32")
    p.add_argument("--fp8", default="none")
    p.add_argument("--fp8-all-gather", action="store_true")
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--pp-schedule", default="1f1b")
    p.add_argument("--virtual-stages", type=int, default=0)
    p.add_argument("--pp-layers", default="")
    p.add_argument("--pp-rank", type=int, default=-1,
                   help="pipeline rank run and measured (default: the last; shardplan validate compares the "
                        "record with that rank's peak)")
    p.add_argument("--steps", type=int, default=1,
                   help="training steps measured (default 1), after an optimizer warm-up that creates the AdamW "
                        "states as a first step would (see --warmup)")
    p.add_argument("--warmup", default="init", choices=("init", "step"),
                   help="init (default): zero gradients + one optimizer step, no forward/backward; step: one full "
                        "training step (slow; same state after it)")
    p.add_argument("--layers", type=int, default=0,
                   help="override the model's number of blocks (a shallower model of the same widths; the record "
                        "carries the modified spec inline)")
    p.add_argument("--no-clip", action="store_true", help="skip clip_grad_norm_ (torchtitan clips by default)")
    p.add_argument("--id", default=None, help="record id (default: derived from the plan)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--trace", default=None)

    def error(msg):
        raise PlanError(msg)

    p.error = error
    return p.parse_args(argv)


def resolve_plan(a, spec) -> dict:
    def bad(flag, why):
        raise PlanError(f"{flag}: {why}")

    if a.gpus < 1:
        bad("--gpus", "must be >= 1")
    if a.steps < 1:
        bad("--steps", "must be >= 1")
    if a.mbs < 1:
        bad("--mbs", "must be >= 1")
    if a.grad_accum < 0:
        bad("--grad-accum", "must be >= 1")
    if a.global_batch and a.grad_accum:
        bad("--global-batch", "give --global-batch or --grad-accum, not both")
    if a.ac not in ("none", "selective", "full"):
        bad("--ac", f"unknown value \"{a.ac}\"; expected none | selective | full")
    if a.precision not in ("bf16-mixed", "bf16", "bf16-true", "fp32", "fp16-mixed"):
        bad("--precision", f"unknown value \"{a.precision}\"")
    if a.precision == "fp16-mixed" and (a.runtime != "fsdp2" or a.zero not in (2, 3) or a.pp > 1 or a.tp > 1
                                        or a.fp8 != "none"):
        bad("--precision", "fp16-mixed is covered with FSDP2 ZeRO-2/3 without PP, TP or float8 only")
    if a.loss_dtype not in ("fp32", "bf16"):
        bad("--loss-dtype", f"unknown value \"{a.loss_dtype}\"")
    if a.runtime not in ("fsdp2", "fsdp1", "deepspeed"):
        bad("--runtime", f"unknown value \"{a.runtime}\"")
    # What the reference lane does not run yet (docs/reference-lane.md, "Not covered"). ZeRO-0 is plain data
    # parallel: torch.nn.parallel.DistributedDataParallel (shardplan spells it --zero 0 on fsdp2 or fsdp1).
    if a.runtime == "deepspeed":
        bad("--runtime", "deepspeed is not covered by the reference lane yet (fsdp2, fsdp1, or --zero 0 for DDP)")
    if a.zero not in (0, 2, 3):
        bad("--zero", f"ZeRO {a.zero} is not covered by the reference lane (0 = DDP, 2, 3)")
    if a.zero == 0 and a.runtime != "fsdp2":
        bad("--zero", "0 (DDP) is shardplan's --runtime fsdp2 --zero 0; FSDP1 NO_SHARD is not covered")
    if a.tp < 1 or a.gpus % a.tp:
        bad("--tp", f"{a.tp} does not divide --gpus {a.gpus}")
    dp = a.gpus // a.tp
    if a.tp > 1 and (a.runtime != "fsdp2" or a.zero == 0 or a.shard_group):
        bad("--tp", "tensor parallelism is covered with FSDP2 ZeRO-2/3 on a 2-D (dp, tp) mesh only (no HSDP)")
    if a.tp > 1 and (spec.get("moe") or spec["mlp"] != "swiglu" or spec.get("attn_bias") or spec["norm"] != "rmsnorm"
                     or spec.get("tied_embeddings") or spec["heads"] % a.tp or spec["kv_heads"] % a.tp):
        bad("--tp", "torchtitan's Llama TP plan needs an untied Llama-style decoder with heads and kv_heads "
                    "divisible by tp")
    shard = a.shard_group or dp
    if shard < 1 or dp % shard:
        bad("--shard-group", f"{a.shard_group} does not divide --gpus {dp}")
    if a.offload != "none":
        bad("--offload", "CPU offload is not covered by the reference lane yet")
    if a.fp8 not in ("none", "tensorwise", "rowwise"):
        bad("--fp8", f"unknown value \"{a.fp8}\"")
    if a.fp8 != "none" and (a.runtime != "fsdp2" or a.zero == 0 or a.tp > 1):
        bad("--fp8", "float8 is covered with FSDP2 ZeRO-2/3 without TP only")
    if a.fp8_all_gather and a.fp8 != "tensorwise":
        bad("--fp8-all-gather", "needs --fp8 tensorwise")
    if a.compile:
        bad("--compile", "torch.compile is not covered by the reference lane")
    if a.root_params not in ("none", "embedding-head"):
        bad("--root-params", f"unknown value \"{a.root_params}\"")
    if (a.root_params != "none" or a.keep_last_block) and (
            a.runtime != "fsdp2" or a.zero not in (2, 3) or a.pp > 1 or a.tp > 1 or a.wrap != 1 or a.prefetch != 1
            or a.fp8 != "none" or spec.get("tied_embeddings")):
        bad("--root-params" if a.root_params != "none" else "--keep-last-block",
            "covered with FSDP2 ZeRO-2/3 of an untied decoder without TP, PP, float8, --wrap or explicit "
            "prefetch only")
    if a.async_tp:
        bad("--async-tp", "needs tensor parallelism")
    if a.wrap < 1:
        bad("--wrap", "must be >= 1")
    if a.prefetch < 1:
        bad("--prefetch", "must be >= 1")
    if a.prefetch != 1 and (a.runtime != "fsdp2" or a.zero == 0):
        bad("--prefetch", "explicit prefetch of more than one unit is FSDP2's set_modules_to_*_prefetch only")
    if a.zero == 0 and (a.shard_group or a.wrap != 1 or a.reshard_after_forward not in (None, "false")):
        bad("--zero", "0 is DDP: no shard group, wrap or resharding")
    if a.zero == 0 and a.precision == "fp32" and a.reduce_dtype == "bf16":
        bad("--reduce-dtype", "DDP reduces in the gradients' dtype")
    if a.zero == 0 and (a.grad_accum > 1 or a.global_batch):
        bad("--grad-accum", "DDP rebuilds its buckets in the second forward (Reducer::sync_bucket_indices reads "
                            "tensor data, which fake tensors lack): one micro-batch per step only")
    if a.zero == 0 and a.reduce_dtype and a.reduce_dtype != ("bf16" if a.precision in ("bf16", "bf16-true") else "fp32"):
        bad("--reduce-dtype", "DDP reduces in the gradients' dtype (fp32 for bf16-mixed, bf16 for bf16-true)")
    if a.zero == 0:
        raf = False
    elif a.reshard_after_forward is None:
        raf = a.zero == 3
    elif a.reshard_after_forward in ("true", "false"):
        raf = a.reshard_after_forward == "true"
    else:
        bad("--reshard-after-forward", "expected true or false")
    if a.zero == 2 and raf:
        bad("--reshard-after-forward", "ZeRO-2 keeps the gathered parameters: reshard_after_forward must be false")
    if a.zero == 3 and not raf:
        bad("--reshard-after-forward", "false with --zero 3 is ZeRO-2: pass --zero 2")
    reduce = a.reduce_dtype or ("fp32" if a.precision in ("bf16-mixed", "fp32", "fp16-mixed") else "bf16")
    if reduce not in ("fp32", "bf16"):
        bad("--reduce-dtype", f"unknown value \"{reduce}\"")
    if a.precision == "fp32" and reduce == "bf16":
        bad("--reduce-dtype", "bf16 reduction with fp32 precision is not covered")
    seq = a.seq or spec["seq"]
    if a.global_batch:
        if a.global_batch % (a.mbs * dp):
            bad("--global-batch", f"{a.global_batch} is not a multiple of mbs x dp = {a.mbs * dp}")
        ga = a.global_batch // (a.mbs * dp)
    else:
        ga = a.grad_accum or 1
    return {"runtime": a.runtime, "zero": a.zero, "seq": seq, "shard_group": shard, "wrap": a.wrap,
            "prefetch": a.prefetch, "tp": a.tp, "fp8": a.fp8, "fp8_all_gather": a.fp8_all_gather,
            "mbs": a.mbs, "grad_accum": ga, "ac": a.ac,
            "reshard_after_forward": raf, "precision": a.precision, "reduce_dtype": reduce,
            "fused_optimizer": not a.foreach_optimizer, "hold_logits": a.hold_logits, "loss_dtype": a.loss_dtype,
            "root_params": a.root_params, "keep_last_block": a.keep_last_block}


# ---------------------------------------------------------------------------------------------------------------
# The model: torchtitan's Llama 3 structure (torchtitan 0.3.0 torchtitan/models/common/{attention,feed_forward,
# rope}.py): complex rotary embedding in fp32, SDPA, SwiGLU, nn.RMSNorm, untied output head.


def build_model_classes(torch):
    nn = torch.nn
    F = torch.nn.functional

    def precompute_freqs_cis(dim, end, theta=500000.0):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device)
        freqs = torch.outer(t, freqs).float()
        return torch.polar(torch.ones_like(freqs), freqs)

    def apply_rotary_emb(xq, xk, freqs_cis):
        # torchtitan 0.3.0 models/common/rope.py apply_rotary_emb (complex form).
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
        xq_out = torch.view_as_real(xq_ * fc).flatten(3)
        xk_out = torch.view_as_real(xk_ * fc).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    class FusedRMSNormFn(torch.autograd.Function):
        """What `nn.RMSNorm` runs on a GPU. torch 2.15 aten/src/ATen/native/layer_norm.cpp rms_norm_symint calls
        `at::_fused_rms_norm` whenever the weight's dtype equals the input's (CUDA: one kernel writing the output
        and the fp32 rstd; derivatives.yaml saves input, weight and rstd: FusedRmsNormBackward0). On the CPU the
        same op is CompositeImplicitAutograd and decomposes into _to_copy/pow/mean/rsqrt/mul, which would save
        two fp32 copies of the input per norm. Fake tensors carry no values: allocate what the CUDA kernels
        allocate (forward: output and rstd; backward: the two gradients)."""

        @staticmethod
        def forward(ctx, x, weight, eps):
            out = torch.empty_like(x)
            rows = getattr(x, "_local_tensor", x).shape[:-1] + (1,)  # a DTensor's local rows (SequenceParallel)
            rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
            ctx.save_for_backward(x, weight, rstd)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            x, weight, rstd = ctx.saved_tensors
            return torch.empty_like(x), torch.empty_like(weight), None

    class FusedLayerNormFn(torch.autograd.Function):
        """What `nn.LayerNorm` runs on a GPU: aten::native_layer_norm (CUDA: one kernel writing the output and the
        fp32 mean and rstd per row; derivatives.yaml NativeLayerNormBackward0 saves input, weight, mean, rstd);
        its backward allocates the input's and the weight's gradients (no bias: MPT's LayerNorm(bias=False))."""

        @staticmethod
        def forward(ctx, x, weight, eps):
            out = torch.empty_like(x)
            rows = x.shape[:-1] + (1,)
            mean = torch.empty(rows, dtype=torch.float32, device=x.device)
            rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
            ctx.save_for_backward(x, weight, mean, rstd)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            x, weight, mean, rstd = ctx.saved_tensors
            return torch.empty_like(x), torch.empty_like(weight), None

    class LayerNorm(nn.LayerNorm):
        def forward(self, x):
            if self.bias is None and self.weight is not None and self.weight.dtype == x.dtype:
                return FusedLayerNormFn.apply(x, self.weight, self.eps)
            return super().forward(x)

    class RMSNorm(nn.RMSNorm):
        def forward(self, x):
            if self.weight is not None and self.weight.dtype == x.dtype:
                return FusedRMSNormFn.apply(x, self.weight, self.eps)
            return super().forward(x)  # mismatched dtypes: rms_norm_composite on the GPU too

    class Attention(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.n_heads, self.n_kv, self.head_dim = s["heads"], s["kv_heads"], s["head_dim"]
            h = s["hidden"]
            # Qwen2: biases on q, k, v only (qkv_bias_only); GPT-style attn_bias: on the output too.
            qkv_bias, o_bias = bool(s.get("attn_bias")), bool(s.get("attn_bias")) and not s.get("qkv_bias_only")
            self.rotary = s["positions"] == "rotary"
            self.wq = nn.Linear(h, self.n_heads * self.head_dim, bias=qkv_bias)
            self.wk = nn.Linear(h, self.n_kv * self.head_dim, bias=qkv_bias)
            self.wv = nn.Linear(h, self.n_kv * self.head_dim, bias=qkv_bias)
            self.wo = nn.Linear(self.n_heads * self.head_dim, h, bias=o_bias)

        def forward(self, x, freqs_cis):
            bs, seqlen, _ = x.shape
            xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
            xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
            xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
            if self.rotary:
                xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
            # ALiBi (MPT): FlashAttention-2 adds the per-head linear bias inside the kernel from alibi_slopes
            # (flash_attn_func(..., alibi_slopes=)); nothing of size s x s is materialised, and the saved tensors
            # are those of the kernel without it (torch's flash op has no slopes argument: same allocations).
            q, k, v = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
            out = sdpa(q, k, v)
            return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))

    class FeedForward(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.w1 = nn.Linear(s["hidden"], s["ffn_hidden"], bias=False)
            self.w2 = nn.Linear(s["ffn_hidden"], s["hidden"], bias=False)
            self.w3 = nn.Linear(s["hidden"], s["ffn_hidden"], bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class GeluMLP(nn.Module):
        """MPT's MLP (llm-foundry MPTMLP: up_proj, GELU (exact), down_proj, no biases)."""

        def __init__(self, s):
            super().__init__()
            self.up_proj = nn.Linear(s["hidden"], s["ffn_hidden"], bias=False)
            self.down_proj = nn.Linear(s["ffn_hidden"], s["hidden"], bias=False)

        def forward(self, x):
            return self.down_proj(F.gelu(self.up_proj(x)))

    class SparseMoe(nn.Module):
        """Mixtral's sparse MoE block as Hugging Face transformers MixtralSparseMoeBlock runs it (router `gate`,
        softmax in fp32, top-k, renormalised weights cast back, a loop over the experts: gather the expert's
        tokens, SwiGLU expert, scale by the routing weight, index_add_ into a zeroed output); no expert
        parallelism. The expert's token set comes from `torch.where(expert_mask[e])`, whose size depends on the
        values: fake tensors have none, so the router is taken as balanced (every expert gets T·k/E tokens, the
        simulator's --moe-imbalance 1): the tokens routed to expert e are positions [e·C, (e+1)·C) of the
        (token, slot) pairs sorted by expert (argsort of the top-k indices), all shapes static."""

        def __init__(self, s):
            super().__init__()
            self.n_experts, self.top_k = s["moe"]["experts"], s["moe"]["top_k"]
            self.gate = nn.Linear(s["hidden"], self.n_experts, bias=False)
            self.experts = nn.ModuleList([FeedForward(s) for _ in range(self.n_experts)])

        def forward(self, x):
            bs, seqlen, h = x.shape
            x = x.view(-1, h)
            T = x.shape[0]
            router_logits = self.gate(x)
            routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
            routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
            routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
            routing_weights = routing_weights.to(x.dtype)
            final = torch.zeros((T, h), dtype=x.dtype, device=x.device)
            order = selected.flatten().argsort()  # (token, slot) pairs sorted by expert
            cap = T * self.top_k // self.n_experts
            flat_w = routing_weights.flatten()
            for e, expert in enumerate(self.experts):
                pairs = order[e * cap:(e + 1) * cap]
                top_x = pairs // self.top_k
                current = x[top_x]
                out = expert(current) * flat_w[pairs, None]
                final.index_add_(0, top_x, out.to(x.dtype))
            return final.view(bs, seqlen, h)

    class TransformerBlock(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.attention_norm = make_norm(s)
            self.attention = Attention(s)
            self.ffn_norm = make_norm(s)
            self.feed_forward = (SparseMoe(s) if s.get("moe") else GeluMLP(s) if s["mlp"] == "gelu"
                                 else FeedForward(s))

        def forward(self, x, freqs_cis):
            h = x + self.attention(self.attention_norm(x), freqs_cis)
            return h + self.feed_forward(self.ffn_norm(h))

    class Transformer(nn.Module):
        def __init__(self, s, seq):
            super().__init__()
            self.tok_embeddings = nn.Embedding(s["vocab"], s["hidden"])
            # torchtitan registers freqs_cis as a non-persistent buffer of max_seq_len rows; ALiBi models hold the
            # per-head slopes (fp32) that FlashAttention-2 takes instead.
            if s["positions"] == "rotary":
                self.register_buffer("freqs_cis", precompute_freqs_cis(s["head_dim"], seq), persistent=False)
            else:
                self.register_buffer("freqs_cis", torch.zeros(s["heads"], dtype=torch.float32), persistent=False)
            self.layers = nn.ModuleDict({str(i): TransformerBlock(s) for i in range(s["layers"])})
            self.norm = make_norm(s)
            self.output = nn.Linear(s["hidden"], s["vocab"], bias=False)
            if s.get("tied_embeddings"):
                self.output.weight = self.tok_embeddings.weight

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            fc = self.freqs_cis[: tokens.shape[1]] if self.freqs_cis.is_complex() else self.freqs_cis
            for layer in self.layers.values():
                h = layer(h, fc)
            return self.output(self.norm(h))

    def make_norm(s):
        if s["norm"] == "layernorm":
            return LayerNorm(s["hidden"], eps=1e-5, bias=s["norm_bias"])
        return RMSNorm(s["hidden"], eps=1e-5)

    def sdpa(q, k, v):
        # On the GPU, F.scaled_dot_product_attention with bf16 inputs runs FlashAttention-2
        # (aten::_scaled_dot_product_flash_attention, which handles GQA natively and saves out + fp32 logsumexp).
        # The CPU has a different kernel choice (math fallback for GQA), so call the CUDA op's meta/fake
        # implementation directly on the fake tensors: the same outputs, saved tensors and backward as on the GPU.
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
        return out

    return Transformer


# ---------------------------------------------------------------------------------------------------------------
# torchtitan's selective AC policy (torchtitan 0.3.0 distributed/activation_checkpoint.py SelectiveAC): save the
# outputs of compute-intensive ops and collectives, but recompute every second matmul.


def selective_context_fn(torch):
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops.aten
    save_ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    for name in ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
                 "_scaled_dot_product_fused_attention_overrideable", "max", "linear", "topk"):
        if hasattr(ops, name):
            save_ops.add(getattr(ops, name).default)
    save_ops.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    save_ops.add(torch.ops._c10d_functional.all_to_all_single.default)
    mm_ops = (ops.mm.default, ops.linear.default)

    def context_fn():
        meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

        def policy(ctx, func, *args, **kwargs):
            key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
            if func in mm_ops:
                meta[key] += 1
            if func in save_ops:
                if func in mm_ops and meta[key] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context_fn


# ---------------------------------------------------------------------------------------------------------------
# Allocation trace: PyTorch's own FSDPMemTracker decides which storage is which category and when it is freed
# (weakref finalizers, storage resize_); every update of its snapshot becomes one event here.

CATEGORY = {
    "Sharded Param": "params",
    "Parameter": "params",
    "Gradient": "grads",
    "Optstate": "optimizer",
    "Other": "other",
    "Sharded Grad": "grads",
    "OptState": "optimizer",
    "Activation": "activations",
    "Temp": "activations",
    "Inputs": "activations",
    "Unsharded Param": "gathered_params",
    "All Gather": "gathered_params",
    "Unsharded Grad": "comm_buffers",
    "Reduce Scatter": "comm_buffers",
    "Buffer": "other",
}
CATEGORIES = ("params", "grads", "optimizer", "activations", "gathered_params", "comm_buffers", "other")
MIN_BLOCK = 512  # c10/cuda/CUDACachingAllocator.cpp kMinBlockSize: every request is rounded up to 512 bytes


def round_alloc(nbytes: int) -> int:
    return 0 if nbytes <= 0 else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def make_tracker(torch, model, optim, state, base=None, roles=None):
    """FSDP2: PyTorch's FSDPMemTracker. DDP and FSDP1 (base=MemTracker): the generic tracker, whose categories
    are coarser (gradients and reduction buffers created in backward count as activations); storages allocated
    while DDP builds its Reducer are its buckets (comm_buffers), and `roles` (storage -> category) names FSDP1's
    flat parameters and unsharded/low-precision flat buffers."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import _UpdateType
    from torch.distributed._tools.common_utils import get_untyped_storages

    base = base or FSDPMemTracker
    roles = roles or {}

    class TracingTracker(base):
        """FSDPMemTracker that also appends one event per alloc/free/recategorization, in program order."""

        events: list = []
        live: dict = {}
        current_op = ""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            outer, self.current_op = self.current_op, str(func)
            try:
                return super().__torch_dispatch__(func, types, args, kwargs)
            finally:
                self.current_op = outer

        def phase(self):
            if state["phase"] == "optimizer":
                return f"optimizer, step {state['step']}"
            # The innermost block: ModTracker.parents is a set and may hold two blocks at once (the one running
            # and the one FSDP2 prefetches); the one entered last is the highest in forward, lowest in backward.
            blocks = set()
            for p in self._mod_tracker.parents:  # Transformer.layers.3, FullyShardedDataParallel._fsdp_...layers.3
                w = p.split(".")
                if "layers" in w[:-1] and w[w.index("layers") + 1].isdigit():
                    blocks.add(int(w[w.index("layers") + 1]))
            unit = "root"
            if blocks:
                unit = f"layers.{min(blocks) if self._mod_tracker.is_bw else max(blocks)}"
            return (f"{'backward' if self._mod_tracker.is_bw else 'forward'} {unit}, step {state['step']}, "
                    f"micro-batch {state['micro']}")

        def _emit(self, op, nbytes, category, sid):
            if nbytes == 0 or state["propagating"]:
                return
            self.live[category] = self.live.get(category, 0) + (nbytes if op == "alloc" else -nbytes)
            phase = state["phase"] if state["phase"] not in ("step", "optimizer") else self.phase()
            self.events.append((op, nbytes, category, phase, self.current_op, sid))

        role = None

        def _track(self, reftype, t):
            if roles:
                for st in get_untyped_storages(t):
                    self.role = roles.get(st._cdata, self.role)
            try:
                super()._track(reftype, t)
            finally:
                self.role = None

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # FSDP1's use_orig_params parameters are views of the flat parameter (not leaves) while unsharded:
            # no per-parameter gradient hooks (the gradients are still seen as the ops that create them).
            return super()._track_module_params_and_buffers(module, install_grad_hooks=install_grad_hooks
                                                            and base is FSDPMemTracker)

        def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None):
            super()._update_snap(u_type, winfo, old_mem_consumed=old_mem_consumed, old_reftype=old_reftype)
            if winfo.device.type != "cpu":
                return  # meta tensors of DTensor's sharding propagation: no memory anywhere
            if not hasattr(winfo, "_sp_role"):
                winfo._sp_role = self.role or ("comm_buffers" if state["phase"].startswith("wrap") else None)
            cat = winfo._sp_role or CATEGORY.get(str(winfo.reftype.value), "other")
            size = round_alloc(winfo.size * winfo.element_size)
            if not hasattr(winfo, "_sp_id"):
                winfo._sp_id = len(self.events)  # storage id in the trace: the index of its first event
            sid = winfo._sp_id
            if u_type == _UpdateType.ADD:
                winfo._sp_bytes = size
                self._emit("alloc", size, cat, sid)
            elif u_type == _UpdateType.DEL:
                self._emit("free", getattr(winfo, "_sp_bytes", size), cat, sid)
            elif u_type == _UpdateType.SIZE:
                old = getattr(winfo, "_sp_bytes", 0)
                winfo._sp_bytes = size
                if old:
                    self._emit("free", old, cat, sid)
                self._emit("alloc", size, cat, sid)
            elif u_type == _UpdateType.REF:
                old_cat = winfo._sp_role or CATEGORY.get(str(old_reftype.value), "other")
                if old_cat != cat:
                    b = getattr(winfo, "_sp_bytes", size)
                    self._emit("free", b, old_cat, sid)
                    self._emit("alloc", b, cat, sid)

    # DTensor's sharding propagation runs the op on global-shape fake tensors in the active fake mode (ours:
    # torch/distributed/tensor/_sharding_prop.py _propagate_tensor_meta_non_cached): metadata only, never memory.
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    orig = ShardingPropagator._propagate_tensor_meta_non_cached
    if not getattr(orig, "_sp_wrapped", False):
        def wrapped(self, *args, **kwargs):
            outer, state["propagating"] = state["propagating"], True
            try:
                return orig(self, *args, **kwargs)
            finally:
                state["propagating"] = outer

        wrapped._sp_wrapped = True
        ShardingPropagator._propagate_tensor_meta_non_cached = wrapped
    if base is FSDPMemTracker:
        return TracingTracker(model, optim)
    tracker = TracingTracker()
    tracker.track_external(model, optim)
    return tracker


def patch_mesh_concatenate(torch):
    """FSDP2 on DTensor (TP) parameters concatenates the dp and tp meshes (_fsdp_param.py _init_sharding_spec_tp
    -> DeviceMesh._concatenate), which computes coordinates from the mesh tensor with data-dependent ops; under
    the fake mode they fail (DynamicOutputShapeException: nonzero). Run it outside the fake mode: the mesh is
    metadata."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    orig = DeviceMesh._concatenate
    if getattr(orig, "_sp_wrapped", False):
        return

    def concatenate(*args, **kwargs):
        with unset_fake_temporarily():
            return orig(*args, **kwargs)

    concatenate._sp_wrapped = True
    DeviceMesh._concatenate = staticmethod(concatenate)


def apply_tp(torch, model, tp_mesh):
    """torchtitan 0.3.0's Llama 3 tensor-parallel plan (models/llama3/parallelize.py apply_tp) with sequence
    parallelism and loss parallelism (the defaults): embedding row-wise (vocab) with sequence-sharded output, norms
    SequenceParallel, q/k/v and w1/w3 column-wise, wo and w2 row-wise to sequence-sharded outputs, the head
    column-wise to vocab-sharded logits (a DTensor the loss reads under loss_parallel())."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })


def apply_float8(torch, model, plan):
    """torchtitan 0.3.0's float8 converter (components/quantization/float8.py): torchao
    convert_to_float8_training on the blocks' linear layers (the head stays bf16: filter_fqns ["output"]), recipe
    tensorwise or rowwise; --fp8-all-gather sets enable_fsdp_float8_all_gather (tensorwise only), and the step
    then calls precompute_float8_dynamic_scale_for_fsdp after the optimizer."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    if plan["fp8"] == "tensorwise":
        cfg = Float8LinearConfig(enable_fsdp_float8_all_gather=plan["fp8_all_gather"])
    else:
        cfg = Float8LinearConfig.from_recipe_name(plan["fp8"])
    convert_to_float8_training(model, config=cfg, module_filter_fn=lambda m, fqn: fqn.startswith("layers.") and
                               m.in_features % 16 == 0 and m.out_features % 16 == 0)


def wrap_fsdp2(torch, model, spec, plan, state, mesh):
    """FSDP2 as torchtitan 0.3.0 applies it (distributed/fsdp.py apply_fsdp_to_decoder); returns (model, optim,
    tracker)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if plan["precision"] in ("bf16-mixed", "fp16-mixed"):
        # fp16-mixed: MixedPrecisionPolicy(param_dtype=float16) over the fp32 shards (the emitted FSDP2 script's);
        # a 16-bit reduction is then fp16.
        half = torch.float16 if plan["precision"] == "fp16-mixed" else torch.bfloat16
        mp = MixedPrecisionPolicy(param_dtype=half,
                                  reduce_dtype=torch.float32 if plan["reduce_dtype"] == "fp32" else half)
    else:
        mp = MixedPrecisionPolicy()
    # reshard_after_forward_policy "default": tok_embeddings its own unit (resharded after forward), [norm,
    # output] one unit that is not resharded after forward ("FSDP would prefetch them immediately"; with tied
    # weights [tok_embeddings, norm, output] together, not resharded), every block resharded after forward, then
    # the root (which then owns only buffers).
    raf = plan["reshard_after_forward"]
    kw = {"mesh": mesh, "mp_policy": mp}
    units = []  # FSDP units in forward order (their modules), for explicit prefetching
    blocks = list(model.layers.values())
    if plan["keep_last_block"] and plan["root_params"] == "none":
        # torchtitan PR 382's wrapping (tok_embeddings and [norm, output] units, the last block kept).
        fully_shard(model.tok_embeddings, reshard_after_forward=raf, **kw)
        for i, block in enumerate(blocks):
            fully_shard(block, reshard_after_forward=raf and i < len(blocks) - 1, **kw)
        fully_shard([model.norm, model.output], reshard_after_forward=False, **kw)
        fully_shard(model, reshard_after_forward=raf, **kw)
    elif plan["root_params"] != "none":
        # torchtitan before 83e694105 (2025-07-28; parallelisms/parallelize_llama.py apply_fsdp at 5940ddeb5):
        # every block its own unit (the last one kept after forward under the "default" policy), then
        # fully_shard(model, reshard_after_forward=not pp_enabled): the embedding, final norm and output are the
        # root's parameters. FSDP2 before pytorch PR 154704 (2025-06) never resharded the root after forward,
        # whatever was passed; torch 2.15 does so only when reshard_after_forward is not given (_fsdp_state.py
        # _lazy_init, _auto_reshard_after_forward), so the root is wrapped without it.
        for i, block in enumerate(blocks):
            keep = plan["keep_last_block"] and i == len(blocks) - 1
            fully_shard(block, reshard_after_forward=raf and not keep, **kw)
        fully_shard(model, **kw)
    else:
        if spec.get("tied_embeddings"):
            fully_shard([model.tok_embeddings, model.norm, model.output], reshard_after_forward=False, **kw)
        else:
            fully_shard(model.tok_embeddings, reshard_after_forward=raf, **kw)
            fully_shard([model.norm, model.output], reshard_after_forward=False, **kw)
            units.append([model.tok_embeddings])
        # --wrap W: W consecutive blocks form one FSDP unit (fully_shard on a list of modules: one parameter
        # group, one all-gather).
        for i in range(0, len(blocks), plan["wrap"]):
            group = blocks[i:i + plan["wrap"]]
            fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=raf, **kw)
            units.append(group)
        if not spec.get("tied_embeddings"):
            units.append([model.norm, model.output])
        fully_shard(model, reshard_after_forward=raf, **kw)
    if plan["prefetch"] > 1:
        # torchtitan's explicit prefetching (models/llama4/infra/parallelize.py apply_fsdp, prefetch of one unit
        # there): each unit's forward pre-hook all-gathers the next `prefetch` units
        # (FSDPModule.set_modules_to_forward_prefetch), each unit's backward the previous `prefetch`
        # (set_modules_to_backward_prefetch) instead of FSDP2's implicit one-unit prefetch.
        n = plan["prefetch"]
        for i, unit in enumerate(units):
            nxt = [u[0] for u in units[i + 1:i + 1 + n]]
            if nxt:
                unit[-1].set_modules_to_forward_prefetch(nxt)
        rev = units[::-1]
        for i, unit in enumerate(rev):
            prv = [u[0] for u in rev[i + 1:i + 1 + n]]
            if prv:
                unit[0].set_modules_to_backward_prefetch(prv)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                              fused=plan["fused_optimizer"], foreach=None if plan["fused_optimizer"] else True)
    return model, optim, make_tracker(torch, model, optim, state)


class _DeferredDDP:
    """The model before DDP: run() builds DistributedDataParallel inside the tracker (wrap())."""

    def __init__(self, build):
        self.wrap = build


def wrap_ddp(torch, model, plan, state):
    """Plain data parallel, shardplan's --zero 0: torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25,
    gradient_as_bucket_view=False, the defaults), parameters in their dtype; bf16-mixed runs the forward under
    torch.autocast(bf16) (torchtitan's DDP path: `maybe_enable_amp` when no FSDP mixed-precision policy applies).
    Returns (a deferred model whose wrap() builds DDP, optim, tracker)."""
    import torch.nn.parallel.distributed as ddp_mod
    from torch.distributed._tools.mem_tracker import MemTracker

    # DDP's constructor checks parameter shapes across ranks and broadcasts rank 0's state
    # (_verify_param_shape_across_processes, _sync_module_states): both read tensor data, which fake tensors do
    # not have, and neither allocates on rank 0 beyond collective staging. Skipped.
    ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None
    ddp_mod._sync_module_states = lambda *a, **k: None
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                              fused=plan["fused_optimizer"], foreach=None if plan["fused_optimizer"] else True)
    world = torch.distributed.get_world_size()
    holder = {}

    def build():
        ddp = ddp_mod.DistributedDataParallel(model, bucket_cap_mb=25, gradient_as_bucket_view=False)

        # The fake process group's all-reduce returns a future without a value, which the Reducer asserts on:
        # a comm hook with the memory of the default one (torch/distributed/algorithms/ddp_comm_hooks/
        # default_hooks.py allreduce_hook: divide the bucket in place, all-reduce it in place, return it).
        def allreduce_in_place(_, bucket):
            buf = bucket.buffer()
            buf.div_(world)
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        ddp.register_comm_hook(None, allreduce_in_place)
        holder["ddp"] = ddp
        if plan["precision"] == "bf16-mixed":
            return _Autocast(torch, ddp)
        return ddp

    tracker = make_tracker(torch, model, optim, state, base=MemTracker)
    return _DeferredDDP(build), optim, tracker


class _Autocast:
    """model(x) under torch.autocast(bfloat16) (the device's autocast; the weight casts are cached for the
    forward, as on CUDA)."""

    def __init__(self, torch, module):
        self.torch, self.module = torch, module

    def __call__(self, *args):
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16):
            return self.module(*args)

    def parameters(self):
        return self.module.parameters()


def wrap_fsdp1(torch, model, spec, plan, state, mesh):
    """FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel) as Hugging Face accelerate / torchtune configure it:
    use_orig_params=True, a wrap policy per transformer block (the checkpoint_wrapper around it when AC is on)
    plus the root (embeddings, final norm and head), MixedPrecision(param_dtype=bf16, reduce_dtype=fp32|bf16),
    FULL_SHARD (ZeRO-3), SHARD_GRAD_OP (ZeRO-2) or HYBRID_SHARD (a shard group), backward_prefetch BACKWARD_PRE
    and limit_all_gathers=True (the defaults). device_id="cpu": FSDP1 refuses a CPU module without an
    accelerator unless the device is given (fsdp/_init_utils.py _init_device_handle)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy
    from torch.distributed.fsdp._runtime_utils import _lazy_init
    from torch.distributed._tools.mem_tracker import MemTracker
    import functools

    import torch.distributed.fsdp._flat_param as flat_param_mod

    if plan["wrap"] != 1:
        raise PlanError("--wrap: FSDP1 runs one block per unit in the reference lane")
    # FSDP1 asks whether a flat buffer is allocated through `data_ptr() > 0` (_flat_param.py _data_ptr_allocated,
    # e.g. SHARD_GRAD_OP's _writeback_orig_params); a fake tensor's data pointer is 0. Its storage size is what
    # FSDP1 itself changes (_alloc_storage / _free_storage resize the storage): ask that instead.
    flat_param_mod._data_ptr_allocated = lambda t: t.untyped_storage().size() > 0
    blocks = set(model.layers.values())
    policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m in blocks)
    mp = None
    if plan["precision"] == "bf16-mixed":
        mp = MixedPrecision(param_dtype=torch.bfloat16,
                            reduce_dtype=torch.float32 if plan["reduce_dtype"] == "fp32" else torch.bfloat16)
    if plan["shard_group"] != torch.distributed.get_world_size():
        strategy = ShardingStrategy.HYBRID_SHARD
    else:
        strategy = ShardingStrategy.FULL_SHARD if plan["zero"] == 3 else ShardingStrategy.SHARD_GRAD_OP
    kw = {"device_mesh": mesh} if strategy == ShardingStrategy.HYBRID_SHARD else {}
    fsdp = FSDP(model, auto_wrap_policy=policy, mixed_precision=mp, sharding_strategy=strategy,
                use_orig_params=True, device_id=torch.device("cpu"), sync_module_states=False, **kw)
    _lazy_init(fsdp, fsdp)  # the first forward would: create the unsharded and low-precision flat buffers
    roles = {}
    for handle in fsdp._all_handles:
        fp = handle.flat_param
        roles[fp.untyped_storage()._cdata] = "params"
        for attr in ("_full_param_padded", "_mp_shard", "_full_prec_full_param_padded"):
            t = getattr(fp, attr, None)
            if t is not None:
                roles[t.untyped_storage()._cdata] = "gathered_params"
    optim = torch.optim.AdamW(fsdp.parameters(), lr=3e-4, weight_decay=0.1,
                              fused=plan["fused_optimizer"], foreach=None if plan["fused_optimizer"] else True)
    return fsdp, optim, make_tracker(torch, fsdp, optim, state, base=MemTracker, roles=roles)


def summarize(events):
    """Peak of the running total (alloc/free pairs from re-categorization do not move it), the breakdown at the
    peak, and what is live per category at the end."""
    live = dict.fromkeys(CATEGORIES, 0)
    total = peak = 0
    peak_live, peak_phase, peak_index = dict(live), "", 0
    for i, (op, nbytes, cat, phase, _, _) in enumerate(events):
        d = nbytes if op == "alloc" else -nbytes
        live[cat] += d
        total += d
        if total > peak:
            peak, peak_live, peak_phase, peak_index = total, dict(live), phase, i
    return peak, peak_live, peak_phase, peak_index, dict(live)


# ---------------------------------------------------------------------------------------------------------------


def train_step(torch, model, optim, spec, plan, state, clip, tracker):
    """torchtitan's train_step: micro-batches (forward, loss, backward), clip_grad_norm_, optimizer step."""
    import contextlib

    state["phase"] = "step"
    loss_ctx = contextlib.nullcontext
    if plan["tp"] > 1:
        from torch.distributed.tensor.parallel import loss_parallel as loss_ctx
    for micro in range(plan["grad_accum"]):
        state["micro"] = micro
        # FSDPMemTracker keeps per-module stats for one forward/backward: clear them (live storages stay tracked).
        tracker.reset_mod_stats()
        tokens = torch.randint(0, spec["vocab"], (plan["mbs"], plan["seq"]))
        labels = torch.randint(0, spec["vocab"], (plan["mbs"], plan["seq"]))
        pred = model(tokens)
        if plan["hold_logits"]:
            # shardplan's --hold-logits is torchtitan until mid-2024, whose model returned output(h).float(): the
            # loop's `pred` keeps fp32 logits referenced through backward.
            pred = pred.float()
        # torchtitan components/loss.py cross_entropy_loss: upcast the logits to fp32.
        logits = pred.flatten(0, 1)
        if plan["loss_dtype"] == "fp32":
            logits = logits.float()
        with loss_ctx():
            loss = torch.nn.functional.cross_entropy(logits, labels.flatten(0, 1))
            del logits
            if not plan["hold_logits"]:
                del pred  # torchtitan deletes pred before backward
            scaler = state.get("scaler")
            (scaler.scale(loss) if scaler else loss).backward()
        del loss, tokens, labels
        if plan["hold_logits"]:
            del pred
    state["phase"] = "optimizer"
    scaler = state.get("scaler")
    if scaler:
        # ShardedGradScaler.unscale_ (torch 2.15 torch/distributed/fsdp/sharded_grad_scaler.py): found_inf and
        # inv_scale, _amp_foreach_non_finite_check_and_unscale_ over the gradient shards, found_inf all-reduced.
        scaler.unscale_(optim)
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optim.step()
    if scaler:
        # GradScaler.step and, on the CPU device, update() (_amp_update_scale_cpu_) read found_inf with `.item()`,
        # which a fake tensor cannot answer: the step is taken as it is when no inf was found (the common case), and
        # update's end is done by hand: the per-optimizer state (found_inf per device) is dropped. On CUDA update()
        # runs torch._amp_update_scale_ in place on the scale and the growth tracker (no new tensors).
        from collections import defaultdict
        from torch.amp.grad_scaler import _refresh_per_optimizer_state

        scaler._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)
    if plan["fp8_all_gather"]:
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(model)
    optim.zero_grad()


def run(a) -> int:
    spec_raw, record_model = load_spec(a.model)
    if a.layers:
        if a.layers < 1:
            raise PlanError("--layers: must be >= 1")
        spec_raw = dict(spec_raw)
        spec_raw["name"] = f"{spec_raw.get('name', 'custom')}-d{a.layers}"
        spec_raw["layers"] = a.layers
        record_model = spec_raw
    spec = normalize_spec(spec_raw)
    plan = resolve_plan(a, spec)
    if a.pp != 1 or a.pp_layers or a.pp_rank != -1 or a.virtual_stages:
        return run_pp(a, spec, record_model, plan)
    N = a.gpus

    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    t0 = time.time()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)
    # HSDP (--shard-group S < N): a 2-D mesh (replicate N/S, shard S); fully_shard on it replicates across the
    # first dimension and shards across the second (torch/distributed/fsdp/_fully_shard/_fully_shard.py).
    S, TP = plan["shard_group"], plan["tp"]
    tp_mesh = None
    if TP > 1:
        # torchtitan's (dp_shard, tp) mesh: FSDP2 over "dp_shard", DTensor TP over "tp" (innermost).
        mesh2 = init_device_mesh("cpu", (N // TP, TP), mesh_dim_names=("dp_shard", "tp"))
        mesh, tp_mesh = mesh2["dp_shard"], mesh2["tp"]
        patch_mesh_concatenate(torch)
    elif S == N:
        mesh = init_device_mesh("cpu", (N,))
    else:
        mesh = init_device_mesh("cpu", (N // S, S), mesh_dim_names=("replicate", "shard"))
    Transformer = build_model_classes(torch)
    state = {"phase": "init", "step": 0, "micro": 0, "propagating": False}
    fake = FakeTensorMode(allow_non_fake_inputs=False)
    with fake:
        param_dtype = torch.bfloat16 if plan["precision"] in ("bf16", "bf16-true") else torch.float32
        with torch.device("cpu"):
            torch.set_default_dtype(param_dtype)
            model = Transformer(spec, plan["seq"])
            torch.set_default_dtype(torch.float32)
        n_params = sum(p.numel() for p in model.parameters())
        expect = param_count(spec)
        if n_params != expect:
            raise RuntimeError(f"built {n_params} parameters, closed form says {expect}")
        if plan["fp8"] != "none":
            apply_float8(torch, model, plan)
        if tp_mesh is not None:
            apply_tp(torch, model, tp_mesh)
        # Activation checkpointing, as torchtitan applies it: one checkpoint_wrapper per block.
        if plan["ac"] != "none":
            ctx = selective_context_fn(torch) if plan["ac"] == "selective" else None
            for name, block in list(model.layers.named_children()):
                kw = {"context_fn": ctx} if ctx else {}
                model.layers.register_module(name, checkpoint_wrapper(block, preserve_rng_state=True,
                                                                      early_stop=False, **kw))
        if plan["zero"] == 0:
            model, optim, tracker = wrap_ddp(torch, model, plan, state)
        elif plan["runtime"] == "fsdp1":
            model, optim, tracker = wrap_fsdp1(torch, model, spec, plan, state, mesh)
        else:
            model, optim, tracker = wrap_fsdp2(torch, model, spec, plan, state, mesh)
        if plan["precision"] == "fp16-mixed":
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            state["scaler"] = ShardedGradScaler(device="cpu")
        # torchtitan's GarbageCollection (components/gc? tools/utils.py): gc.disable(), one collection at start,
        # then every gc_freq = 50 steps. Frees then come from reference counting only: deterministic traces.
        gc.collect()
        gc.disable()
        with tracker:
            if plan["zero"] == 0:
                # DDP's Reducer allocates its flat bucket buffers in the constructor: build it inside the tracker.
                state["phase"] = "wrap (DDP Reducer buckets)"
                model = model.wrap()
            if a.warmup == "init":
                # The optimizer states exist from the first step on: create them as that step would (zero
                # gradients in the sharded parameters' dtype, one optimizer step), without its forward/backward.
                state["phase"] = "optimizer"
                for p in model.parameters():
                    p.grad = torch.zeros_like(p)
                optim.step()
                optim.zero_grad()
            else:
                state["step"] = 0
                train_step(torch, model, optim, spec, plan, state, clip=not a.no_clip, tracker=tracker)
            for step in range(1, a.steps + 1):
                state["step"] = step
                train_step(torch, model, optim, spec, plan, state, clip=not a.no_clip, tracker=tracker)
            state["phase"] = "end"
    rid = f"ref-{spec.get('name', 'custom')}-g{N}-z{plan['zero']}-ac{plan['ac']}-mbs{plan['mbs']}" \
          f"-s{plan['seq']}-ga{plan['grad_accum']}-{plan['precision']}"
    rec_plan = record_plan(plan, plan["grad_accum"])
    if spec.get("moe"):  # SparseMoe: Hugging Face's loop over the experts (shardplan --moe-impl loop)
        rec_plan["moe_impl"] = "loop"
    if plan["shard_group"] != N // plan["tp"]:
        rec_plan["shard_group"] = plan["shard_group"]
    if plan["tp"] > 1:
        rec_plan["tp"] = plan["tp"]
    if plan["fp8"] != "none":
        rec_plan["fp8"] = plan["fp8"]
        rec_plan["fp8_all_gather"] = plan["fp8_all_gather"]
    if plan["zero"] == 0:
        wrapping = "DDP (bucket_cap_mb=25, gradient_as_bucket_view=False)"
    elif plan["runtime"] == "fsdp1":
        wrapping = "FSDP1 FullyShardedDataParallel (use_orig_params) per block + root"
    else:
        wrapping = "FSDP2 fully_shard per block + root" + (
            f", explicit prefetch {plan['prefetch']}" if plan["prefetch"] > 1 else "")
    return write_outputs(a, torch, dist, tracker.events, t0, rid, record_model, rec_plan, {},
                         f"tools/reference/run.py: rank 0 of {N}, FakeTensorMode on the CPU device, {wrapping}, ",
                         n_params)


def record_plan(plan: dict, grad_accum: int) -> dict:
    """The run record's plan keys both paths write, in the committed records' order."""
    return {"runtime": plan["runtime"], "zero": plan["zero"], "seq": plan["seq"], "mbs": plan["mbs"],
            "grad_accum": grad_accum, "ac": plan["ac"], "wrap": plan["wrap"], "prefetch": plan["prefetch"],
            "reshard_after_forward": plan["reshard_after_forward"], "precision": plan["precision"],
            "reduce_dtype": plan["reduce_dtype"], "fused_optimizer": plan["fused_optimizer"],
            "hold_logits": plan["hold_logits"], "loss_dtype": plan["loss_dtype"],
            **({"root_params": plan["root_params"]} if plan.get("root_params", "none") != "none" else {}),
            **({"keep_last_block": True} if plan.get("keep_last_block") else {})}


def write_outputs(a, torch, dist, events, t0, rid, record_model, rec_plan, measured, notes_head, n_params) -> int:
    """Writes the shardplan.run/1 record (-o) and, with --trace, the shardplan.reference_trace/1 trace of one run
    (data parallel or one pipeline rank): the peak and its breakdown from the tracker's events; `measured` adds to
    the record's measured keys, `notes_head` opens its notes (what ran). Ends the process group; returns 0."""
    wall_s = time.time() - t0
    peak, breakdown, peak_phase, peak_index, live_end = summarize(events)
    tv = torch.__version__.split("+")[0]
    rid = a.id or rid
    bd = " ".join(f"{c}={breakdown[c]}" for c in CATEGORIES)
    record = {
        "schema": "shardplan.run/1",
        "id": rid,
        "model": record_model,
        "cluster": a.cluster,
        "gpus": a.gpus,
        "plan": rec_plan,
        "measured": {"peak_allocated_bytes": peak, **measured},
        "source": f"pytorch reference, fake process group, torch {tv}",
        "notes": (f"{notes_head}fused={rec_plan['fused_optimizer']} AdamW, clip_grad_norm={not a.no_clip}; "
                  f"breakdown at peak ({peak_phase}): {bd}; sizes rounded to 512 B per allocation; "
                  f"persistent at end: params={live_end['params']} grads={live_end['grads']} "
                  f"optimizer={live_end['optimizer']}"),
    }
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    if a.trace:
        trace = {
            "schema": "shardplan.reference_trace/1",
            "record_id": rid,
            "torch": torch.__version__,
            "device": "cpu (fake tensors)",
            "parameters": n_params,
            "peak_allocated_bytes": peak,
            "peak_event": peak_index,
            "peak_phase": peak_phase,
            "breakdown_at_peak": breakdown,
            "persistent_at_end": {c: live_end[c] for c in ("params", "grads", "optimizer")},
            "events": [{"op": op, "bytes": b, "category": c, "phase": ph, "aten": fn, "storage": sid,
                        "stream": "default"} for op, b, c, ph, fn, sid in events],
        }
        Path(a.trace).write_text(json.dumps(trace, separators=(",", ":")) + "\n")
    print(f"{rid}: peak_allocated {peak} B ({peak / 2**30:.2f} GiB) at {peak_phase}; {len(events)} events; "
          f"{wall_s:.1f} s", file=sys.stderr)
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Pipeline parallelism: torchtitan's split and FSDP2-inside-the-stage, driven by torch.distributed.pipelining.

PP_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "zbv": "ZBVZeroBubble",
                "dualpipev": "DualPipeV"}


def resolve_pp(a, spec, plan) -> dict:
    """The pipeline part of the plan, checked as simulator/simulate/pipeline_step.cpp checks it (resolve_pipeline,
    stage_blocks): stages, the blocks of each (torchtitan's split or --pp-layers), the ranks' stages, the
    measured rank."""
    def bad(flag, why):
        raise PlanError(f"{flag}: {why}")

    pp, sched = a.pp, a.pp_schedule
    if pp < 2:
        bad("--pp", "the pipeline lane needs --pp >= 2")
    if sched not in PP_SCHEDULES:
        bad("--pp-schedule", f"unknown value \"{sched}\"; expected {' | '.join(PP_SCHEDULES)}")
    if a.gpus % pp:
        bad("--pp", f"{pp} does not divide --gpus {a.gpus}")
    if plan["runtime"] != "fsdp2" or plan["zero"] == 0 or plan["tp"] > 1 or a.shard_group not in (0, a.gpus // pp):
        bad("--pp", "the reference lane runs pipeline parallelism with FSDP2 (ZeRO-2/3) inside each stage, "
                    "no TP, no HSDP")
    if plan["fp8"] != "none" or plan["prefetch"] != 1 or plan["wrap"] != 1 or plan["hold_logits"]:
        bad("--pp", "float8, explicit prefetch, --wrap and --hold-logits are not covered with pipelining")
    if spec.get("tied_embeddings") or spec.get("moe"):
        bad("--pp", "tied embeddings and MoE are not covered with pipelining")
    if a.global_batch:
        bad("--global-batch", "give the pipeline's micro-batches as --grad-accum")
    single = sched in ("gpipe", "1f1b")
    V = a.virtual_stages or (1 if single else 2)
    if single and V != 1:
        bad("--virtual-stages", f"{sched} runs one stage per rank; use --virtual-stages 1")
    if sched in ("zbv", "dualpipev") and V != 2:
        bad("--virtual-stages", f"{sched} needs exactly 2 stages per rank")
    if not single and V < 2:
        bad("--virtual-stages", f"{sched} needs at least 2 stages per rank")
    S, L, m = pp * V, spec["layers"], plan["grad_accum"]
    if a.pp_layers:
        try:
            blocks = [int(x) for x in a.pp_layers.split(",")]
        except ValueError:
            bad("--pp-layers", "expected comma-separated block counts (\"3,4,4,3\")")
        if len(blocks) != S or sum(blocks) != L or min(blocks) < 0 or 0 in blocks[1:-1]:
            bad("--pp-layers", f"expected {S} entries summing to {L}, only the first and last may be 0")
    else:
        # torchtitan pipeline_parallel.py _generate_llm_fqn_per_model_part(S, L, input_weight=1,
        # output_weight=1): L + 2 effective layers, each stage effective // S, the first effective % S one more;
        # the embedding takes one of the first stage's, norm + head one of the last's.
        eff = L + 2
        if S > eff:
            bad("--pp", f"{S} stages exceed the model's {L} blocks + embedding + head")
        per, extra, left, blocks = eff // S, eff % S, L, []
        for s in range(S):
            n = per + (s < extra) - (s in (0, S - 1))
            n = min(max(n, 0), left)
            blocks.append(n)
            left -= n
    if sched == "1f1b" and m < pp:
        bad("--grad-accum", f"1f1b needs at least as many micro-batches ({m}) as stages ({pp})")
    if sched == "dualpipev" and m < S:
        bad("--grad-accum", f"dualpipev needs at least as many micro-batches ({m}) as stages ({S})")
    if sched == "interleaved-1f1b" and m % max(1, m // pp):
        bad("--grad-accum", f"interleaved-1f1b needs the micro-batches ({m}) to be a multiple of max(1, m / pp)")
    rank = a.pp_rank if a.pp_rank >= 0 else 0
    if rank >= pp:
        bad("--pp-rank", f"{rank} is not a rank of --pp {pp}")
    # torchtitan _get_pp_rank_to_stage_indices_mapping: loop style r, r + pp, ...; V style (r, 2 pp - 1 - r).
    stages = [rank, 2 * pp - 1 - rank] if sched in ("zbv", "dualpipev") else [rank + v * pp for v in range(V)]
    return {"pp": pp, "schedule": sched, "V": V, "S": S, "blocks": blocks, "rank": rank, "stages": stages,
            "pp_layers": a.pp_layers}


def run_pp(a, spec, record_model, plan) -> int:
    """One pipeline rank of a torchtitan-style PP x FSDP2 step: the rank's stage modules split from the model as
    torchtitan's _split_module does (modules of other stages set to None, blocks deleted from the ModuleDict,
    FQNs kept), FSDP2 applied to each as apply_fsdp_to_decoder with pp_enabled (reshard_after_forward False for
    the blocks and the embedding, [norm, output] one unit, the stage root), a PipelineStage per stage on the pp
    group of a (pp, dp_shard) mesh, the schedule class torchtitan builds (n_microbatches = grad_accum, the
    loss function, scale_grads=False) and schedule.step(tokens, target=labels, losses=[], return_outputs=False)
    as torchtitan's trainer calls it; then clip_grad_norm_ and the optimizer step. Stage input/output metadata
    is given to PipelineStage (static mode): the dynamic mode exchanges it with send_object_list, whose
    pickled payload a fake process group cannot carry (docs/reference-lane.md "Pipeline parallelism")."""
    pp_cfg = resolve_pp(a, spec, plan)
    N, pp, rank = a.gpus, pp_cfg["pp"], pp_cfg["rank"]
    dp = N // pp

    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class

    t0 = time.time()
    # Rank `rank` of the pipeline: global rank rank x dp on the (pp, dp_shard) mesh (pp outermost).
    dist.init_process_group("fake", store=FakeStore(), rank=rank * dp, world_size=N)
    mesh2 = init_device_mesh("cpu", (pp, dp), mesh_dim_names=("pp", "dp_shard"))
    pp_group, mesh = mesh2.get_group("pp"), mesh2["dp_shard"]
    Transformer = build_model_classes(torch)

    class StageModel(Transformer):
        """torchtitan's Decoder forward tolerates the modules a stage lacks (None): tokens in on the first stage,
        hidden states between stages, logits out of the last."""

        def forward(self, x):
            h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
            fc = self.freqs_cis[: x.shape[1]] if self.freqs_cis.is_complex() else self.freqs_cis
            for layer in self.layers.values():
                h = layer(h, fc)
            h = self.norm(h) if self.norm is not None else h
            return self.output(h) if self.output is not None else h

    state = {"phase": "init", "step": 0, "micro": 0, "propagating": False}
    S, blocks = pp_cfg["S"], pp_cfg["blocks"]
    first_block = [sum(blocks[:s]) for s in range(S)]
    fake = FakeTensorMode(allow_non_fake_inputs=False)
    with fake:
        param_dtype = torch.bfloat16 if plan["precision"] in ("bf16", "bf16-true") else torch.float32
        act_dtype = torch.float32 if plan["precision"] == "fp32" else torch.bfloat16
        mods, pstages = [], []
        for s in pp_cfg["stages"]:
            with torch.device("cpu"):
                torch.set_default_dtype(param_dtype)
                mod = StageModel(spec, plan["seq"])
                torch.set_default_dtype(torch.float32)
            # torchtitan _split_module: keep this stage's modules, the others None / deleted.
            keep = {str(i) for i in range(first_block[s], first_block[s] + blocks[s])}
            for name in list(mod.layers.keys()):
                if name not in keep:
                    del mod.layers[name]
            if s != 0:
                mod.tok_embeddings = None
            if s != S - 1:
                mod.norm = None
                mod.output = None
            if plan["ac"] != "none":
                ctx = selective_context_fn(torch) if plan["ac"] == "selective" else None
                for name, block in list(mod.layers.named_children()):
                    kw = {"context_fn": ctx} if ctx else {}
                    mod.layers.register_module(name, checkpoint_wrapper(block, preserve_rng_state=True,
                                                                        early_stop=False, **kw))
            # torchtitan apply_fsdp_to_decoder with pp_enabled: reshard_after_forward "default" -> not pp_enabled
            # (False) for the embedding and the blocks; [norm, output] never resharded after forward; the root.
            if plan["precision"] == "bf16-mixed":
                mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, cast_forward_inputs=False,
                                          reduce_dtype=torch.float32 if plan["reduce_dtype"] == "fp32"
                                          else torch.bfloat16)
            else:
                mp = MixedPrecisionPolicy(cast_forward_inputs=False)
            kw = {"mesh": mesh, "mp_policy": mp}
            if mod.tok_embeddings is not None:
                fully_shard(mod.tok_embeddings, reshard_after_forward=False, **kw)
            if mod.norm is not None:
                fully_shard([mod.norm, mod.output], reshard_after_forward=False, **kw)
            for block in mod.layers.values():
                fully_shard(block, reshard_after_forward=False, **kw)
            fully_shard(mod, **kw)
            mbs_shape = (plan["mbs"], plan["seq"])
            inp = (torch.empty(mbs_shape, dtype=torch.long) if s == 0
                   else torch.empty(mbs_shape + (spec["hidden"],), dtype=act_dtype, requires_grad=True))
            # requires_grad marks the tensors whose gradients travel back (static mode derives the gradients'
            # metadata from these).
            out = torch.empty(mbs_shape + ((spec["vocab"],) if s == S - 1 else (spec["hidden"],)), dtype=act_dtype,
                              requires_grad=True)
            pstage = PipelineStage(mod, s, S, torch.device("cpu"), input_args=inp, output_args=out, group=pp_group)
            # The trace's phases name the micro-batch each action of the schedule runs.
            for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                def action(chunk_id, *args, _run=getattr(pstage, name), **kwargs):
                    state["micro"] = chunk_id
                    return _run(chunk_id, *args, **kwargs)
                setattr(pstage, name, action)
            pstages.append(pstage)
            mods.append(mod)
        params = [p for mod in mods for p in mod.parameters()]
        optim = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, fused=plan["fused_optimizer"],
                                  foreach=None if plan["fused_optimizer"] else True)

        def loss_fn(pred, labels):
            # torchtitan components/loss.py cross_entropy_loss: the logits upcast to fp32.
            logits = pred.flatten(0, 1)
            if plan["loss_dtype"] == "fp32":
                logits = logits.float()
            return torch.nn.functional.cross_entropy(logits, labels.flatten(0, 1))

        cls = get_schedule_class(PP_SCHEDULES[pp_cfg["schedule"]])
        m = plan["grad_accum"]
        if issubclass(cls, PipelineScheduleMulti):
            schedule = cls(pstages, n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
        else:
            schedule = cls(pstages[0], n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
        has_first, has_last = 0 in pp_cfg["stages"], S - 1 in pp_cfg["stages"]
        # FSDPMemTracker instruments the FSDP modules under its root: every stage module of this rank.
        tracker = make_tracker(torch, mods[0], optim, state)
        tracker._root_mod = torch.nn.ModuleList(mods)
        gc.collect()
        gc.disable()
        with tracker:
            state["phase"] = "optimizer"
            for p in params:
                p.grad = torch.zeros_like(p)
            optim.step()
            optim.zero_grad()
            for step in range(1, a.steps + 1):
                state["step"] = step
                state["phase"] = "step"
                tracker.reset_mod_stats()
                tokens = torch.randint(0, spec["vocab"], (plan["mbs"] * m, plan["seq"])) if has_first else None
                labels = torch.randint(0, spec["vocab"], (plan["mbs"] * m, plan["seq"])) if has_last else None
                losses = [] if has_last else None
                args = (tokens,) if has_first else ()
                schedule.step(*args, target=labels, losses=losses, return_outputs=False)
                del tokens, labels, losses, args
                state["phase"] = "optimizer"
                if not a.no_clip:
                    torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                optim.step()
                optim.zero_grad()
            state["phase"] = "end"
    rid = f"ref-{spec.get('name', 'custom')}-g{N}-pp{pp}-{pp_cfg['schedule']}-r{rank}-ac{plan['ac']}" \
          f"-mbs{plan['mbs']}-s{plan['seq']}-m{m}"
    rec_plan = record_plan(plan, m)
    if spec.get("moe"):  # SparseMoe: Hugging Face's loop over the experts (shardplan --moe-impl loop)
        rec_plan["moe_impl"] = "loop"
    rec_plan.update({"pp": pp, "pp_schedule": pp_cfg["schedule"], "virtual_stages": pp_cfg["V"]})
    if pp_cfg["pp_layers"]:
        rec_plan["pp_layers"] = pp_cfg["pp_layers"]
    return write_outputs(
        a, torch, dist, tracker.events, t0, rid, record_model, rec_plan, {"pp_rank": rank},
        f"tools/reference/run.py: pipeline rank {rank} of {pp} (stages {pp_cfg['stages']} of {S}, blocks per "
        f"stage {blocks}), global rank {rank * dp} of {N}, FakeTensorMode on the CPU device, "
        f"torch.distributed.pipelining Schedule{PP_SCHEDULES[pp_cfg['schedule']]} with {m} micro-batches, FSDP2 "
        f"fully_shard per block + embedding + [norm, output] + stage root (reshard_after_forward=False), ",
        sum(p.numel() for p in params))


def config_name(line: str) -> str:
    """Record name of a configuration line "MODEL GPUS FLAGS...": the model's file stem, g<GPUS> and the flags
    without dashes, e.g. llama3-8b-g8-layers-4-ac-none-mbs-1-seq-2048."""
    words = line.split()
    model = Path(words[0]).name.removesuffix(".json")
    return f"{model}-g{words[1]}" + "".join(
        ("-" + w[2:]) if w.startswith("--") else ("-" + w) for w in words[2:])


def run_batch(path: str, out_dir: str) -> int:
    """Runs every configuration line of `path` in this process (one torch import for all), writing
    OUT/records/NAME.json and OUT/traces/NAME.json; a record already there is kept. Returns 2 if any failed."""
    out = Path(out_dir)
    (out / "records").mkdir(parents=True, exist_ok=True)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    import torch  # noqa: F401 - imported once, before the children fork
    import torch.distributed  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    from torch.distributed._tools import fsdp2_mem_tracker  # noqa: F401

    status = 0
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = config_name(line)
        rec = out / "records" / f"{name}.json"
        if rec.is_file() and rec.stat().st_size > 0:
            continue
        words = line.split()
        argv = ["--model", words[0], "--gpus", words[1], *words[2:], "--id", f"ref-{name}", "-o", str(rec),
                "--trace", str(out / "traces" / f"{name}.json")]
        # One forked child per configuration: torch is imported once (here), and no state of one run (fused
        # optimizer kernels, the process group, the patched sharding propagator) leaks into the next.
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                rc = run(parse_args(argv))
            except PlanError as e:
                print(f"run.py: {name}: {e}", file=sys.stderr)
                rc = 2
            except Exception as e:  # noqa: BLE001 - report and go on with the next configuration
                print(f"run.py: {name}: {type(e).__name__}: {e}", file=sys.stderr)
                rc = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
        _, wstatus = os.waitpid(pid, 0)
        status = max(status, os.waitstatus_to_exitcode(wstatus))
    return status


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["--batch"]:
            if len(argv) != 4 or argv[2] != "--out-dir":
                raise PlanError("usage: run.py --batch CONFIGS.txt --out-dir DIR")
            return run_batch(argv[1], argv[3])
        a = parse_args(argv)
        return run(a)
    except PlanError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""shardplan real-run harness: train a shardplan model spec for a few steps under FSDP2/FSDP1 and write
one `shardplan.run/1` record (docs/formats.md) with measured peak memory and step time.

    torchrun --nproc-per-node 8 tools/realrun/realrun.py --model llama3-8b --seq 4096 --mbs 1 \
        --zero 3 --ac full --precision bf16-mixed --out run.json

    python3 tools/realrun/realrun.py ...   (one GPU without torchrun: a 1-rank process group is created)

torch only (no Hugging Face).  Model construction (build_model, param_count, build_record) also works on CPU
with torch 1.13; the FSDP2 / SAC / checkpoint-wrapper imports are guarded and only needed for a real run.
See tools/realrun/README.md.
"""

import argparse
import json
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))  # tools/common/: shared with the reference lane and the converter
from common.params import param_count  # noqa: E402
from common.sac import selective_policy  # noqa: E402

MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "mlp", "norm",
              "attn_bias", "mlp_bias", "norm_bias", "tied_embeddings", "positions", "max_positions", "seq")
RECORD_KEYS = {"schema", "id", "model", "cluster", "gpus", "plan", "measured", "source", "notes"}
PLAN_KEYS = {"runtime", "zero", "shard_group", "tp", "seq", "mbs", "grad_accum", "ac", "wrap", "prefetch",
             "reshard_after_forward", "precision", "reduce_dtype", "offload", "compile"}
MEASURED_KEYS = {"peak_allocated_bytes", "peak_active_bytes", "peak_reserved_bytes", "peak_device_bytes",
                 "step_s", "tokens_per_s_per_gpu", "mfu"}


# ================================================================================================
# Model spec
# ================================================================================================
def normalize_spec(d):
    """shardplan.model/1 dict (or a Hugging Face llama/mistral/mpt config.json) -> full spec with defaults."""
    if "model_type" in d or "hidden_size" in d or "d_model" in d:
        d = from_hf_config(d)
    s = {k: d[k] for k in MODEL_KEYS if k in d}
    if d.get("moe"):
        raise ValueError("MoE specs are not supported by the real-run harness")
    s.setdefault("name", "custom")
    s.setdefault("kv_heads", s["heads"])
    s.setdefault("head_dim", s["hidden"] // s["heads"])
    s.setdefault("mlp", "swiglu")
    s.setdefault("norm", "rmsnorm")
    s.setdefault("attn_bias", False)
    s.setdefault("mlp_bias", False)
    s.setdefault("norm_bias", s["norm"] == "layernorm")
    s.setdefault("tied_embeddings", False)
    s.setdefault("positions", "rotary")
    if s["positions"] == "learned":
        s.setdefault("max_positions", s.get("seq", 2048))
    return s


def from_hf_config(c):
    mt = c.get("model_type", "llama")
    if mt == "mpt" or "d_model" in c:
        attn = c.get("attn_config") or {}
        alibi = attn.get("alibi", False)
        learned = c.get("learned_pos_emb", True) and not alibi
        s = dict(name=c.get("_name_or_path") or "mpt", layers=c["n_layers"], hidden=c["d_model"], heads=c["n_heads"],
                 kv_heads=attn.get("kv_n_heads", c["n_heads"]), ffn_hidden=int(c.get("expansion_ratio", 4) * c["d_model"]),
                 vocab=c["vocab_size"], mlp="gelu", norm="layernorm", attn_bias=not c.get("no_bias", False),
                 mlp_bias=not c.get("no_bias", False), norm_bias=not c.get("no_bias", False), tied_embeddings=True,
                 positions="alibi" if alibi else ("learned" if learned else "rotary"))
        if learned:
            s["max_positions"] = c.get("max_seq_len", 2048)
        return s
    # llama / mistral / qwen2-like
    s = dict(name=c.get("_name_or_path") or mt, layers=c["num_hidden_layers"], hidden=c["hidden_size"],
             heads=c["num_attention_heads"], kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"],
             ffn_hidden=c["intermediate_size"], vocab=c["vocab_size"], mlp="swiglu", norm="rmsnorm",
             attn_bias=bool(c.get("attention_bias", mt == "qwen2")), mlp_bias=bool(c.get("mlp_bias", False)),
             tied_embeddings=bool(c.get("tie_word_embeddings", False)), positions="rotary")
    if c.get("head_dim"):
        s["head_dim"] = c["head_dim"]
    return s


def load_spec(name_or_path):
    path = name_or_path
    if not os.path.exists(path):
        cand = os.path.join(ROOT, "models", name_or_path + ".json")
        if os.path.exists(cand):
            path = cand
        else:
            raise SystemExit("model %r: neither a file nor models/%s.json" % (name_or_path, name_or_path))
    with open(path, encoding="utf-8") as f:
        return normalize_spec(json.load(f))


# ================================================================================================
# Model (Llama / MPT / GPT-style decoder)
# ================================================================================================
class Norm(nn.Module):
    def __init__(self, dim, kind, bias, eps=1e-5):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if (kind == "layernorm" and bias) else None

    def forward(self, x):
        if self.kind == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim, seq, theta=500000.0, device=None):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    t = torch.arange(seq, device=device).float()
    fr = torch.outer(t, inv)
    return torch.cos(fr), torch.sin(fr)


def apply_rope(x, cos, sin):
    # x: (b, s, heads, d); rotate pairs (even, odd)
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    c, s_ = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x1 * c - x2 * s_, x1 * s_ + x2 * c), dim=-1).flatten(-2)
    return out.type_as(x)


def sdpa_causal(q, k, v):
    # q,k,v: (b, heads, s, d)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(att.masked_fill(mask, float("-inf")).float(), -1).type_as(q) @ v


class Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        h, a, kv, d, b = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["attn_bias"]
        self.a, self.kv, self.d = a, kv, d
        self.wq = nn.Linear(h, a * d, bias=b)
        self.wk = nn.Linear(h, kv * d, bias=b)
        self.wv = nn.Linear(h, kv * d, bias=b)
        self.wo = nn.Linear(a * d, h, bias=b)
        self.rotary = s["positions"] == "rotary"

    def forward(self, x, rope):
        bsz, sl, _ = x.shape
        q = self.wq(x).view(bsz, sl, self.a, self.d)
        k = self.wk(x).view(bsz, sl, self.kv, self.d)
        v = self.wv(x).view(bsz, sl, self.kv, self.d)
        if self.rotary:
            cos, sin = rope
            q, k = apply_rope(q, cos[:sl], sin[:sl]), apply_rope(k, cos[:sl], sin[:sl])
        if self.kv != self.a:  # repeat_kv, as torchtitan does before SDPA
            r = self.a // self.kv
            k = k.repeat_interleave(r, dim=2)
            v = v.repeat_interleave(r, dim=2)
        o = sdpa_causal(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(o.transpose(1, 2).reshape(bsz, sl, self.a * self.d))


class MLP(nn.Module):
    def __init__(self, s):
        super().__init__()
        h, f, b = s["hidden"], s["ffn_hidden"], s["mlp_bias"]
        self.swiglu = s["mlp"] == "swiglu"
        if self.swiglu:
            self.w1 = nn.Linear(h, f, bias=b)  # gate
            self.w3 = nn.Linear(h, f, bias=b)  # up
            self.w2 = nn.Linear(f, h, bias=b)  # down
        else:
            self.fc1 = nn.Linear(h, f, bias=b)
            self.fc2 = nn.Linear(f, h, bias=b)

    def forward(self, x):
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.attn_norm = Norm(s["hidden"], s["norm"], s["norm_bias"])
        self.attn = Attention(s)
        self.mlp_norm = Norm(s["hidden"], s["norm"], s["norm_bias"])
        self.mlp = MLP(s)

    def forward(self, x, rope=None):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """Embedding -> blocks -> final norm -> LM head.  ALiBi: no parameters; the bias is omitted so that the
    flash SDPA kernel is used (memory and time as a fused ALiBi flash kernel would give, not as a materialized
    s x s bias)."""

    def __init__(self, s, seq):
        super().__init__()
        self.spec = s
        self.tok_embeddings = nn.Embedding(s["vocab"], s["hidden"])
        self.pos_embeddings = nn.Embedding(s["max_positions"], s["hidden"]) if s["positions"] == "learned" else None
        self.layers = nn.ModuleList([Block(s) for _ in range(s["layers"])])
        self.norm = Norm(s["hidden"], s["norm"], s["norm_bias"])
        self.output = None if s["tied_embeddings"] else nn.Linear(s["hidden"], s["vocab"], bias=False)
        self.seq = seq
        self._rope = None

    def rope(self, device):
        if self.spec["positions"] != "rotary":
            return None
        if self._rope is None or self._rope[0].device != device:
            self._rope = rope_tables(self.spec["head_dim"], self.seq, device=device)  # not a buffer: never sharded
        return self._rope

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(torch.arange(tokens.shape[1], device=tokens.device))[None]
        rope = self.rope(tokens.device)
        for blk in self.layers:
            x = blk(x, rope)
        x = self.norm(x)
        w = self.tok_embeddings.weight if self.output is None else self.output.weight
        return F.linear(x, w)


def init_weights_(module, std=0.02):
    """Initialise the direct parameters of one module (works on DTensor params too)."""
    with torch.no_grad():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, Norm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def build_model(spec, seq, device="cpu", dtype=torch.float32):
    """Build the decoder.  device="meta" needs torch >= 2.0 (torch.device as a context manager); any other
    device builds there directly and initialises the weights."""
    dev = torch.device(device)
    use_ctx = hasattr(torch.device, "__enter__")
    if dev.type == "meta" and not use_ctx:
        raise RuntimeError("meta-device construction needs torch >= 2.0")
    with (dev if use_ctx else _nullctx()):
        m = Decoder(spec, seq)
    if dev.type != "meta":
        m = m.to(device=dev, dtype=dtype)
        for mod in m.modules():
            init_weights_(mod)
    return m


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def loss_fn(logits, labels):
    # fp32 cross-entropy on logits.float(), as torchtitan
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(0, 1))


# ================================================================================================
# Record
# ================================================================================================
def detect_cluster(gpu_name):
    n = (gpu_name or "").upper()
    if "H200" in n:
        return "hgx-h200"
    if "H100" in n:
        return "dgx-h100"
    if "B200" in n or "GB200" in n:
        return "dgx-b200" if "GB200" not in n else "gb200-nvl72"
    if "A100" in n and "80GB" in n:
        return "dgx-a100-80g"
    if "A100" in n:
        return "dgx-a100-40g"
    if "V100" in n and "32GB" in n:
        return "dgx-v100-32g"
    return None


def build_record(run_id, spec, cluster, gpus, plan, measured, notes, source):
    rec = {"schema": "shardplan.run/1", "id": run_id, "model": dict(spec, schema="shardplan.model/1"),
           "cluster": cluster, "gpus": int(gpus), "plan": plan, "measured": measured, "source": source,
           "notes": notes}
    errs = validate_record(rec)
    if errs:
        raise ValueError("invalid record: " + "; ".join(errs))
    return rec


def validate_record(rec):
    errs = []
    for k in ("schema", "id", "model", "cluster", "gpus", "plan", "measured"):
        if k not in rec:
            errs.append("missing " + k)
    if set(rec) - RECORD_KEYS:
        errs.append("unknown keys %s" % sorted(set(rec) - RECORD_KEYS))
    if rec.get("schema") != "shardplan.run/1":
        errs.append("schema")
    if set(rec.get("plan", {})) - PLAN_KEYS:
        errs.append("unknown plan keys %s" % sorted(set(rec["plan"]) - PLAN_KEYS))
    if set(rec.get("measured", {})) - MEASURED_KEYS:
        errs.append("unknown measured keys %s" % sorted(set(rec["measured"]) - MEASURED_KEYS))
    for k, v in rec.get("measured", {}).items():
        if k.endswith("_bytes") and not isinstance(v, int):
            errs.append("%s must be an integer" % k)
    m = rec.get("model")
    if isinstance(m, dict) and set(m) - set(MODEL_KEYS) - {"schema", "source", "notes", "description"}:
        errs.append("unknown model keys")
    return errs


# ================================================================================================
# Distributed run
# ================================================================================================
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="shardplan real-run harness (FSDP2/FSDP1, synthetic tokens)")
    ap.add_argument("--model", required=True, help="models/NAME.json preset name, a model spec file, or an HF config.json")
    ap.add_argument("--layers", type=int, help="override the number of blocks (smaller test models)")
    ap.add_argument("--runtime", choices=["fsdp2", "fsdp1"], default="fsdp2")
    ap.add_argument("--zero", type=int, choices=[2, 3], default=3, help="3: reshard after forward; 2: keep unsharded")
    ap.add_argument("--shard-group", type=int, help="ranks per shard group (HSDP when < world size)")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mbs", type=int, default=1)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--accum-no-sync", action="store_true",
                    help="skip the gradient reduce on non-final micro-batches (default: sync every micro-batch)")
    ap.add_argument("--ac", choices=["none", "selective", "full"], default="none")
    ap.add_argument("--sac-mode", choices=["op", "layer"], default="op",
                    help="selective AC: op = torchtitan per-op policy; layer = checkpoint every other block")
    ap.add_argument("--precision", choices=["bf16-mixed", "bf16-true", "fp32"], default="bf16-mixed")
    ap.add_argument("--reduce-dtype", choices=["fp32", "bf16"], help="default: fp32 for bf16-mixed, bf16 for bf16-true")
    ap.add_argument("--prefetch", type=int, help="explicit forward/backward prefetch depth (blocks ahead)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each block")
    ap.add_argument("--steps", type=int, default=6, help="measured steps after warm-up")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--cluster", help="cluster preset for the record (default: from the GPU name)")
    ap.add_argument("--id", help="record id (default: derived from the plan)")
    ap.add_argument("--snapshot", help="write a CUDA memory snapshot (pickle) of steps 1-2 to this path (rank 0)")
    ap.add_argument("--profile", help="write a Chrome trace of two steps to this path (rank 0)")
    ap.add_argument("--out", required=True, help="record JSON path (details go to OUT.details.json)")
    return ap.parse_args(argv)


def fsdp2_api():
    try:
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy  # torch 2.4/2.5
    return fully_shard, MixedPrecisionPolicy


def sac_policy_fn():
    """torchtitan's op-level SAC policy (tools/common/sac.py): save SDPA outputs (and a few cheap ops) and every
    other matmul output; recompute the rest. Returns a maker of fresh policies."""
    from torch.utils.checkpoint import CheckpointPolicy
    ops = torch.ops.aten
    save = {ops.mm.default, ops.max.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"):
        if hasattr(ops, name):
            save.add(getattr(ops, name).default)
    return lambda: selective_policy(CheckpointPolicy, save, (ops.mm.default,))


def apply_ac(model, mode, sac_mode):
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper, CheckpointImpl
    for i, blk in enumerate(model.layers):
        if mode == "full" or (mode == "selective" and sac_mode == "layer"):
            if mode == "selective" and i % 2 == 1:
                continue
            w = checkpoint_wrapper(blk, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)
        else:
            from torch.utils.checkpoint import create_selective_checkpoint_contexts
            make = sac_policy_fn()
            w = checkpoint_wrapper(blk, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False,
                                   context_fn=lambda: create_selective_checkpoint_contexts(make()))
        model.layers[i] = w


def dtype_of(name):
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def shard_fsdp2(model, args, mesh, reduce_dtype):
    fully_shard, MixedPrecisionPolicy = fsdp2_api()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype) \
        if args.precision == "bf16-mixed" else MixedPrecisionPolicy()
    raf = args.zero == 3
    for blk in model.layers:
        fully_shard(blk, mesh=mesh, reshard_after_forward=raf, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=raf, mp_policy=mp)  # root: embeddings, norm, head
    if args.prefetch:
        blocks = list(model.layers)
        n = args.prefetch
        for i, blk in enumerate(blocks):
            fwd = blocks[i + 1:i + 1 + n]
            bwd = list(reversed(blocks[max(0, i - n):i]))
            if fwd:
                blk.set_modules_to_forward_prefetch(fwd)
            if bwd:
                blk.set_modules_to_backward_prefetch(bwd)
    return model


def shard_fsdp1(model, args, mesh, reduce_dtype, device):
    from torch.distributed.fsdp import (FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy,
                                        BackwardPrefetch)
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    hybrid = mesh.ndim == 2
    strat = {(3, False): ShardingStrategy.FULL_SHARD, (2, False): ShardingStrategy.SHARD_GRAD_OP,
             (3, True): ShardingStrategy.HYBRID_SHARD, (2, True): ShardingStrategy._HYBRID_SHARD_ZERO2}[(args.zero, hybrid)]
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype, buffer_dtype=torch.bfloat16) \
        if args.precision == "bf16-mixed" else None
    wrap_cls = {type(b) for b in model.layers}

    def param_init_fn(m):
        m.to_empty(device=device, recurse=False)
        init_weights_(m)

    kw = dict(auto_wrap_policy=ModuleWrapPolicy(wrap_cls), sharding_strategy=strat, mixed_precision=mp,
              device_id=device, limit_all_gathers=True, use_orig_params=True,
              backward_prefetch=None if args.prefetch == 0 else BackwardPrefetch.BACKWARD_PRE,
              forward_prefetch=bool(args.prefetch), param_init_fn=param_init_fn)
    if hybrid:
        kw["device_mesh"] = mesh
    else:
        kw["process_group"] = mesh.get_group()
    return FSDP(model, **kw)


def mem_stats():
    st = torch.cuda.memory_stats()
    keys = ["allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak",
            "inactive_split_bytes.all.peak", "allocated_bytes.all.current", "reserved_bytes.all.current",
            "active_bytes.all.current", "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms",
            "num_device_alloc", "num_device_free"]
    return {k: int(st.get(k, 0)) for k in keys}


def environment():
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "host": socket.gethostname(),
           "python": sys.version.split()[0]}
    try:
        v = torch.cuda.nccl.version()
        env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        env["nccl"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=p.name, gpu_total_memory_bytes=int(p.total_memory), gpu_sm_count=p.multi_processor_count)
    return env


def main(argv=None):
    args = parse_args(argv)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29511"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                 ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    try:
        dist.init_process_group("nccl", device_id=device)  # torch >= 2.3: eager NCCL init, bound to this GPU
    except TypeError:
        dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    sg = args.shard_group or world
    if world % sg:
        raise SystemExit("--shard-group must divide the world size")
    mesh = init_device_mesh("cuda", (world // sg, sg), mesh_dim_names=("replicate", "shard")) if sg < world \
        else init_device_mesh("cuda", (world,), mesh_dim_names=("shard",))

    spec = load_spec(args.model)
    if args.layers:
        spec["layers"] = args.layers
        spec["name"] = "%s-L%d" % (spec["name"], args.layers)
    if spec["positions"] == "learned":
        spec["max_positions"] = max(spec.get("max_positions", 0), args.seq)
    spec["seq"] = args.seq
    reduce_name = args.reduce_dtype or ("fp32" if args.precision in ("bf16-mixed", "fp32") else "bf16")
    reduce_dtype = dtype_of(reduce_name)
    param_dtype = torch.bfloat16 if args.precision == "bf16-true" else torch.float32

    torch.manual_seed(0)
    tied = spec["tied_embeddings"]
    # Untied: build on meta, wrap, shard, materialise shards (torchtitan order).  Tied: meta->device would untie
    # the shared weight, so tied models are built on the device before sharding.
    if args.runtime == "fsdp2":
        model = build_model(spec, args.seq, device=device if tied else "meta", dtype=param_dtype)
        if param_dtype != torch.float32 and not tied:
            model = model.to(param_dtype)
        apply_ac(model, args.ac, args.sac_mode)
        if args.compile:
            for i, blk in enumerate(model.layers):
                model.layers[i] = torch.compile(blk)
        shard_fsdp2(model, args, mesh, reduce_dtype)
        if not tied:
            model.to_empty(device=device)
            for mod in model.modules():
                init_weights_(mod)
    else:
        model = build_model(spec, args.seq, device="meta" if not tied else device, dtype=param_dtype)
        if param_dtype != torch.float32 and not tied:
            model = model.to(param_dtype)
        apply_ac(model, args.ac, args.sac_mode)
        model = shard_fsdp1(model, args, mesh, reduce_dtype, device)
        if args.compile:
            model = torch.compile(model)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        opt_impl = "fused"
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
        opt_impl = "foreach"

    g = torch.Generator(device=device)
    g.manual_seed(1234 + rank)

    def batch():
        t = torch.randint(0, spec["vocab"], (args.mbs, args.seq + 1), device=device, generator=g)
        return t[:, :-1], t[:, 1:]

    inner = model.module if args.runtime == "fsdp1" and hasattr(model, "module") else model

    def step():
        for mb in range(args.grad_accum):
            last = mb == args.grad_accum - 1
            if args.accum_no_sync and args.grad_accum > 1:
                if args.runtime == "fsdp2":
                    model.set_requires_gradient_sync(last)
                    ctx = _nullctx()
                else:
                    ctx = model.no_sync() if not last else _nullctx()
            else:
                ctx = _nullctx()
            with ctx:
                x, y = batch()
                loss = loss_fn(model(x), y) / args.grad_accum
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.synchronize()
    base = mem_stats()
    torch.cuda.reset_peak_memory_stats()
    if args.snapshot and rank == 0:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    times, losses = [], []
    details = {"after_init": base}
    total = args.warmup + args.steps
    prof = None
    for i in range(total):
        if args.profile and rank == 0 and i == args.warmup:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA], record_shapes=False)
            prof.__enter__()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach().float().item()))
        if prof is not None and i == args.warmup + 1:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(args.profile)
            prof = None
        if i == 0:
            details["step1"] = mem_stats()
            torch.cuda.reset_peak_memory_stats()
        if i == 1 and args.snapshot and rank == 0:
            torch.cuda.memory._dump_snapshot(args.snapshot)
            torch.cuda.memory._record_memory_history(enabled=None)
        if i >= args.warmup:
            times.append(dt)
    details["steady"] = mem_stats()
    details["step_times_s"] = times
    details["losses"] = losses
    mine = {"rank": rank, "details": details, "env": environment()}
    allr = [None] * world
    dist.all_gather_object(allr, mine)
    if rank == 0:
        s1 = [r["details"]["step1"] for r in allr]
        ss = [r["details"]["steady"] for r in allr]

        def peak(key):
            return max(max(a[key] for a in s1), max(b[key] for b in ss))
        med = statistics.median(max(r["details"]["step_times_s"][i] for r in allr) for i in range(len(times)))
        tokens = args.mbs * args.seq * args.grad_accum
        env = allr[0]["env"]
        cluster = args.cluster or detect_cluster(env.get("gpu")) or "dgx-h100"
        plan = {"runtime": args.runtime, "zero": args.zero, "shard_group": sg, "tp": 1, "seq": args.seq,
                "mbs": args.mbs, "grad_accum": args.grad_accum, "ac": args.ac, "wrap": 1,
                "precision": args.precision, "reduce_dtype": reduce_name, "compile": bool(args.compile),
                "reshard_after_forward": args.zero == 3}
        if args.prefetch is not None:
            plan["prefetch"] = args.prefetch
        measured = {"peak_allocated_bytes": peak("allocated_bytes.all.peak"),
                    "peak_reserved_bytes": peak("reserved_bytes.all.peak"),
                    "peak_active_bytes": peak("active_bytes.all.peak"),
                    "step_s": round(med, 6), "tokens_per_s_per_gpu": round(tokens / med, 3)}
        rid = args.id or "realrun-%s-%s-z%d-s%d-mbs%d-ga%d-%s-%s-g%d" % (
            spec["name"], args.runtime, args.zero, args.seq, args.mbs, args.grad_accum, args.ac, args.precision, world)
        retries = max(r["details"]["steady"]["num_alloc_retries"] for r in allr)
        notes = ("tools/realrun/realrun.py; env torch %s, CUDA %s, NCCL %s, GPU %s; optimizer AdamW %s; "
                 "peaks = max over ranks of max(step 1, steps 2..%d); step_s = median over %d steps after %d "
                 "warm-up of the slowest rank; num_alloc_retries %d; selective AC mode %s; details in %s"
                 % (env.get("torch"), env.get("cuda"), env.get("nccl"), env.get("gpu"), opt_impl, total,
                    len(times), args.warmup, retries, args.sac_mode if args.ac == "selective" else "-",
                    os.path.basename(args.out) + ".details.json"))
        spec_out = {k: v for k, v in spec.items() if k in MODEL_KEYS}
        rec = build_record(rid, spec_out, cluster, world, plan, measured, notes,
                           "measured with tools/realrun/realrun.py on %s" % env.get("host"))
        _write_json(args.out, rec)
        _write_json(args.out + ".details.json",
                    {"environment": env, "args": vars(args), "parameters": param_count(spec),
                     "param_count_model": sum(p.numel() for p in inner.parameters()) if args.runtime == "fsdp2" else None,
                     "ranks": allr})
        print(json.dumps(rec["measured"]))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())

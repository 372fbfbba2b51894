"""The harness's decoder (Llama / MPT / GPT-style), built from a spec; plain torch."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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

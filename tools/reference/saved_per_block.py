#!/usr/bin/env python3
"""Bytes one Llama transformer block saves for backward, eager vs torch.compile, under no / full / selective AC,
for torchtitan's block of March 2024 (torchtrain 83c879f18, PR 165: Python fp32 RMSNorm, complex fp32 rotary) and
of torchtitan 0.3.0 (nn.RMSNorm, fused on a GPU), measured with the real PyTorch of tools/pyenv.sh on the CPU
(inductor's CPU backend: the min-cut partitioner that picks the saved set is the same as on a GPU).

Usage: $(bash tools/pyenv.sh) tools/reference/saved_per_block.py [--dims 256,4,688 --tokens 256 ...]
Prints one line per (block, mode, ac): saved bytes per token and in units of h (bytes per token / hidden).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/common/
from common.knob_args import add_knob_args  # noqa: E402
from common.sac import selective_policy  # noqa: E402


def build(torch):
    nn, F = torch.nn, torch.nn.functional

    # ---- torchtrain 83c879f18 (2024-03-28, "Used per-parameter FSDP (#165)") torchtrain/models/llama/model.py,
    # verbatim but for docstrings: activations are (bs * seqlen, dim) between blocks.
    class RMSNorm2024(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            output = self._norm(x.float()).type_as(x)
            return output * self.weight

    def reshape_for_broadcast(freqs_cis, x):
        ndim = x.ndim
        shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
        return freqs_cis.view(*shape)

    def apply_rotary_emb(xq, xk, freqs_cis):
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
        xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
        xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    def repeat_kv(x, n_rep):
        bs, slen, n_kv_heads, head_dim = x.shape
        if n_rep == 1:
            return x
        return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(
            bs, slen, n_kv_heads * n_rep, head_dim)

    class Attention2024(nn.Module):
        def __init__(self, dim, n_heads, n_kv_heads):
            super().__init__()
            self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
            self.n_rep = n_heads // n_kv_heads
            self.head_dim = dim // n_heads
            self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
            self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
            self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
            self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

        def forward(self, x, freqs_cis):
            seqlen, _ = freqs_cis.shape
            bs_seqlen, _ = x.shape
            bsz = bs_seqlen // seqlen
            xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
            xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
            xk = xk.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
            xv = xv.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
            xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
            keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
            xq, xk, xv = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
            output = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
            output = output.transpose(1, 2).contiguous()
            output = output.view(bsz * seqlen, -1)
            return self.wo(output)

    class FeedForward(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block2024(nn.Module):
        def __init__(self, dim, heads, kv_heads, ffn):
            super().__init__()
            self.attention = Attention2024(dim, heads, kv_heads)
            self.feed_forward = FeedForward(dim, ffn)
            self.attention_norm = RMSNorm2024(dim, eps=1e-5)
            self.ffn_norm = RMSNorm2024(dim, eps=1e-5)

        def forward(self, x, freqs_cis):
            h = x + self.attention(self.attention_norm(x), freqs_cis)
            return h + self.feed_forward(self.ffn_norm(h))

    # ---- torchtitan 0.3.0 (models/llama3/model.py Llama3TransformerBlock, models/common/{attention,
    # feed_forward,rope,nn_modules}.py): nn.RMSNorm; activations (bs, seqlen, dim). On a GPU eager nn.RMSNorm
    # runs aten::_fused_rms_norm (weight dtype == input dtype), which saves input, weight and the fp32 rstd
    # (derivatives.yaml); on the CPU the same op decomposes and would save fp32 copies, so the eager block
    # uses an autograd.Function with the fused op's saved set and real values. Compiled, nn.RMSNorm is traced
    # (inductor decomposes _fused_rms_norm on a GPU, torch/_decomp/decompositions.py; the CPU composite is the
    # same arithmetic) and the partitioner picks what to save.
    class FusedRMSNormFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            ctx.save_for_backward(x, weight, rstd)
            return (xf * rstd).to(x.dtype) * weight

        @staticmethod
        def backward(ctx, g):
            x, weight, rstd = ctx.saved_tensors
            xf, gf = x.float(), (g * weight).float()
            xhat = xf * rstd
            dx = rstd * (gf - xhat * (gf * xhat).mean(-1, keepdim=True))
            dw = (g.float() * xhat).sum(dim=tuple(range(x.ndim - 1)))
            return dx.to(x.dtype), dw.to(weight.dtype), None

    class RMSNorm030(nn.RMSNorm):
        fused_eager = True

        def forward(self, x):
            if RMSNorm030.fused_eager:
                return FusedRMSNormFn.apply(x, self.weight, self.eps)
            return super().forward(x)

    class Attention030(Attention2024):
        def forward(self, x, freqs_cis):
            bs, seqlen, _ = x.shape
            xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
            xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
            xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
            xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
            q, k, v = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_rep > 1)
            return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))

    class Block030(nn.Module):
        def __init__(self, dim, heads, kv_heads, ffn):
            super().__init__()
            self.attention = Attention030(dim, heads, kv_heads)
            self.feed_forward = FeedForward(dim, ffn)
            self.attention_norm = RMSNorm030(dim, eps=1e-5)
            self.ffn_norm = RMSNorm030(dim, eps=1e-5)

        def forward(self, x, freqs_cis):
            h = x + self.attention(self.attention_norm(x), freqs_cis)
            return h + self.feed_forward(self.ffn_norm(h))

    return Block2024, Block030, RMSNorm030


def sac_context(torch):
    """torchtitan's op-level SAC policy (83c879f18 parallelize_llama.py and 0.3.0 distributed/
    activation_checkpoint.py): save mm and the attention ops' outputs, recompute every second mm."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default}

    def fn():
        return create_selective_checkpoint_contexts(selective_policy(CheckpointPolicy, save, (aten.mm.default,)))

    return fn


def measure(torch, block, x, freqs, params):
    """Unique bytes of the tensors packed for backward during one forward, excluding the block's parameters and
    the rotary buffer (they live anyway)."""
    skip = {p.untyped_storage().data_ptr() for p in params} | {freqs.untyped_storage().data_ptr()}
    seen, shapes = {}, {}

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in skip and ptr != 0:
            seen[ptr] = st.nbytes()
            shapes[ptr] = "%s%s" % (str(t.dtype).replace("torch.", ""), list(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block(x, freqs)
    # backward runs (checks the graph is complete and that recomputation works)
    out.float().sum().backward()
    return sum(seen.values()), len(seen), sorted(shapes.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="256,4,4,688", help="hidden,heads,kv_heads,ffn")
    ap.add_argument("--bs", type=int, default=2)
    add_knob_args(ap, ["seq"], defaults={"seq": 128}, help_suffix={"seq": "this script's default: 128"})
    ap.add_argument("--blocks", default="2024,0.3.0")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--acs", default="none,full,selective")
    ap.add_argument("--verbose", action="store_true", help="list the saved tensors (dtype and shape)")
    a = ap.parse_args()
    import torch
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    h, heads, kv, ffn = (int(v) for v in a.dims.split(","))
    hd = h // heads
    T = a.bs * a.seq
    Block2024, Block030, RMSNorm030 = build(torch)
    freqs_1 = 1.0 / (10000.0 ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
    ang = torch.outer(torch.arange(a.seq).float(), freqs_1)
    freqs = torch.polar(torch.ones_like(ang), ang)
    print("# torch %s, h=%d heads=%d kv_heads=%d ffn=%d tokens=%d (bs %d x seq %d), bf16"
          % (torch.__version__, h, heads, kv, ffn, T, a.bs, a.seq))
    for which in a.blocks.split(","):
        for mode in a.modes.split(","):
            for ac in a.acs.split(","):
                torch._dynamo.reset()
                cls = Block2024 if which == "2024" else Block030
                RMSNorm030.fused_eager = mode == "eager"
                blk = cls(h, heads, kv, ffn).to(torch.bfloat16)
                shape = (T, h) if which == "2024" else (a.bs, a.seq, h)
                x = torch.randn(shape, dtype=torch.bfloat16, requires_grad=True)
                if ac == "none":
                    fn = blk
                elif ac == "full":
                    def fn(x, f, blk=blk):
                        return checkpoint(blk, x, f, use_reentrant=False)
                else:
                    ctx_fn = sac_context(torch)

                    def fn(x, f, blk=blk, ctx_fn=ctx_fn):
                        return checkpoint(blk, x, f, use_reentrant=False, context_fn=ctx_fn,
                                          respect_saved_tensors_hooks=True)
                if mode == "compile":
                    fn = torch.compile(fn)
                measure(torch, fn, x, freqs, list(blk.parameters()))  # warm-up (compiles)
                x.grad = None
                total, n, shapes = measure(torch, fn, x, freqs, list(blk.parameters()))
                print("%-6s %-8s %-10s saved %10d B in %2d tensors = %8.3f B/token = %6.3f h"
                      % (which, mode, ac, total, n, total / T, total / T / h))
                if a.verbose:
                    print("    " + " ".join(shapes))
                sys.stdout.flush()


if __name__ == "__main__":
    main()

"""The reference lane's model classes (built over the torch module passed in, imported lazily by the caller)."""


# ---------------------------------------------------------------------------------------------------------------
# The model: torchtitan's Llama 3 structure (torchtitan 0.3.0 torchtitan/models/common/{attention,feed_forward,
# rope}.py): complex rotary embedding in fp32, SDPA, SwiGLU, nn.RMSNorm, untied output head.


def norm_factory(torch):
    """The norms as they run on a GPU (fused kernels' allocations); returns make_norm(spec)."""
    nn = torch.nn

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

    def make_norm(s):
        if s["norm"] == "layernorm":
            return LayerNorm(s["hidden"], eps=1e-5, bias=s["norm_bias"])
        return RMSNorm(s["hidden"], eps=1e-5)

    return make_norm


def mlp_classes(torch):
    """The blocks' MLPs: SwiGLU (torchtitan FeedForward), GELU (MPT) and the Mixtral sparse MoE; returns
    (FeedForward, GeluMLP, SparseMoe)."""
    nn = torch.nn
    F = torch.nn.functional

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
    return FeedForward, GeluMLP, SparseMoe


def build_model_classes(torch):
    nn = torch.nn
    make_norm = norm_factory(torch)
    FeedForward, GeluMLP, SparseMoe = mlp_classes(torch)

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
            self.skip_lm_head = False
            if s.get("tied_embeddings"):
                self.output.weight = self.tok_embeddings.weight

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            fc = self.freqs_cis[: tokens.shape[1]] if self.freqs_cis.is_complex() else self.freqs_cis
            for layer in self.layers.values():
                h = layer(h, fc)
            if self.skip_lm_head:
                # torchtitan 0.3.0 models/common/decoder.py: with the chunked loss the model returns the final
                # norm's output and ChunkedLossWrapper runs the head per chunk.
                return self.norm(h)
            return self.output(self.norm(h))
    def sdpa(q, k, v):
        # On the GPU, F.scaled_dot_product_attention with bf16 inputs runs FlashAttention-2
        # (aten::_scaled_dot_product_flash_attention, which handles GQA natively and saves out + fp32 logsumexp).
        # The CPU has a different kernel choice (math fallback for GQA), so call the CUDA op's meta/fake
        # implementation directly on the fake tensors: the same outputs, saved tensors and backward as on the GPU.
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
        return out

    return Transformer

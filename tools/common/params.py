"""The closed-form parameter count of a shardplan.model/1 decoder (the simulator's graph counts the same tensors,
simulator/model/model_graph.cpp; tests/realrun/test_realrun_smoke.py checks it against a derivation of its own)."""


def param_count(spec):
    """Embedding + layers x (attention + MLP + two norms) + final norm + head (unless tied) + learned positions.
    Attention: q, o = h x (heads x head_dim) each, k, v = h x (kv_heads x head_dim) each; biases on q, k, v and o
    with attn_bias (not o with qkv_bias_only, Qwen2). MLP: 3 h f (SwiGLU) or 2 h f (GELU), biases 2f + h or f + h
    with mlp_bias; a MoE block holds `experts` such MLPs plus the router's row per expert (h each). A norm holds h
    weights, 2h with a bias (LayerNorm's default)."""
    h, L, V = spec["hidden"], spec["layers"], spec["vocab"]
    a = spec["heads"]
    kv = spec.get("kv_heads", a)
    d = spec.get("head_dim", h // a)
    f = spec["ffn_hidden"]
    attn = h * a * d + 2 * h * kv * d + a * d * h
    if spec.get("attn_bias"):
        attn += a * d + 2 * kv * d + (0 if spec.get("qkv_bias_only") else h)
    if spec["mlp"] == "swiglu":
        mlp = 3 * h * f + ((2 * f + h) if spec.get("mlp_bias") else 0)
    else:
        mlp = 2 * h * f + ((f + h) if spec.get("mlp_bias") else 0)
    if spec.get("moe"):
        mlp = spec["moe"]["experts"] * (mlp + h)
    norm_w = h * (2 if spec["norm"] == "layernorm" and spec.get("norm_bias", True) else 1)
    total = L * (attn + mlp + 2 * norm_w) + norm_w + V * h
    if not spec.get("tied_embeddings"):
        total += V * h
    if spec.get("positions") == "learned":
        total += spec["max_positions"] * h
    return total

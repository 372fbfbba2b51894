"""The harness's model spec: shardplan.model/1 or a Hugging Face config.json, with defaults."""
import json
import os

from harness import ROOT


MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "mlp", "norm",
              "attn_bias", "mlp_bias", "norm_bias", "tied_embeddings", "positions", "max_positions", "seq")

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

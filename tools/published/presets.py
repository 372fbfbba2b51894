"""The model presets the tool ships (tools/convert_published.py); the closed-form parameter count is
tools/common/params.py's."""
import json
import os

from common.params import param_count
from published import TOOLS

GIB = 1 << 30
MIB = 1 << 20

FP8_REASON = "MX (block-scaled) fp8 compute not modelled"

# --------------------------------------------------------------------------------------------------
# Model presets the tool ships (models/*.json).  A published architecture is mapped to a preset name
# only when every field below matches; otherwise an inline spec is emitted.
# --------------------------------------------------------------------------------------------------
_LLAMA = dict(mlp="swiglu", norm="rmsnorm", positions="rotary", tied_embeddings=False,
              attn_bias=False, mlp_bias=False, norm_bias=False)
PRESETS = {
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000, **_LLAMA),
    "llama2-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=13824, vocab=32000, **_LLAMA),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, **_LLAMA),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, **_LLAMA),
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256, **_LLAMA),
    "llama3.1-405b": dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248, vocab=128256,
                          **_LLAMA),
}
ARCH_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "norm", "positions",
             "tied_embeddings", "attn_bias", "mlp_bias", "norm_bias")


_PRESET_CACHE = {}


def _arch_of(d):
    """Architecture fields of a model spec with docs/formats.md defaults filled in."""
    a = {k: d.get(k) for k in ARCH_KEYS}
    a["kv_heads"] = d.get("kv_heads", d["heads"])
    a["tied_embeddings"] = bool(d.get("tied_embeddings", False))
    a["attn_bias"] = bool(d.get("attn_bias", False))
    a["mlp_bias"] = bool(d.get("mlp_bias", False))
    a["norm_bias"] = bool(d.get("norm_bias", d.get("norm") == "layernorm"))
    if d.get("head_dim") not in (None, d["hidden"] // d["heads"]) or d.get("moe"):
        a["layers"] = None  # never matches a published dense architecture
    return a


def load_presets():
    """models/*.json of this repository when present (the presets the tool ships), else PRESETS above."""
    if "p" not in _PRESET_CACHE:
        out = {}
        mdir = os.path.join(TOOLS, "..", "models")
        if os.path.isdir(mdir):
            for fn in sorted(os.listdir(mdir)):
                if fn.endswith(".json"):
                    try:
                        with open(os.path.join(mdir, fn), encoding="utf-8") as f:
                            d = json.load(f)
                        out[d.get("name") or fn[:-5]] = _arch_of(d)
                    except (ValueError, KeyError, TypeError):
                        continue
        if not out:
            out = {k: _arch_of(v) for k, v in PRESETS.items()}
        _PRESET_CACHE["p"] = out
    return _PRESET_CACHE["p"]


__all__ = ["GIB", "MIB", "FP8_REASON", "PRESETS", "ARCH_KEYS", "load_presets", "param_count"]

"""The reference lane's model spec: load a preset or a spec file, normalize it as simulator/model/model_spec.cpp
does. The closed-form parameter count of the modules lane/models.py builds is tools/common/params.py's
(param_count, imported here for the lane)."""
from __future__ import annotations

import json
from pathlib import Path

from common.params import param_count

ROOT = Path(__file__).resolve().parents[3]


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
    if s.get("rope_cache") not in (None, "none"):  # the lane's model holds one freqs_cis, not one per layer
        unsupported.append("rope_cache")
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


__all__ = ["ROOT", "PlanError", "load_spec", "normalize_spec", "param_count"]

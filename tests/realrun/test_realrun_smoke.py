"""CPU smoke test of tools/realrun/realrun.py: model construction and record writing.

Run from the repo root:  python3 -m unittest discover -s tests/realrun -p 'test_*.py'
Skips when torch is not installed, except in CI (CI=true), where that is a failure: tools/test.sh runs it in the
pinned environment of tools/pyenv.sh, which has torch.
"""
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
    if os.environ.get("CI") == "true":
        raise ImportError("torch not available: in CI (CI=true) this test runs in tools/pyenv.sh's environment")
    print("skipped: torch not available")

if HAVE_TORCH:
    sys.path.insert(0, os.path.join(ROOT, "tools", "realrun"))
    import realrun  # noqa: E402


def closed_form(s):
    """embeddings + per layer (q: h*a*d, k,v: h*kv*d each, o: a*d*h, MLP 3hf swiglu / 2hf gelu, two norms,
    biases) + final norm + head unless tied + learned positions."""
    h, L, V = s["hidden"], s["layers"], s["vocab"]
    a = s["heads"]
    kv = s.get("kv_heads", a)
    d = s.get("head_dim", h // a)
    f = s["ffn_hidden"]
    q, k, v, o = h * a * d, h * kv * d, h * kv * d, a * d * h
    attn_b = (a * d + kv * d + kv * d + h) if s.get("attn_bias") else 0
    if s["mlp"] == "swiglu":
        mlp, mlp_b = 3 * h * f, ((2 * f + h) if s.get("mlp_bias") else 0)
    else:
        mlp, mlp_b = 2 * h * f, ((f + h) if s.get("mlp_bias") else 0)
    norm = h * (2 if s["norm"] == "layernorm" and s.get("norm_bias", True) else 1)
    per_layer = q + k + v + o + attn_b + mlp + mlp_b + 2 * norm
    emb = V * h
    head = 0 if s.get("tied_embeddings") else V * h
    pos = s["max_positions"] * h if s.get("positions") == "learned" else 0
    return emb + pos + L * per_layer + norm + head


LLAMA_TINY = {"schema": "shardplan.model/1", "name": "tiny-llama", "layers": 2, "hidden": 64, "heads": 4,
              "kv_heads": 2, "ffn_hidden": 176, "vocab": 97, "mlp": "swiglu", "norm": "rmsnorm",
              "positions": "rotary", "tied_embeddings": False}
MPT_TINY = {"schema": "shardplan.model/1", "name": "tiny-mpt", "layers": 3, "hidden": 48, "heads": 6,
            "ffn_hidden": 192, "vocab": 101, "mlp": "gelu", "norm": "layernorm", "norm_bias": True,
            "attn_bias": True, "mlp_bias": True, "positions": "learned", "max_positions": 32,
            "tied_embeddings": True}
BLOOM_TINY = dict(MPT_TINY, name="tiny-bloom", positions="alibi")
HF_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 1, "intermediate_size": 160, "vocab_size": 128, "tie_word_embeddings": False}


@unittest.skipUnless(HAVE_TORCH, "torch not available")
class RealrunSmoke(unittest.TestCase):
    def check(self, raw, seq=16):
        spec = realrun.normalize_spec(raw)
        m = realrun.build_model(spec, seq, device="cpu")
        n = sum(p.numel() for p in m.parameters())  # shared (tied) parameters counted once
        self.assertEqual(n, closed_form(spec), spec["name"])
        self.assertEqual(realrun.param_count(spec), closed_form(spec))
        tok = torch.randint(0, spec["vocab"], (2, seq + 1))
        logits = m(tok[:, :-1])
        self.assertEqual(tuple(logits.shape), (2, seq, spec["vocab"]))
        loss = realrun.loss_fn(logits, tok[:, 1:])
        loss.backward()
        self.assertTrue(torch.isfinite(loss))
        return spec

    def test_llama_gqa(self):
        self.check(LLAMA_TINY)

    def test_mpt_learned_tied_biases(self):
        self.check(MPT_TINY)

    def test_alibi(self):
        self.check(BLOOM_TINY)

    def test_hf_config(self):
        spec = self.check(HF_LLAMA)
        self.assertEqual((spec["kv_heads"], spec["mlp"], spec["tied_embeddings"]), (1, "swiglu", False))

    def test_record(self):
        spec = realrun.normalize_spec(LLAMA_TINY)
        plan = {"runtime": "fsdp2", "zero": 3, "shard_group": 1, "tp": 1, "seq": 16, "mbs": 2, "grad_accum": 1,
                "ac": "full", "wrap": 1, "precision": "bf16-mixed", "reduce_dtype": "fp32", "compile": False}
        measured = {"peak_allocated_bytes": 123, "peak_reserved_bytes": 456, "step_s": 0.5,
                    "tokens_per_s_per_gpu": 64.0}
        rec = realrun.build_record("smoke", spec, "hgx-h200", 1, plan, measured, "cpu smoke", "test")
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "r.json")
            realrun._write_json(p, rec)
            with open(p) as f:
                back = json.load(f)
        self.assertEqual(back["schema"], "shardplan.run/1")
        for k in ("id", "model", "cluster", "gpus", "plan", "measured"):
            self.assertIn(k, back)
        self.assertEqual(back["model"]["schema"], "shardplan.model/1")
        self.assertEqual(realrun.validate_record(back), [])
        bad = dict(back, environment={})
        self.assertTrue(realrun.validate_record(bad))
        with self.assertRaises(ValueError):
            realrun.build_record("x", spec, "hgx-h200", 1, dict(plan, bogus=1), measured, "", "")

    def test_cli_parses(self):
        a = realrun.parse_args(["--model", "llama3-8b", "--out", "x.json", "--ac", "selective", "--zero", "2",
                                "--prefetch", "2", "--grad-accum", "4"])
        self.assertEqual((a.ac, a.zero, a.prefetch, a.grad_accum, a.runtime), ("selective", 2, 2, 4, "fsdp2"))


if __name__ == "__main__":
    unittest.main()

"""LoRA in the reference lane: PEFT 0.21.2 (get_peft_model, LoraConfig(r=8): PEFT's default targets for llama,
q_proj and v_proj) on a tiny Hugging Face Llama -- transformers' LlamaForCausalLM at small dimensions, its base in
bf16 as PEFT users load it -- and one real fused AdamW step on the CPU. Its persistent state (parameters,
gradients, optimizer state) against `shardplan memory` for the same config: one GPU, ZeRO-0 (no sharding),
bf16-mixed, --lora-rank 8. Parameters and optimizer state are one allocation per tensor, each rounded up to 512 B
as the CUDA caching allocator rounds a request (what shardplan counts); gradients are summed as they are.

Peak allocated is not compared: the lane runs this on the CPU, where no caching allocator measures it.
Needs the project's Python environment (tools/pyenv.sh pins peft and accelerate); outside CI it skips when peft is
not importable, in CI (CI=true) its absence is a failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARDPLAN = os.environ.get("SHARDPLAN_BIN", os.path.join(ROOT, "build", "planner", "shardplan"))

try:
    import peft  # noqa: F401
    HAVE_PEFT = True
except ImportError:
    if os.environ.get("CI"):
        raise
    HAVE_PEFT = False

# 2 blocks, hidden 256, 4 query heads of 64 over 2 KV heads, SwiGLU 512, vocab 512.
DIMS = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
RANK = 8
SEQ = 32


def round512(n):
    return (n + 511) // 512 * 512


def measure(directory):
    """Builds the PEFT model, runs one step; returns (parameters, {params, grads, optimizer} bytes)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(**DIMS)
    config.save_pretrained(directory)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, lora_dropout=0.0))
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    # PEFT's autocast_adapter_dtype (default True) upcasts the bf16 adapters to fp32.
    assert all(p.dtype == torch.float32 for p in trainable), [p.dtype for p in trainable]
    assert all(p.dtype == torch.bfloat16 for p in params if not p.requires_grad)
    tokens = torch.randint(0, DIMS["vocab_size"], (1, SEQ))
    model(input_ids=tokens, labels=tokens).loss.backward()
    opt = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    opt.step()
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    assert not any(p.grad is not None for p in params if not p.requires_grad)
    return sum(p.numel() for p in params), {
        "params": sum(round512(p.numel() * p.element_size()) for p in params),
        "grads": sum(p.grad.numel() * p.grad.element_size() for p in trainable),
        "optimizer": sum(round512(t.numel() * t.element_size()) for t in state),
    }


@unittest.skipUnless(HAVE_PEFT, "peft is not importable (tools/pyenv.sh pins it)")
class LoraReference(unittest.TestCase):
    def test_persistent_state_within_1_percent(self):
        with tempfile.TemporaryDirectory() as tmp:
            n_params, measured = measure(tmp)
            cmd = [SHARDPLAN, "memory", "--model", os.path.join(tmp, "config.json"), "--cluster", "dgx-h100",
                   "--gpus", "1", "--zero", "0", "--seq", str(SEQ), "--precision", "bf16-mixed", "--lora-rank",
                   str(RANK), "--json", "-"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            self.assertIn(p.returncode, (0, 1), p.stderr)
            report = json.loads(p.stdout)
        # The adapters: per block q_proj [256, 256] and v_proj [128, 256]: 8 x ((256 + 256) + (256 + 128)).
        self.assertEqual(report["inputs"]["model"]["parameters"], n_params)
        predicted = report["memory"]["persistent"]
        for key in ("params", "grads", "optimizer"):
            with self.subTest(key=key):
                self.assertLessEqual(abs(predicted[key] - measured[key]), 0.01 * measured[key],
                                     f"{key}: predicted {predicted[key]}, PEFT {measured[key]}")
        # Gradients of the adapters only, fp32: 2 x 8 x (512 + 384) x 4 B.
        self.assertEqual(measured["grads"], 2 * RANK * ((256 + 256) + (256 + 128)) * 4)


if __name__ == "__main__":
    unittest.main()

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
import tempfile
import unittest

from lane_env import SHARDPLAN, have


HAVE_PEFT = have("peft")

# 2 blocks, hidden 256, 4 query heads of 64 over 2 KV heads, SwiGLU 512, vocab 512.
DIMS = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
RANK = 8
SEQ = 32


def round512(n):
    return (n + 511) // 512 * 512


# A tiny Qwen3-MoE (transformers' Qwen3MoeForCausalLM): 4 experts of 128, top-2, every layer sparse.
MOE_DIMS = dict(vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=4,
                num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=256,
                tie_word_embeddings=False)


def measure(directory, moe=False, targets=None):
    """Builds the PEFT model, runs one step; returns (parameters, {params, grads, optimizer} bytes)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    config = Qwen3MoeConfig(**MOE_DIMS) if moe else LlamaConfig(**DIMS)
    config.save_pretrained(directory)
    model = (Qwen3MoeForCausalLM if moe else LlamaForCausalLM)(config).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, lora_dropout=0.0, target_modules=targets))
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
            p = self.run_shardplan(tmp)
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

    def run_shardplan(self, tmp, *extra):
        cmd = [SHARDPLAN, "memory", "--model", os.path.join(tmp, "config.json"), "--cluster", "dgx-h100",
               "--gpus", "1", "--zero", "0", "--seq", str(SEQ), "--precision", "bf16-mixed", "--lora-rank",
               str(RANK), *extra, "--json", "-"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    def test_moe_attention_targets(self):
        # Qwen3-MoE (transformers 5.23 writes num_local_experts) with q, k, v, o targeted: per block
        # 8 x ((256 + 256) + (256 + 128) + (256 + 128) + (256 + 256)) = 14,336 adapter parameters, fp32.
        targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
        with tempfile.TemporaryDirectory() as tmp:
            n_params, measured = measure(tmp, moe=True, targets=targets)
            p = self.run_shardplan(tmp, "--lora-targets", ",".join(targets))
            self.assertIn(p.returncode, (0, 1), p.stderr)
            report = json.loads(p.stdout)
        self.assertEqual(report["inputs"]["model"]["parameters"], n_params)
        self.assertEqual(measured["grads"], 2 * 14336 * 4)
        predicted = report["memory"]["persistent"]
        for key in ("params", "grads", "optimizer"):
            with self.subTest(key=key):
                self.assertLessEqual(abs(predicted[key] - measured[key]), 0.01 * measured[key],
                                     f"{key}: predicted {predicted[key]}, PEFT {measured[key]}")

    def test_all_linear_on_moe_is_refused(self):
        # PEFT 0.21.2 maps all-linear's v4 expert names onto transformers 5's fused experts (ParamWrapper, rank
        # r per expert, 2r over the fused gate/up): the experts train, which shardplan does not model. It
        # must refuse rather than leave them out.
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        with tempfile.TemporaryDirectory() as tmp:
            Qwen3MoeConfig(**MOE_DIMS).save_pretrained(tmp)
            model = get_peft_model(Qwen3MoeForCausalLM(Qwen3MoeConfig(**MOE_DIMS)).to(torch.bfloat16),
                                   LoraConfig(r=RANK, target_modules="all-linear"))
            wrapped = [n for n, q in model.named_parameters() if q.requires_grad and ".experts." in n]
            self.assertTrue(wrapped, "PEFT no longer wraps the fused experts: revisit lora.cpp")
            # gate_up_proj [4, 256, 256] under rank 2r = 16 per expert: lora_A [64, 256].
            shapes = {tuple(q.shape) for n, q in model.named_parameters() if ".experts." in n and q.requires_grad}
            self.assertIn((2 * RANK * 4, 256), shapes)
            p = self.run_shardplan(tmp, "--lora-targets", "all-linear")
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("--lora-targets", p.stderr)
        self.assertIn("routed experts", p.stderr)

if __name__ == "__main__":
    unittest.main()

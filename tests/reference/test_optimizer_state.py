"""Optimizer state in the reference lane: every optimizer shardplan models whose implementation runs on the CPU
(torch 2.15 AdamW, Adam, SGD with momentum, Adafactor and Muon; torchao 0.18 AdamW8bit, shardplan's choice under
fsdp2; lucidrains' lion-pytorch 0.2.5 Lion) takes one real step on a tiny Hugging Face Llama (transformers' LlamaForCausalLM, fp32 parameters as
FSDP2's bf16-mixed keeps them). The state it created, each tensor one allocation rounded up to 512 B as the CUDA
caching allocator rounds a request, against `shardplan memory --optimizer X`'s persistent optimizer bytes for the
same config (one GPU, ZeRO-0, bf16-mixed): equal to the byte (measured 2026-12-05: AdamW and Adam 14,701,056 B,
SGD 7,345,152, Adafactor 50,176, torchao AdamW8bit 3,770,368, Muon + AdamW 8,402,432, Lion 7,345,152).

Muon runs as shardplan models it (docs/model.md "Optimizers"): torch.optim.Muon on the blocks' 2-D matrices,
AdamW on everything else. bitsandbytes' AdamW8bit (shardplan's choice under the other runtimes) has no CPU
optimizer kernels and is not in the pinned environment: not checked here.
"""
import json
import os
import subprocess
import tempfile
import unittest

from lane_env import SHARDPLAN


# 2 blocks, hidden 256, 4 query heads of 64 over 2 KV heads, SwiGLU 768, vocab 512: every matrix holds at least
# 4,096 elements in whole 256-element blocks (torchao keeps those in 8 bits), the norms stay fp32.
DIMS = dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
SEQ = 32


def round512(n):
    return (n + 511) // 512 * 512


def allocation_bytes(t):
    """Bytes of the allocations behind a state tensor: a tensor subclass (torchao's OptimState8bit: codes,
    scale, qmap) by its inner tensors."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(allocation_bytes(getattr(t, n)) for n in names)
    return round512(t.numel() * t.element_size())


def make_optimizer(name, model):
    import torch
    params = list(model.parameters())
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2)
    if name == "adamw8bit":
        from torchao.optim import AdamW8bit
        return AdamW8bit(params, lr=1e-4)
    if name == "lion":
        from lion_pytorch import Lion  # lion_pytorch.py: state["exp_avg"] = torch.zeros_like(p)
        return Lion(params, lr=1e-4)
    if name == "muon":
        matrices = [p for n, p in model.named_parameters() if ".layers." in n and p.ndim == 2]
        others = [p for n, p in model.named_parameters() if not (".layers." in n and p.ndim == 2)]
        return [torch.optim.Muon(matrices, lr=1e-3), torch.optim.AdamW(others, lr=1e-4, fused=True)]
    raise ValueError(name)


def measure(directory, name):
    """One step of `name` on the tiny Llama; returns (parameters, optimizer state bytes, tensors with state)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(**DIMS)
    config.save_pretrained(directory)
    model = LlamaForCausalLM(config)
    tokens = torch.randint(0, DIMS["vocab_size"], (1, SEQ))
    model(input_ids=tokens, labels=tokens).loss.backward()
    opts = make_optimizer(name, model)
    opts = opts if isinstance(opts, list) else [opts]
    for opt in opts:
        opt.step()
    state_bytes, with_state = 0, 0
    for opt in opts:
        # The step counter lives on the parameter's device only where the implementation puts it there: fused
        # or capturable torch.optim (adam.py: `torch.zeros((), ..., device=p.device) if capturable or fused`);
        # torch's Adafactor (`torch.tensor(0.0)`, torch/optim/_adafactor.py _init_group) and torchao's
        # AdamW8bit (`torch.tensor(0.0)`, torchao/optim/adam.py) keep it on the host.
        on_device = bool(opt.defaults.get("fused") or opt.defaults.get("capturable"))
        for s in opt.state.values():
            with_state += 1
            state_bytes += sum(allocation_bytes(t) for k, t in s.items()
                               if torch.is_tensor(t) and (k != "step" or on_device))
    return sum(p.numel() for p in model.parameters()), state_bytes, with_state


class OptimizerStateReference(unittest.TestCase):
    def check(self, name):
        with tempfile.TemporaryDirectory() as tmp:
            n_params, measured, with_state = measure(tmp, name)
            cmd = [SHARDPLAN, "memory", "--model", os.path.join(tmp, "config.json"), "--cluster", "dgx-h100",
                   "--gpus", "1", "--zero", "0", "--seq", str(SEQ), "--precision", "bf16-mixed", "--optimizer",
                   name, "--json", "-"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            self.assertIn(p.returncode, (0, 1), p.stderr)
            report = json.loads(p.stdout)
        self.assertEqual(report["inputs"]["model"]["parameters"], n_params)
        # Every parameter got state: the measurement is not of a partial step.
        self.assertEqual(with_state, 2 + 9 * DIMS["num_hidden_layers"] + 1)
        predicted = report["memory"]["persistent"]["optimizer"]
        self.assertEqual(predicted, measured, f"{name}: predicted {predicted} B, the real step {measured} B")
        return measured

    def test_adamw(self):
        # Two fp32 moments per parameter (and the fused step's one-element step tensor per parameter): at least
        # 8 B x 1,836,288 parameters (embedding and head 2 x 512 x 256; per block q, o 256 x 256, k, v 128 x 256,
        # gate, up, down 3 x 768 x 256, two norms of 256; the final norm 256).
        self.assertGreaterEqual(self.check("adamw"), 8 * 1_836_288)

    def test_adam(self):
        self.check("adam")

    def test_sgd_momentum(self):
        self.check("sgd")

    def test_adafactor(self):
        self.check("adafactor")

    def test_adamw8bit_torchao(self):
        self.check("adamw8bit")

    def test_muon(self):
        self.check("muon")

    def test_lion(self):
        # One moment (exp_avg, like the parameter) and no step count: half of AdamW's moments.
        self.assertGreaterEqual(self.check("lion"), 4 * 1_836_288)


if __name__ == "__main__":
    unittest.main()

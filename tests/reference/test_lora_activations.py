"""What a frozen base saves for backward, against the real thing: PEFT 0.21.2 on transformers' tiny Llama
(LlamaForCausalLM at small dimensions), forward under torch.autograd.graph.saved_tensors_hooks, the bytes each
module's ops save (unique storages, parameters excluded) per token, for full fine-tuning and for LoRA with
three target sets. Autograd saves a linear's input only for its weight gradient (torch derivatives.yaml `mm`),
so with the base frozen the inputs of linears without an adapter are not saved. The differences from full
fine-tuning, per module, must equal those of shardplan's activation lists (`shardplan show model --graph
--lora-rank R --lora-targets T`): block 1's attention and MLP, and the LM head.

The adapters are kept in the base's bf16 (autocast_adapter_dtype=False), as FSDP2's MixedPrecisionPolicy or
DeepSpeed's bf16 module cast run them; with PEFT's default fp32 adapters and no such cast, PEFT casts each
targeted linear's input to fp32 before lora_A (tuners_utils.py _cast_input_dtype), an extra saved copy per
target that shardplan does not model. Block 0 is not compared: its input (the frozen embedding's output) does
not require grad, so its first norm saves nothing there.
Needs the project's Python environment (peft); in CI (CI=true) its absence is a failure.
"""
import json
import os
import subprocess
import tempfile
import unittest

from lane_env import SHARDPLAN, have


HAVE_PEFT = have("peft")

DIMS = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
RANK = 8
SEQ = 64
MODULES = {"attention": "model.layers.1.self_attn", "mlp": "model.layers.1.mlp", "head": "lm_head"}
LAYERS = {"attention": "blocks.1.attention", "mlp": "blocks.1.mlp", "head": "output"}
DTYPE_BYTES = {"compute": 2, "fp32": 4, "int64": 8, "bool": 1}


def measure(targets):
    """Saved bytes per token of each module of MODULES; targets None = full fine-tuning."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**DIMS)).to(torch.bfloat16)
    if targets is not None:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=targets), autocast_adapter_dtype=False)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    current, seen, saved = [], set(), {k: 0 for k in MODULES}
    named = dict(model.named_modules())
    prefix = "base_model.model." if targets is not None else ""
    for key, name in MODULES.items():
        m = named[prefix + name]
        m.register_forward_pre_hook(lambda _m, _a, key=key: current.append(key))
        m.register_forward_hook(lambda _m, _a, _o: current.pop() and None)

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if current and ptr not in params and ptr not in seen:
            seen.add(ptr)
            saved[current[-1]] += t.untyped_storage().nbytes()
        return t

    tokens = torch.randint(0, DIMS["vocab_size"], (1, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=tokens).logits.float().sum().backward()
    return {k: v / SEQ for k, v in saved.items()}


def listed(config_dir, targets):
    """shardplan's eager saved bytes per token of each layer of LAYERS (bf16 compute)."""
    cmd = [SHARDPLAN, "show", "model", os.path.join(config_dir, "config.json"), "--graph"]
    if targets is not None:
        cmd += ["--lora-rank", str(RANK), "--lora-targets", ",".join(targets)]
    graph = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout)
    out = {}
    for key, name in LAYERS.items():
        layer = next(l for l in graph["layers"] if l["name"] == name)
        out[key] = sum(a["per_token"] * DTYPE_BYTES[a["dtype"]] for a in layer.get("activations", [])
                       if a["eager"] and a.get("only", "always") == "always")
    return out


@unittest.skipUnless(HAVE_PEFT, "peft is not importable (tools/pyenv.sh pins it)")
class LoraSavedActivations(unittest.TestCase):
    def test_frozen_inputs_per_module(self):
        from transformers import LlamaConfig
        with tempfile.TemporaryDirectory() as tmp:
            LlamaConfig(**DIMS).save_pretrained(tmp)
            full_real, full_listed = measure(None), listed(tmp, None)
            for targets in (["q_proj", "v_proj"], ["gate_proj"], ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                  "gate_proj", "up_proj", "down_proj"]):
                real, lst = measure(targets), listed(tmp, targets)
                for key in MODULES:
                    with self.subTest(targets=targets, module=key):
                        self.assertAlmostEqual(full_real[key] - real[key], full_listed[key] - lst[key], places=6,
                                               msg=f"real {full_real[key]} -> {real[key]}, "
                                                   f"shardplan {full_listed[key]} -> {lst[key]}")
                # The MLP and the head save the same tensors on the CPU as listed for a GPU: equal outright
                # (full fine-tuning: the MLP 2h + 8f = 4,608 bytes per token; PEFT's q_proj, v_proj: 3,072,
                # its input h and the product f no longer saved). The attention is compared by difference:
                # the CPU's SDPA (_scaled_dot_product_flash_attention_for_cpu) saves another set than CUDA's.
                for key in ("mlp", "head"):
                    with self.subTest(targets=targets, module=key, absolute=True):
                        self.assertEqual(real[key], lst[key])
            self.assertEqual(full_real["mlp"], 2 * 256 + 8 * 512)


if __name__ == "__main__":
    unittest.main()

"""The tiny Hugging Face models of tests/emit: the real transformers 5.23.0 architectures (LlamaConfig, Qwen3Config,
MixtralConfig and their *ForCausalLM classes) at small dimensions, random weights, written with save_pretrained
(config.json and model.safetensors) into a directory: what `shardplan plan --model DIR/config.json` simulates and
the emitted script's `--model-source hf --model-path DIR` loads. Nothing is downloaded."""
import os

# Shared by the three and by titan_tiny.py: 2 blocks, 4 query heads of 16 over 2 KV heads (TP 2 divides both).
DIMS = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)


def config(arch):
    from transformers import LlamaConfig, MixtralConfig, Qwen3Config
    if arch == "llama":
        return LlamaConfig(**DIMS)
    if arch == "qwen3":
        return Qwen3Config(head_dim=DIMS["hidden_size"] // DIMS["num_attention_heads"], **DIMS)
    if arch == "mixtral":
        return MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **DIMS)
    raise ValueError(arch)


def save(arch, directory, seed=0):
    """Writes the model (random weights from `seed`) to `directory`; returns the directory."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(arch))
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    return directory


def reference_loss(directory, tokens_list):
    """The mean cross-entropy of the saved model over `tokens_list` (each [batch, seq + 1]) in fp32 on one
    process: what the sharded script's first step must reproduce."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    total = 0.0
    with torch.no_grad():
        for tokens in tokens_list:
            logits = model(input_ids=tokens[:, :-1], use_cache=False).logits
            total += F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()).item()
    return total / len(tokens_list)

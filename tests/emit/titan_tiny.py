"""torchtitan 0.3.0's llama3 and qwen3 models at the dimensions of tests/emit's tiny Hugging Face Llama and Qwen3
(hf_tiny.py), built by the model packages' own layer builders (torchtitan/models/llama3/__init__.py
_build_llama3_layers, models/qwen3/__init__.py _build_qwen3_layers), with the initialisers of their flavors: what
`--model-factory titan_tiny:llama3_model` / `titan_tiny:qwen3_model` hands the emitted FSDP2 script.

The one change from a flavor: the inner attention is torchtitan's ScaledDotProductAttention module instead of
FlexAttention (the registry's default), which runs through torch.compile (inductor's CPU code generation, minutes
of compiling on the CI machine's two cores). Everything around it (fused wqkv, RoPE, qk_norm, the blocks, the TP
sharding configs) is the flavors' code."""
from torchtitan.models import llama3, qwen3
from torchtitan.models.common import ComplexRoPE, CosSinRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.attention import ScaledDotProductAttention

import hf_tiny

DIM, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = (hf_tiny.DIMS[k] for k in ("hidden_size", "num_hidden_layers",
                                                                      "num_attention_heads", "num_key_value_heads",
                                                                      "intermediate_size", "vocab_size"))
HEAD_DIM = DIM // HEADS
MAX_SEQ = hf_tiny.DIMS["max_position_embeddings"]


def _sdpa(cfg):
    for layer in cfg.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return cfg


def llama3_model():
    """Llama3Model.Config as llama3/__init__.py _8b builds it (untied embedding and head)."""
    return _sdpa(llama3.Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=llama3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=llama3._NORM_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=llama3._output_linear_init(DIM)),
        layers=llama3._build_llama3_layers(
            fuse_qkv=True, n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, hidden_dim=FFN,
            rope=ComplexRoPE.Config(dim=HEAD_DIM, max_seq_len=MAX_SEQ, theta=500000, scaling="llama"),
            attn_backend="flex")))


def qwen3_model():
    """Qwen3Model.Config as qwen3/__init__.py _8b builds it (untied; q_norm / k_norm over head_dim)."""
    return _sdpa(qwen3.Qwen3Model.Config(
        dim=DIM, vocab_size=VOCAB, norm=qwen3._qwen3_norm(DIM), enable_weight_tying=False,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=qwen3._EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=qwen3._LINEAR_INIT),
        layers=qwen3._build_qwen3_layers(
            fuse_qkv=True, n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
            hidden_dim=FFN, attn_backend="flex",
            rope=CosSinRoPE.Config(dim=HEAD_DIM, max_seq_len=MAX_SEQ, theta=1000000.0))))

"""torchtitan 0.3.0's MoE decoders (qwen3 MoE, deepseek_v3) at tiny sizes of their real architectures, built from
the model packages' own layer builders (torchtitan/models/qwen3/__init__.py _build_qwen3_moe_layers,
torchtitan/models/deepseek_v3/__init__.py _build_dsv3_layers) and parallelized by their own parallelize functions
(models/qwen3/parallelize.py parallelize_qwen3, models/deepseek_v3/parallelize.py parallelize_deepseekv3: EP over
the data-parallel ranks through Module.parallelize, FSDP2 on the dense parameters over `fsdp` and on the routed
experts over `efsdp`, torchtitan/distributed/fsdp.py apply_fsdp_to_decoder).

One deviation, the attention kernel: torchtitan 0.3.0 refuses SDPA for language models (config_utils.py
get_attention_config: flex, flex_flash or varlen), and FlexAttention's eager CPU path is the math reference
(s x s scores). Each block's inner attention is torchtitan's own ScaledDotProductAttention (models/common/
attention.py, is_causal=True: one document per sequence, the block-causal mask's case), which on the CPU runs
_scaled_dot_product_flash_attention_for_cpu (saves the output and an fp32 logsumexp, as FlashAttention-2 does)."""

# The tiny architectures (per model): the spec shardplan reads is written from the same numbers.
QWEN3 = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=256, experts=8, top_k=2, moe_ffn=32)
DSV3 = dict(layers=3, first_dense=1, hidden=64, heads=4, q_lora_rank=0, kv_lora_rank=32, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=24, dense_ffn=128, vocab=256, experts=8, top_k=2, moe_ffn=32,
            shared_experts=1)


def qwen3_config(dims, seq):
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.qwen3 import _EMBEDDING_INIT, _LINEAR_INIT, _build_qwen3_moe_layers, _qwen3_norm
    from torchtitan.models.qwen3.model import Qwen3Model
    from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

    d = dims
    layers = _build_qwen3_moe_layers(
        fuse_qkv=True, n_layers=d["layers"], dim=d["hidden"], n_heads=d["heads"], n_kv_heads=d["kv_heads"],
        head_dim=d["head_dim"], moe_hidden_dim=d["moe_ffn"], num_experts=d["experts"], top_k=d["top_k"],
        attn_backend="flex", moe_comm_backend="standard",
        rope=CosSinRoPE.Config(dim=d["head_dim"], max_seq_len=seq, theta=1000000.0))
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    cfg = Qwen3Model.Config(
        vocab_size=d["vocab"], dim=d["hidden"], norm=_qwen3_norm(d["hidden"]),
        tok_embeddings=Embedding.Config(num_embeddings=d["vocab"], embedding_dim=d["hidden"],
                                        param_init=_EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=d["hidden"], out_features=d["vocab"], param_init=_LINEAR_INIT),
        layers=layers)
    set_qwen3_sharding_config(cfg, enable_sp=False, enable_ep=True)
    return cfg


def dsv3_config(dims, seq):
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.deepseek_v3 import (_EMBEDDING_INIT, _NORM_INIT, _build_dsv3_layers,
                                               _output_linear_init)
    from torchtitan.models.deepseek_v3.model import DeepSeekV3Model
    from torchtitan.models.deepseek_v3.sharding import set_deepseek_v3_sharding_config

    d = dims
    layers = _build_dsv3_layers(
        n_layers=d["layers"], n_dense_layers=d["first_dense"], dim=d["hidden"], n_heads=d["heads"],
        q_lora_rank=d["q_lora_rank"], kv_lora_rank=d["kv_lora_rank"], qk_nope_head_dim=d["qk_nope_head_dim"],
        qk_rope_head_dim=d["qk_rope_head_dim"], v_head_dim=d["v_head_dim"], mscale=0.70,
        dense_hidden_dim=d["dense_ffn"], moe_hidden_dim=d["moe_ffn"], num_experts=d["experts"],
        num_shared_experts=d["shared_experts"], router_top_k=d["top_k"], router_score_func="softmax",
        attn_backend="flex", moe_comm_backend="standard", non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim=d["qk_rope_head_dim"], max_seq_len=seq, theta=10000.0))
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    cfg = DeepSeekV3Model.Config(
        vocab_size=d["vocab"], dim=d["hidden"],
        tok_embeddings=Embedding.Config(num_embeddings=d["vocab"], embedding_dim=d["hidden"],
                                        param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=d["hidden"], param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=d["hidden"], out_features=d["vocab"],
                              param_init=_output_linear_init(d["hidden"])),
        layers=layers)
    set_deepseek_v3_sharding_config(cfg, enable_sp=False, enable_ep=True)
    return cfg


def parallelize(name, model, world, ep):
    """torchtitan's ParallelDims (dp_shard = world, ep) and the model's own parallelize function, with
    parallelism.spmd_backend = "partial_dtensor" (config/configs.py; the default "spmd_types" needs the trainer's
    spmd mesh context): EP by Module.parallelize, FSDP2 by apply_fsdp_to_decoder."""
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils

    from torchtitan.distributed import parallel_dims as pd_mod

    # torchtitan/tools/utils.py get_device_info falls back to "cuda" without an accelerator; the meshes are CPU's.
    pd_mod.device_type = "cpu"
    dist_utils.set_spmd_backend("partial_dtensor")
    pc = ParallelismConfig(spmd_backend="partial_dtensor", expert_parallel_degree=ep,
                           data_parallel_shard_degree=world)
    dims = ParallelDims.from_config(pc, world)
    dims.build_mesh()
    if name == "qwen3":
        from torchtitan.models.qwen3.parallelize import parallelize_qwen3 as fn
    else:
        from torchtitan.models.deepseek_v3.parallelize import parallelize_deepseekv3 as fn
    fn(model, parallel_dims=dims, training=TrainingConfig(), parallelism=pc, compile_config=CompileConfig(),
       ac_config=None, dump_folder="")
    # disable_fsdp_gradient_division (fsdp.py) sets the divide factor 1.0, which FSDP2 turns into
    # ReduceOp.PREMUL_SUM(1.0) (_fsdp_collectives.py _get_gradient_divide_factors); gloo has no PREMUL_SUM. A
    # forced SUM with the factor 1.0 divides by nothing (_div_if_needed): the same tensors, a plain SUM.
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)
    return dims


def spec_json(name, dims, seq):
    """shardplan's model spec (models/*.json, shardplan.model/1) for the same tiny architecture, with torchtitan's
    RoPE cache format (qwen3: CosSinRoPE, deepseek_v3: ComplexRoPE; one per attention module)."""
    d = dims
    common = {"schema": "shardplan.model/1", "layers": d["layers"], "hidden": d["hidden"], "heads": d["heads"],
              "vocab": d["vocab"], "mlp": "swiglu", "norm": "rmsnorm", "attn_bias": False, "mlp_bias": False,
              "norm_bias": False, "tied_embeddings": False, "positions": "rotary", "seq": seq}
    if name == "qwen3":
        return {**common, "name": "qwen3-moe-tiny", "kv_heads": d["kv_heads"], "head_dim": d["head_dim"],
                "ffn_hidden": 4 * d["hidden"], "qk_norm": "head", "rope_cache": "cos_sin",
                "moe": {"experts": d["experts"], "top_k": d["top_k"], "ffn_hidden": d["moe_ffn"]}}
    return {**common, "name": "deepseek-v3-tiny", "kv_heads": d["heads"], "rope_cache": "complex",
            "head_dim": d["qk_nope_head_dim"] + d["qk_rope_head_dim"], "ffn_hidden": d["dense_ffn"],
            "mla": {"q_lora_rank": d["q_lora_rank"], "kv_lora_rank": d["kv_lora_rank"],
                    "qk_nope_head_dim": d["qk_nope_head_dim"], "qk_rope_head_dim": d["qk_rope_head_dim"],
                    "v_head_dim": d["v_head_dim"]},
            "moe": {"experts": d["experts"], "top_k": d["top_k"], "ffn_hidden": d["moe_ffn"],
                    "shared_experts": d["shared_experts"], "first_dense": d["first_dense"]}}


def patch_rms_norm():
    """torch.nn.RMSNorm (torchtitan 0.3.0's models/common/nn_modules.py RMSNorm) calls F.rms_norm, which on CUDA
    runs the fused kernel (aten::_fused_rms_norm: saves the input and the fp32 rstd) but on the CPU the composite
    (an fp32 copy of the input, x·rstd in fp32 and its bf16 cast, all saved; _fused_rms_norm_backward has no CPU
    kernel). The run's norms save what the CUDA kernel saves: the CPU's _fused_rms_norm forward, and a backward
    from the saved input and rstd (d/dx of x·rstd·w)."""
    import torch
    import torch.nn.functional as F

    if getattr(F.rms_norm, "_sp_fused", False):
        return

    class FusedRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, shape, weight, eps):
            out, rstd = torch.ops.aten._fused_rms_norm(x, shape, weight, eps)
            ctx.save_for_backward(x, weight, rstd)
            return out

        @staticmethod
        def backward(ctx, g):
            # The CUDA kernel (_fused_rms_norm_backward) writes dx and per-block partial sums of dw: no
            # tokens x hidden fp32 temporaries. Here: dx allocated once, the fp32 arithmetic in chunks of
            # rows (64 chunks: transients of 1/64 of the tokens), dw accumulated in fp32.
            x, weight, rstd = ctx.saved_tensors
            d = x.shape[-1]
            x2, g2, r2 = x.reshape(-1, d), g.reshape(-1, d), rstd.reshape(-1, 1)
            dx = torch.empty_like(x2)
            dw = torch.zeros(d, dtype=torch.float32) if weight is not None else None
            rows = max(1, x2.shape[0] // 64)
            for i in range(0, x2.shape[0], rows):
                xh = x2[i:i + rows].float() * r2[i:i + rows]
                gf = g2[i:i + rows].float()
                if weight is not None:
                    dw += (gf * xh).sum(0)
                    gf = gf * weight.float()
                dot = (gf * xh).mean(-1, keepdim=True)
                dx[i:i + rows] = (r2[i:i + rows] * (gf - xh * dot)).to(x.dtype)
            return dx.reshape(x.shape), None, dw.to(weight.dtype) if weight is not None else None, None

    def rms_norm(x, normalized_shape, weight=None, eps=None):
        if eps is None:
            eps = torch.finfo(x.dtype).eps
        return FusedRMSNorm.apply(x, list(normalized_shape), weight, eps)

    rms_norm._sp_fused = True
    F.rms_norm = rms_norm

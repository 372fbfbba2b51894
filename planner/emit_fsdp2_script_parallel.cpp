// The second quarter of the script `--emit fsdp2` writes (emit_fsdp2_script.cpp has the first and says what
// the script is): the models (Hugging Face, torchtitan), tensor parallelism, activation checkpointing with
// the simulator's policy, and FSDP per unit.
#include "planner/emit.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptParallel;
const char* const kFsdp2ScriptParallel =
    R"PY(# --- the models ------------------------------------------------------------------------------------------------
def hf_path():
    """A local directory with config.json and *.safetensors, or a Hugging Face model id (downloaded once)."""
    if not ARGS.model_path:
        raise SystemExit("--model-source hf needs --model-path (a directory with config.json and safetensors, "
                         "or a Hugging Face model id)")
    if os.path.isdir(ARGS.model_path):
        return ARGS.model_path
    from huggingface_hub import snapshot_download
    return snapshot_download(ARGS.model_path, allow_patterns=["*.json", "*.safetensors"])


def build_hf():
    """The checkpoint's architecture from transformers, on the meta device (no memory): from_config builds the
    same modules from_pretrained would, without loading anything."""
    from transformers import AutoConfig, AutoModelForCausalLM
    path = hf_path()
    kw = {"attention_dropout": PLAN["attention_dropout"]} if PLAN["attention_dropout"] else {}
    config = AutoConfig.from_pretrained(path, **kw)
    # The MoE experts implementation the plan simulated (--moe-impl hf-grouped-mm / hf-eager; transformers
    # 5.23 reads it from the kwargs into config._experts_implementation); None: transformers' default.
    experts = {"experts_implementation": HF_EXPERTS} if HF_EXPERTS else {}
    with torch.device("meta"):
        # The attention core the plan simulated: sdpa (flash-type kernels) or eager (op by op).
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation="eager" if PLAN["attention"] == "eager" else "sdpa", dtype=torch.float32,
            **experts)
    model.config.use_cache = False  # no KV cache in training
    return model, path


def titan_config():
    """A torchtitan 0.3.0 model config: --model-factory MODULE:FUNCTION returning a Decoder.Config (or a
    ModelSpec), else the registry flavor of the plan's model (torchtitan.models.<module>.model_registry)."""
    if ARGS.model_factory:
        mod, fn = ARGS.model_factory.split(":")
        cfg = getattr(importlib.import_module(mod), fn)()
    elif TITAN_FLAVOR is not None:
        module, flavor = TITAN_FLAVOR
        # FlexAttention (the registry's default) on the GPU; varlen (the FlashAttention kernel) when the plan
        # simulated --sdpa-backend flash (planner/emit_torchtitan.cpp emit_torchtitan writes the same).
        backend = "varlen" if PLAN["sdpa_backend"] == "FLASH_ATTENTION" else "flex"
        cfg = importlib.import_module(f"torchtitan.models.{module}").model_registry(flavor, attn_backend=backend)
    else:
        raise SystemExit("torchtitan 0.3.0 has no flavor of this model's dimensions: pass --model-factory "
                         "MODULE:FUNCTION returning its torchtitan model config")
    return getattr(cfg, "model", cfg)  # ModelSpec.model is the Decoder.Config


def build_titan(meshes, seq):
    """torchtitan's model on the meta device, its TP sharding config filled in as the Trainer does
    (trainer.py: model_config.update_from_config, then build under torch.device("meta"))."""
    from torchtitan.config import ParallelismConfig
    cfg = titan_config()
    par = ParallelismConfig(data_parallel_replicate_degree=meshes.titan_dims.dp_replicate,
                            data_parallel_shard_degree=meshes.titan_dims.dp_shard,
                            tensor_parallel_degree=meshes.titan_dims.tp, spmd_backend="partial_dtensor")
    # Decoder.Config.update_from_config (models/common/decoder.py) checks the TP degree against the heads and,
    # through the model's own override (llama3 / qwen3 model.py), sets each module's sharding_config (the TP
    # plan, with sequence parallelism). Given a Trainer.Config it also cuts the RoPE cache to training.seq_len;
    # given only the parallelism, that is done here.
    cfg.update_from_config(config=types.SimpleNamespace(parallelism=par))
    for layer in cfg.layers:
        attention = getattr(layer, "attention", None)
        if attention is not None and getattr(attention, "rope", None) is not None:
            if seq > attention.rope.max_seq_len:
                raise SystemExit(f"seq {seq} exceeds the model's RoPE max_seq_len {attention.rope.max_seq_len}")
            attention.rope = dataclasses.replace(attention.rope, max_seq_len=seq)
    with torch.device("meta"):
        model = cfg.build()
    return model, cfg


def parts_of(model):
    """(embedding, [(name, block)], final norm, head) of the model, by the family's module names."""
    n = NAMES[ARGS.model_source]
    blocks = get(model, n["blocks"])
    return get(model, n["embed"]), list(blocks.named_children()), get(model, n["norm"]), get(model, n["out"])


def is_moe(model):
    return any(type(m).__name__.endswith(("SparseMoeBlock", "MoE")) for m in model.modules())


# --- tensor parallelism ----------------------------------------------------------------------------------------
def tp_styles():
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    col, row, prep = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if PLAN["fp8"] == "tensorwise" and ARGS.device != "cpu":
        from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                           PrepareFloat8ModuleInput)
        col, row, prep = Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput
    return col, row, prep, SequenceParallel


def apply_tp_hf(model, tp_mesh):
    """Megatron-style TP with sequence parallelism on the Hugging Face decoder, the plan torchtitan runs on its
    own Llama (torchtitan 0.3.0 models/common/decoder_sharding.py: vocab-parallel embedding reduce-scattered to
    the sequence shard, norms sequence-parallel with replicated weights, attention / MLP inputs all-gathered,
    q/k/v and gate/up colwise, o and down rowwise reduce-scattered, the head colwise with vocab-parallel logits
    for the loss). transformers 5.23.0 decoder layers (models/llama/modeling_llama.py LlamaDecoderLayer) call
    self_attn(hidden_states=..., ...) by keyword and mlp(hidden_states) positionally; Qwen3Attention applies
    q_norm / k_norm (RMSNorm over head_dim) to the TP-local heads, so they are sequence-parallel over the heads
    dim with replicated weights, as torchtitan's qwen3/sharding.py shards its qk_norm (weight R, input S(2)).
    Mixture-of-experts blocks have no TP plan here."""
    from torch.distributed.tensor.parallel import parallelize_module
    if is_moe(model):
        raise SystemExit("--tp > 1 with a mixture-of-experts Hugging Face model: this script has no TP plan for "
                         "its experts (use --model-source titan, or --fix tp=1)")
    col, row, prep, sp = tp_styles()
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    plan = {
        "model.embed_tokens": row(input_layouts=Replicate(), output_layouts=Shard(1)),
        # The final norm returns the local sequence shard (transformers slices it before the head).
        "model.norm": sp(use_local_output=True),
        "lm_head": col(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    for i, layer in enumerate(model.model.layers):
        p = f"model.layers.{i}"
        plan.update({
            f"{p}.input_layernorm": sp(),
            f"{p}.self_attn": prep(input_kwarg_layouts={"hidden_states": Shard(1)},
                                   desired_input_kwarg_layouts={"hidden_states": Replicate()},
                                   use_local_output=True),
            f"{p}.self_attn.q_proj": col(), f"{p}.self_attn.k_proj": col(), f"{p}.self_attn.v_proj": col(),
            f"{p}.self_attn.o_proj": row(output_layouts=Shard(1)),
            f"{p}.post_attention_layernorm": sp(),
            f"{p}.mlp": prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True),
            f"{p}.mlp.gate_proj": col(), f"{p}.mlp.up_proj": col(), f"{p}.mlp.down_proj": row(output_layouts=Shard(1)),
        })
        for qk in ("q_norm", "k_norm"):
            if hasattr(layer.self_attn, qk):
                plan[f"{p}.self_attn.{qk}"] = sp(sequence_dim=2, use_local_output=True)
    parallelize_module(model, tp_mesh, plan)
    if tied:  # both were sharded on the vocab dim; one parameter again
        model.lm_head.weight = model.model.embed_tokens.weight


def apply_tp_tiny(model, tp_mesh, n):
    """--tiny: the same plan on the script's own model."""
    from torch.distributed.tensor.parallel import parallelize_module
    col, row, prep, sp = tp_styles()
    parallelize_module(model, tp_mesh, {
        n["embed"]: row(input_layouts=Replicate(), output_layouts=Shard(1)),
        n["norm"]: sp(),
        n["out"]: col(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    if ARGS.model_source == "hf":  # attention is called with hidden_states=...
        attn_in = prep(input_kwarg_layouts={"hidden_states": Shard(1)},
                       desired_input_kwarg_layouts={"hidden_states": Replicate()})
    else:
        attn_in = prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    a, m = n["attn"], n["mlp"]
    for block in get(model, n["blocks"]):
        parallelize_module(block, tp_mesh, {
            n["attn_norm"]: sp(),
            a: attn_in,
            f"{a}.{n['q']}": col(), f"{a}.{n['k']}": col(), f"{a}.{n['v']}": col(),
            f"{a}.{n['o']}": row(output_layouts=Shard(1)),
            n["mlp_norm"]: sp(),
            m: prep(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            f"{m}.{n['gate']}": col(), f"{m}.{n['up']}": col(),
            f"{m}.{n['down']}": row(output_layouts=Shard(1)),
        })


def apply_tp(model, meshes):
    if ARGS.tiny:
        apply_tp_tiny(model, meshes.tp, NAMES[ARGS.model_source])
    elif ARGS.model_source == "hf":
        apply_tp_hf(model, meshes.tp)
    else:
        # torchtitan's own TP: Module.parallelize (protocols/module.py) shards each module's states and wraps its
        # forward by the sharding_config update_from_config filled in, as parallelize_llama / parallelize_qwen3
        # do for the partial_dtensor backend.
        model.parallelize(meshes.titan_dims)
    if PLAN["async_tp"] and ARGS.device != "cpu":
        # Async TP as torchtitan enables it (torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp):
        # inductor's micro-pipeline pass overlaps the TP collectives of the compiled blocks with their GEMMs,
        # over symmetric memory on the TP group.
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group
        torch._inductor.config._micro_pipeline_tp = True
        enable_symm_mem_for_group(meshes.tp.get_group().group_name)


# --- activation checkpointing ----------------------------------------------------------------------------------
def sac_policy():
    """torchtitan's op-level selective AC (torchtitan 0.3.0 distributed/activation_checkpoint.py SelectiveAC and
    _get_default_save_ops): save the outputs of compute-intensive ops, attention, max, topk and the TP
    reduce-scatters, except every second mm / linear, counted per block; the simulator models exactly this
    (attention outputs, every second matmul output and, under TP, the reduce-scatter outputs saved)."""
    from torch._functorch.partitioners import get_default_op_list
    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    sdpa = ["_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
            "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable"]
    if PLAN["sac_sdpa_ops"] == "flash-efficient":
        # torchtitan before 0.2.1: cuDNN attention is not in the save list, so it is recomputed in backward.
        sdpa.remove("_scaled_dot_product_cudnn_attention")
        if hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention"):
            save.discard(torch.ops.aten._scaled_dot_product_cudnn_attention.default)
    # topk (the MoE router's choice) only for torchtitan's routers: Hugging Face's normalise the top-k values in
    # place (transformers 5.23.0 modeling_mixtral.py MixtralTopKRouter.forward: router_top_value /= ...), which
    # a saved output may not be (torch.utils.checkpoint refuses a mutated cached tensor).
    for name in sdpa + ["linear", "max"] + (["topk"] if ARGS.model_source == "titan" else []):
        if hasattr(torch.ops.aten, name):
            save.add(getattr(torch.ops.aten, name).default)
    save.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    if hasattr(torch._higher_order_ops, "flex_attention"):
        save.add(torch._higher_order_ops.flex_attention)
    mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)

    def make():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if func in mm_ops:
                count[mode] += 1
            if func in save:
                if func in mm_ops and count[mode] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return make


def apply_ac(blocks_container):
    """Every block in a checkpoint_wrapper, as torchtitan's ActivationCheckpointing.apply does (the wrapper
    registered under the block's own name, in a ModuleList or a ModuleDict); RNG state preserved (its
    default), so that dropout recomputes the same mask."""
    if PLAN["ac"] == "none":
        return
    ctx = {"context_fn": sac_policy()} if PLAN["ac"] == "selective" else {}
    for name, block in list(blocks_container.named_children()):
        blocks_container.register_module(name, checkpoint_wrapper(block, preserve_rng_state=True, **ctx))


# --- FSDP ------------------------------------------------------------------------------------------------------
def apply_fsdp(model, meshes):
    embed, blocks, norm, head = parts_of(model)
    # (ZeRO-0: the mesh has a shard dim of 1, see mesh_shape; nothing is resharded.)
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[PLAN["param_dtype"]], reduce_dtype=DTYPES[PLAN["reduce_dtype"]])
    kw = dict(mesh=meshes.dp, mp_policy=mp)
    if PLAN["offload_params"]:
        # Pinned host memory needs CUDA: on --device cpu the policy runs unpinned (the state is on the host anyway,
        # the optimizer steps on the host-side shards as it does with a GPU).
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=ARGS.device != "cpu")
    units = []
    modules = [b for _, b in blocks]
    for i in range(0, len(modules), PLAN["wrap"]):
        group = modules[i:i + PLAN["wrap"]]
        # --keep-last-block: the last unit stays gathered from its forward to its backward (torchtitan's
        # default policy before 2025-07-28).
        last = i + PLAN["wrap"] >= len(modules)
        reshard = PLAN["reshard"] and not (PLAN["keep_last_block"] and last)
        fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=reshard, **kw)
        units.append(group[0])
    tied = head.weight is embed.weight
    if PLAN["root_params"] == "embedding-head":
        # The embedding, final norm and output stay in the root unit, gathered from the forward to the end of
        # backward (torchtitan before 2025-07-28 on a torch that kept the root unsharded).
        fully_shard(model, reshard_after_forward=False, **kw)
    elif tied:
        # One parameter in two modules: one unit for both (torchtitan 0.3.0 distributed/fsdp.py
        # apply_fsdp_to_decoder groups tok_embeddings, norm and lm_head when the weights are tied).
        fully_shard([embed, norm, head], reshard_after_forward=False, **kw)
        fully_shard(model, reshard_after_forward=PLAN["reshard"], **kw)
    else:
        fully_shard([norm, head], reshard_after_forward=False, **kw)
        fully_shard(embed, reshard_after_forward=PLAN["reshard"], **kw)
        fully_shard(model, reshard_after_forward=PLAN["reshard"], **kw)
    if PLAN["prefetch"] > 1:
        # Explicit prefetch of PLAN["prefetch"] units ahead in forward and behind in backward.
        k = PLAN["prefetch"]
        for i, u in enumerate(units):
            u.set_modules_to_forward_prefetch(units[i + 1:i + 1 + k])
            u.set_modules_to_backward_prefetch(list(reversed(units[max(0, i - k):i])))

)PY";

}  // namespace shardplan

// The third quarter of the script `--emit fsdp2` writes (emit_fsdp2_script.cpp says what the script is): LoRA
// through PEFT, materialising the sharded model, the step and the optimizers.
#include "planner/emit.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptStep;
const char* const kFsdp2ScriptStep = R"PY(
# --- LoRA (LORA: --lora-rank) ----------------------------------------------------------------------------------
def apply_lora(model):
    """PEFT 0.21.2's adapters beside the targeted linears, as the plan simulated them (docs/model.md "LoRA and
    QLoRA"): inject_adapter_in_model adds lora_A [r, in] and lora_B [out, r] to each target and freezes every
    other parameter (peft/tuners/tuners_utils.py _mark_only_adapters_as_trainable); the frozen base is stored
    in bf16 as PEFT users load it (from_pretrained(dtype=torch.bfloat16)), the adapters stay fp32 (PEFT's
    autocast_adapter_dtype). No PeftModel wrapper: the model keeps its module paths (FSDP units, checkpoint,
    AC), a base weight becomes `<linear>.base_layer.weight`."""
    from peft import LoraConfig, inject_adapter_in_model
    if ARGS.model_source != "hf":
        raise SystemExit("LoRA: the script wraps Hugging Face models with PEFT; for torchtitan use its "
                         "LoRAConverter (torchtitan/components/lora.py)")
    inject_adapter_in_model(LoraConfig(r=LORA["rank"], lora_dropout=0.0, target_modules=LORA["targets"]), model)
    with torch.no_grad():
        for p in model.parameters():
            if not p.requires_grad:
                p.data = p.data.to(torch.bfloat16)


def init_lora(model):
    """PEFT's initialisation of the adapters, after to_empty: lora_A Kaiming-uniform, lora_B zeros (the adapted
    model starts as the base; peft/tuners/lora/layer.py LoraLayer.reset_lora_parameters)."""
    for m in model.modules():
        if hasattr(m, "reset_lora_parameters"):
            m.reset_lora_parameters("default", True)


# --- materialising the sharded model ---------------------------------------------------------------------------
def load_safetensors(model, path):
    """Each parameter from the checkpoint's safetensors files, one at a time: read it (memory-mapped), keep this
    rank's piece of it (distribute_tensor with the parameter's own mesh and placements, FSDP's shard and TP's
    split together, without communication: src_data_rank=None), copy that into the sharded parameter.
    Checkpoint names become parameter names the way transformers' own loader renames and converts them
    (transformers 5.23.0 core_model_loading.py convert_and_load_state_dict_in_model, with the model's
    conversion_mapping.py get_model_conversion_mapping): e.g. Mixtral checkpoints keep one w1 / w2 / w3 per
    expert, which the model holds stacked as experts.gate_up_proj / experts.down_proj; a converted parameter is
    built from its sources (one layer's experts) when it is loaded."""
    import copy
    import functools
    import glob
    from safetensors import safe_open
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import (WeightConverter, WeightRenaming, dot_natural_key,
                                                 rename_source_key)
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise SystemExit(f"no *.safetensors in {path}")
    # LoRA: the base weight of an adapted linear is <linear>.base_layer.weight; the adapters are not in the
    # checkpoint (init_lora fills them).
    params = {clean(n).replace(".base_layer.", "."): p for n, p in model.named_parameters() if ".lora_" not in n}
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    by_pattern = {sp: c for c in converters for sp in c.source_patterns}
    handles = [safe_open(f, framework="pt", device="cpu") for f in files]
    sources = {}  # parameter name -> a loader of its tensor, or the converter collecting its sources
    for key, h in sorted(((k, h) for h in handles for k in h.keys()), key=lambda kh: dot_natural_key(kh[0])):
        name, pattern = rename_source_key(key, renamings, converters, model.base_model_prefix, params)
        if name not in params and key in params:
            name, pattern = key, None
        if name not in params:
            continue
        load = functools.partial(h.get_tensor, key)
        if pattern is None:
            sources[name] = load
        else:
            conv = sources.setdefault(name, copy.deepcopy(by_pattern[pattern]))
            conv.add_tensor(name, key, pattern, load)
    missing = sorted(set(params) - set(sources))
    if missing:
        raise SystemExit(f"parameters not in the checkpoint {path}: {missing[:5]}")
    with torch.no_grad():
        for name, src in sources.items():
            if isinstance(src, WeightConverter):
                out = src.convert(name, model=model, config=model.config)
                full = out[name] if name in out else next(iter(out.values()))
            else:
                full = src()
            p = params[name]
            if tuple(full.shape) != tuple(p.shape):
                raise SystemExit(f"{name}: checkpoint shape {tuple(full.shape)}, model {tuple(p.shape)}")
            full = full.to(p.dtype)
            if isinstance(p, DTensor):
                piece = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
                p.to_local().copy_(piece.to_local())
            else:
                p.copy_(full)
            del full


def reinit_rotary(model, device):
    """The RoPE frequencies are non-persistent buffers (no checkpoint entry; to_empty leaves them
    uninitialised): computed again by each rotary module's own constructor (transformers 5.23.0
    *RotaryEmbedding(config))."""
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding") and hasattr(m, "config"):
            fresh = type(m)(m.config).to(device)
            for name, buf in fresh.named_buffers(recurse=False):
                setattr(m, name, buf)


def materialize(model, device):
    """Allocate this rank's shards (to_empty: nothing but the shards ever exists), then fill them: the Hugging
    Face checkpoint's tensors, torchtitan's own initialisation (Decoder.init_weights, trainer.py does the same
    after to_empty), or --tiny's reset_parameters."""
    # FSDP's CPUOffloadPolicy keeps the sharded state on the host; buffers go to the device (trainer.py:
    # init_device "cpu", buffer_device the accelerator, with enable_cpu_offload).
    init_device = torch.device("cpu") if PLAN["offload_params"] else device
    model.to_empty(device=init_device)
    with torch.no_grad():
        if ARGS.tiny:
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        elif ARGS.model_source == "hf":
            load_safetensors(model, HF_PATH)
            reinit_rotary(model, device)
        else:
            model.init_weights(buffer_device=device)
        if LORA:
            init_lora(model)
    if PLAN["offload_params"]:
        for m in model.modules():
            for name, buf in list(m.named_buffers(recurse=False)):
                setattr(m, name, buf.to(device))


# --- the step --------------------------------------------------------------------------------------------------
def forward(model, tokens):
    """The logits of one micro-batch, the way each family's training loop calls its model."""
    if ARGS.tiny:
        return model(tokens)
    b, s = tokens.shape
    positions = torch.arange(s, device=tokens.device).unsqueeze(0)
    if ARGS.model_source == "hf":
        # The positions are given: under sequence parallelism the embedding output holds s / tp tokens, from
        # which transformers would otherwise derive positions 0 .. s/tp (LlamaModel.forward), so RoPE would
        # cover the wrong length. An eager core gets its causal mask as a 4-D additive mask over the whole
        # sequence for the same reason (masking_utils create_causal_mask sizes it by the embedding output and
        # returns a 4-D mask as given); SDPA runs is_causal without one.
        mask = None
        if PLAN["attention"] == "eager":
            dtype = DTYPES[PLAN["param_dtype"]] if PLAN["zero"] > 0 else torch.float32
            mask = torch.full((s, s), torch.finfo(dtype).min, dtype=dtype, device=tokens.device).triu(1)[None, None]
        return model(input_ids=tokens, position_ids=positions, attention_mask=mask, use_cache=False).logits
    # torchtitan: FlexAttention / varlen need the block-causal masks of the positions (trainer.py
    # post_dataloading_process: Decoder.get_attention_masks); its SDPA module runs is_causal.
    from torchtitan.models.common.attention import FlexAttention, VarlenAttention
    inner = getattr(TITAN_CFG.first_attention, "inner_attention", None)
    if isinstance(inner, (FlexAttention.Config, VarlenAttention.Config)):
        positions = positions.expand(b, s)
        return model(tokens, positions=positions, attention_masks=model.get_attention_masks(positions=positions))
    return model(tokens)


class GatheredMuon(torch.optim.Optimizer):
    """Muon as shardplan simulates it (Moonlight's distributed Muon, arXiv:2502.16982 Algorithm 1): per matrix the
    momentum update of this rank's shard, gathered whole, orthogonalised on every rank by torch.optim.Muon's
    Newton-Schulz (torch/optim/_muon.py), and this rank's rows applied with Muon's learning-rate adjustment."""

    def __init__(self, params, lr=0.02, momentum=0.95, weight_decay=0.1, ns_steps=5):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS, _adjust_lr, _zeropower_via_newtonschulz
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                sharded = isinstance(p, DTensor)
                local = p.to_local() if sharded else p
                g = p.grad.to_local() if sharded else p.grad
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - group["momentum"])
                update = g.lerp(buf, group["momentum"])  # nesterov
                full = (DTensor.from_local(update, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                        .full_tensor() if sharded else update)
                ortho = _zeropower_via_newtonschulz(full, (DEFAULT_A, DEFAULT_B, DEFAULT_C), group["ns_steps"], EPS)
                if sharded:
                    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
                    ortho = ortho[offset[0]:offset[0] + shape[0]]
                local.mul_(1 - group["lr"] * group["weight_decay"])
                local.add_(ortho, alpha=-_adjust_lr(group["lr"], None, p.shape))
                del update, full, ortho  # one matrix's buffers at a time


class Optimizers:
    """Several optimizers stepped as one (Muon and the AdamW of the other parameters)."""

    def __init__(self, *opts):
        self.opts = opts

    def step(self):
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none=True):
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)


def make_optimizer(model, lr=3e-4, blocks_prefix=""):
    """The plan's optimizer (--optimizer): torch.optim AdamW / Adam / SGD / Adafactor, torchao's AdamW8bit,
    lion-pytorch's Lion, or GatheredMuon on the blocks' matrices with AdamW for the rest."""
    fused = PLAN["fused_optimizer"] and ARGS.device != "cpu"
    impl = {"fused": True} if fused else {"foreach": True}
    name, params = PLAN["optimizer"], [p for p in model.parameters() if p.requires_grad]  # LoRA: adapters
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, **impl)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.95), **impl)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=0.1, **impl)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2, weight_decay=0.1, foreach=ARGS.device != "cpu")
    if name == "adamw8bit":
        from torchao.optim import AdamW8bit
        return AdamW8bit(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    if name == "lion":
        from lion_pytorch import Lion
        return Lion(params, lr=lr / 3, betas=(0.9, 0.99), weight_decay=0.1)
    # muon: the blocks' 2-D weights; embeddings, head and norms with AdamW (torch.optim.Muon's documentation)
    named = [(clean(k), v) for k, v in model.named_parameters() if v.requires_grad]
    matrices = [v for k, v in named if k.startswith(blocks_prefix) and v.ndim == 2]
    rest = [v for k, v in named if not (k.startswith(blocks_prefix) and v.ndim == 2)]
    return Optimizers(GatheredMuon(matrices),
                      torch.optim.AdamW(rest, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, **impl))


def replicas_of(t):
    """How many ranks hold the same copy of this (sharded) tensor: the product of its mesh dims it replicates
    over (HSDP's replicate dim, TP for replicated weights); plain tensors are on every rank."""
    if not isinstance(t, DTensor):
        return dist.get_world_size()
    n = 1
    for i, pl in enumerate(t.placements):
        if isinstance(pl, Replicate):
            n *= t.device_mesh.size(i)
    return n


def grad_norm(model):
    """The global L2 norm of the gradients, from each rank's shards (each copy counted once)."""
    sq = torch.zeros((), dtype=torch.float64, device=DEVICE)
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            n = torch.linalg.vector_norm(g.detach(), dtype=torch.float32).to(sq.device, torch.float64)
            sq += n * n / replicas_of(p.grad)
    dist.all_reduce(sq)
    return sq.sqrt().item()


def fingerprint(model):
    """Per parameter, the first 1,024 values of this rank's shard: enough to see that a step changed the
    parameters (Adam moves every element with a gradient, weight decay every non-zero one), without copying
    them."""
    with torch.no_grad():
        return [(p.to_local() if isinstance(p, DTensor) else p).detach().flatten()[:1024].clone()
                for p in model.parameters()]


)PY";

}  // namespace shardplan

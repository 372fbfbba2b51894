// The second half of the script `--emit fsdp2` writes (the first: emit_fsdp2_script.cpp): LoRA through PEFT,
// materialising the sharded model, the step, the optimizers, what was built, and main.
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


# --- what was built --------------------------------------------------------------------------------------------
def tp_dim_of(t):
    """The tensor dim TP splits this parameter on, or None (replicated, or no TP)."""
    if not isinstance(t, DTensor) or "tp" not in (t.device_mesh.mesh_dim_names or ()):
        return None
    i = t.device_mesh.mesh_dim_names.index("tp")
    if t.device_mesh.size(i) == 1:
        return None
    pl = t.placements[i]
    return pl.dim if hasattr(pl, "dim") and not isinstance(pl, Replicate) else None


def fsdp_units(model):
    """The FSDP units (one per fully_shard call): their modules, parameters, and parameter counts: global,
    TP-local (the TP shard FSDP shards further: FSDPParam._orig_size, torch 2.15
    distributed/fsdp/_fully_shard/_fsdp_param.py) split by TP dim, and this rank's shard."""
    order = {id(p): i for i, p in enumerate(model.parameters())}
    states = {}
    for fqn, m in model.named_modules():
        if not hasattr(m, "_get_fsdp_state"):
            continue
        st = m._get_fsdp_state()
        states.setdefault(id(st), (st, []))[1].append(clean(fqn))
    units = []
    for st, modules in states.values():
        g = st._fsdp_param_group
        fps = list(g.fsdp_params) if g is not None else []
        u = dict(modules=modules, params=[clean(fp._param_fqn) for fp in fps], global_elems=0, tp_local_elems=0,
                 local_elems=0, tp_dim0=0, tp_dim1=0, tp_replicated=0,
                 reshard_after_forward=bool(g is not None and g.post_forward_mesh_info is not None))
        for fp in fps:
            sp = fp.sharded_param
            tp_local = fp._orig_size.numel()
            u["global_elems"] += sp.numel()
            u["tp_local_elems"] += tp_local
            u["local_elems"] += sp.to_local().numel() if isinstance(sp, DTensor) else sp.numel()
            d = tp_dim_of(sp)
            u["tp_dim0" if d == 0 else "tp_dim1" if d == 1 else "tp_replicated"] += tp_local
        u["_first"] = min((order.get(id(fp.sharded_param), 1 << 30) for fp in fps), default=1 << 30)
        units.append(u)
    units.sort(key=lambda u: u.pop("_first"))
    return units


def ac_wrappers(model):
    """The checkpoint wrappers: the module each wraps, and whether it recomputes everything (full) or follows a
    selective policy (a context_fn given to torch.utils.checkpoint)."""
    out = []
    for fqn, m in model.named_modules():
        if isinstance(m, CheckpointWrapper):
            kw = getattr(m.checkpoint_fn, "keywords", {})
            out.append({"module": clean(fqn), "mode": "selective" if "context_fn" in kw else "full"})
    return out


def tp_plan(model):
    """Per module with TP-sharded or TP-replicated parameters, the style its parameters show: colwise / rowwise
    (a linear's weight split on dim 0 / 1), vocab (an embedding split on the vocab dim), replicate (a norm's
    weight on the TP mesh, sequence-parallel)."""
    plan = {}
    for fqn, m in model.named_modules():
        styles = set()
        for name, p in m.named_parameters(recurse=False):
            if not isinstance(p, DTensor) or "tp" not in (p.device_mesh.mesh_dim_names or ()):
                continue
            if p.device_mesh.size(p.device_mesh.mesh_dim_names.index("tp")) == 1:
                continue
            d = tp_dim_of(p)
            if d is None:
                styles.add("replicate")
            elif isinstance(m, nn.Embedding):
                styles.add("vocab")
            elif name == "weight":
                styles.add("colwise" if d == 0 else "rowwise")
        if styles:
            plan[clean(fqn)] = "+".join(sorted(styles))
    return plan


def main():
    global ARGS, DEVICE, HF_PATH, TITAN_CFG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-source", choices=["hf", "titan"], default="hf")
    ap.add_argument("--model-path", default="", help="hf: a directory with config.json and *.safetensors, or a "
                    "Hugging Face model id")
    ap.add_argument("--model-factory", default="", help="titan: MODULE:FUNCTION returning the torchtitan model "
                    "config (default: the registry flavor of the plan's model)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model of the same family, built locally")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ARGS = ap.parse_args()
    backend = "gloo" if ARGS.device == "cpu" else "nccl"
    dist.init_process_group(backend)
    world, rank = dist.get_world_size(), dist.get_rank()
    if ARGS.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        DEVICE = torch.device("cuda", torch.cuda.current_device())
    else:
        DEVICE = torch.device("cpu")
    torch.manual_seed(0)
    meshes = build_meshes(world)
    rep, shard, tp = mesh_shape(world)
    seq = 16 if ARGS.tiny else PLAN["seq"]
    mbs = 2 if ARGS.tiny else PLAN["mbs"]
    accum = 1 if ARGS.tiny else PLAN["grad_accum"]

    # 1. The model on the meta device: parameters without memory.
    if ARGS.tiny:
        with torch.device("meta"):
            model = TinyModel(ARGS.model_source)
        vocab = model.vocab
    elif ARGS.model_source == "hf":
        model, HF_PATH = build_hf()
        vocab = model.config.vocab_size
    else:
        if PLAN["attention"] != "flash" or PLAN["attention_dropout"]:
            log(f"note: the plan simulated {PLAN['attention']} attention with dropout {PLAN['attention_dropout']}; "
                "torchtitan's model attends as its config says")
        model, TITAN_CFG = build_titan(meshes, seq)
        vocab = TITAN_CFG.vocab_size
    if LORA:
        apply_lora(model)
    # 2. float8, TP, AC, compile, FSDP: the plan, applied to the meta model (torchtitan's order, parallelize.py).
    n = NAMES[ARGS.model_source]
    if PLAN["fp8"] != "none":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        cfg = (Float8LinearConfig.from_recipe_name("rowwise") if PLAN["fp8"] == "rowwise" else
               Float8LinearConfig(enable_fsdp_float8_all_gather=PLAN["fp8_all_gather"]))
        if ARGS.device == "cpu":
            # The CPU has no float8 GEMM: torchao's emulation casts and scales to float8 exactly as on the GPU and
            # multiplies in high precision (Float8LinearConfig.emulate), so the float8 path itself runs.
            log("note: float8 GEMMs emulated on --device cpu (torchao Float8LinearConfig emulate=True)")
            cfg = dataclasses.replace(cfg, emulate=True)
        blocks_prefix = n["blocks"] + "."
        convert_to_float8_training(model, config=cfg, module_filter_fn=lambda m, fqn: fqn.startswith(blocks_prefix))
    if tp > 1:
        apply_tp(model, meshes)
    blocks = get(model, n["blocks"])
    apply_ac(blocks)
    if PLAN["compile"] and ARGS.device != "cpu":
        for name, block in list(blocks.named_children()):
            blocks.register_module(name, torch.compile(block))
    if PLAN["precision"] in ("bf16", "bf16-true"):
        model.to(torch.bfloat16)  # parameters, gradients and optimizer state in bf16
    apply_fsdp(model, meshes)
    # 3. This rank's shards, filled from the checkpoint or initialised.
    materialize(model, DEVICE)
    model.train()
    opt = make_optimizer(model, blocks_prefix=n["blocks"] + ".")
    before = fingerprint(model)

    gen = torch.Generator().manual_seed(1000 + rank // tp)  # one data stream per data-parallel rank
    loss_fn = F.cross_entropy
    if PLAN["compile_loss"] and ARGS.device != "cpu":
        loss_fn = torch.compile(F.cross_entropy)  # the compiled loss the plan simulated

    def attention_kernel():
        # The SDPA kernel the plan simulated (--sdpa-backend); otherwise torch's choice. The CPU has none of them.
        if PLAN["sdpa_backend"] is None or ARGS.device == "cpu":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, PLAN["sdpa_backend"]))

    # fp16-mixed: dynamic loss scaling with FSDP's ShardedGradScaler (torch 2.15
    # torch/distributed/fsdp/sharded_grad_scaler.py; init_scale 2**16, growth_interval 2000): the loss is scaled
    # before backward, unscale_ checks and unscales this rank's gradient shards and all-reduces found_inf over the
    # ranks, step() skips the optimizer step on inf/nan, update() adjusts the scale.
    scaler = None
    if PLAN["precision"] == "fp16-mixed":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        scaler = ShardedGradScaler(device=DEVICE.type)
    opts = opt.opts if isinstance(opt, Optimizers) else (opt,)
    scale_steps = []

    losses, norms = [], []
    for step in range(ARGS.steps):
        # One step's batch for this data-parallel rank, cut into `accum` micro-batches of `mbs` sequences.
        batch = torch.randint(0, vocab, (mbs * accum, seq + 1), generator=gen).to(DEVICE)
        step_loss = 0.0
        for tokens in batch.split(mbs):
            logits = None
            with attention_kernel():
                # --activation-offload all: every tensor the model's forward saves goes to pinned host memory
                # (torch.autograd.graph.save_on_cpu); the loss runs outside it.
                offload = PLAN["activation_offload"]
                with (torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext()):
                    logits = forward(model, tokens[:, :-1])
                # Vocab-parallel logits (TP: the head's output sharded on the vocab dim) go to a vocab-parallel
                # cross-entropy (torch.distributed.tensor.parallel.loss_parallel), forward and backward.
                parallel = isinstance(logits, DTensor) and any(isinstance(p, Shard) for p in logits.placements)
                with (torch.distributed.tensor.parallel.loss_parallel() if parallel else contextlib.nullcontext()):
                    if PLAN["loss_dtype"] == "fp32":
                        logits = logits.float()
                    # The mean over the micro-batch's tokens, divided by the micro-batches of the step: the
                    # accumulated gradient is the step's mean (torchtitan trainer.py: the sum loss over the global
                    # token count of all micro-batches).
                    loss = loss_fn(logits.flatten(0, 1), tokens[:, 1:].flatten()) / accum
                    if not PLAN["hold_logits"]:
                        del logits  # torchtitan's `del pred`: the logits do not live through backward
                    (scaler.scale(loss) if scaler else loss).backward()
            step_loss += (loss.full_tensor() if isinstance(loss, DTensor) else loss).item()
        if scaler:
            for o in opts:
                scaler.unscale_(o)
        norms.append(grad_norm(model))
        if scaler:
            for o in opts:
                scaler.step(o)
            scale_steps.append(scaler.get_scale())
            scaler.update()
        else:
            opt.step()
        # set_to_none=False keeps the gradients allocated across steps (--zero-grad-in-place).
        opt.zero_grad(set_to_none=not PLAN["zero_grad_in_place"])
        losses.append(step_loss)
    changed = any(not torch.equal(a, b) for a, b in zip(before, fingerprint(model)))
    finite = all(torch.isfinite(torch.tensor(losses)).tolist())
    float8_linears = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    # FSDPParam.offload_to_cpu: the CPUOffloadPolicy reached the sharded parameters.
    groups = [m._get_fsdp_state()._fsdp_param_group for m in model.modules() if hasattr(m, "_get_fsdp_state")]
    offloaded = any(p.offload_to_cpu for g in groups if g is not None for p in g.fsdp_params)
    built = {"fsdp_units": fsdp_units(model), "ac": ac_wrappers(model), "tp_plan": tp_plan(model),
             "meshes": meshes.describe(), "micro_batches": {"mbs": mbs, "grad_accum": accum, "seq": seq,
                                                            "loss_scale": 1.0 / accum},
             "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
             "frozen_dtypes": sorted({str(p.dtype) for p in model.parameters() if not p.requires_grad}),
             "frozen_with_grad": sum(p.grad is not None for p in model.parameters() if not p.requires_grad)}
    if rank == 0:
        print(json.dumps({"losses": losses, "grad_norms": norms, "loss_finite": finite, "params_changed": changed,
                          "mesh": [rep, shard, tp], "float8_linears": float8_linears,
                          "cpu_offload_policy": offloaded, "loss_scales": scale_steps, "built": built}),
              flush=True)
    # Every rank finishes its collectives before the group goes away (a rank tearing down gloo while another still
    # gathers aborts with "terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if finite and changed else 1)


ARGS = argparse.Namespace(tiny=False, device="cuda", model_source="hf")
DEVICE = torch.device("cpu")
HF_PATH = None
TITAN_CFG = None
if __name__ == "__main__":
    main()
)PY";

}  // namespace shardplan

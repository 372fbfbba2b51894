// The last quarter of the script `--emit fsdp2` writes (emit_fsdp2_script.cpp says what the script is): what
// was built (FSDP units, AC wrappers, the TP plan) and main.
#include "planner/emit.hpp"

namespace shardplan {

extern const char* const kFsdp2ScriptMain;
const char* const kFsdp2ScriptMain =
    R"PY(# --- what was built --------------------------------------------------------------------------------------------
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
             "frozen_with_grad": sum(p.grad is not None for p in model.parameters() if not p.requires_grad),
             # transformers' MoE experts implementation the model dispatched on (HF_EXPERTS; None: torchtitan)
             "experts_implementation": getattr(getattr(model, "config", None), "_experts_implementation", None)}
    if rank == 0:
        print(json.dumps({"losses": losses, "grad_norms": norms, "loss_finite": finite, "params_changed": changed,
                          "mesh": [rep, shard, tp], "float8_linears": float8_linears,
                          "cpu_offload_policy": offloaded, "loss_scales": scale_steps, "built": built}),
              flush=True)
    # Every rank finishes its collectives before the group goes away (a rank tearing down gloo while another still
    # gathers aborts with "terminate called without an active exception"). Then leave without finalizing the
    # interpreter: finalization can destroy tensors gloo's work objects still hold, taking the GIL mid-teardown, and
    # abort with the same message after the output was printed (pytorch PR 179291; tools/common/teardown.py).
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if finite and changed else 1)


ARGS = argparse.Namespace(tiny=False, device="cuda", model_source="hf")
DEVICE = torch.device("cpu")
HF_PATH = None
TITAN_CFG = None
if __name__ == "__main__":
    main()
)PY";

}  // namespace shardplan

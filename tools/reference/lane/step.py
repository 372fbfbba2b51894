"""The reference lane's data-parallel run: one training step (or more) of the wrapped model under the tracker."""
import gc
import time

from lane.args import resolve_plan
from lane.models import build_model_classes
from lane.offload import SaveOnCpu
from lane.pp import run_pp
from lane.record import record_plan, write_outputs
from lane.sac import apply_ac
from lane.spec import PlanError, load_spec, normalize_spec, param_count
from lane.tracker import patch_mesh_concatenate
from lane.wrap import apply_float8, apply_tp, wrap_ddp, wrap_fsdp1, wrap_fsdp2


def chunked_loss(torch, model, plan, state, tracker):
    """torchtitan 0.3.0's chunked loss (components/loss.py ChunkedLossWrapper with the eager CrossEntropyLoss, the
    trainer's `loss_fn.set_lm_head(model.lm_head)`): called on the final norm's output (the model skips its head), it
    runs the head, the cross-entropy and each chunk's backward inside the call; the returned loss's backward hands
    the assembled gradient to the decoder."""
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

    if "chunked_loss" not in state:
        fn = ChunkedLossWrapper.Config(num_chunks=plan["loss_chunks"], loss_fn=CrossEntropyLoss.Config()).build()
        fn.set_lm_head(model.output)
        state["chunked_loss"] = fn
        # FSDPMemTracker refuses a forward of an FSDP module whose only parent module is the global scope once it
        # has run (it takes it for the next iteration), and each chunk's backward resets ModTracker's parents: the
        # head's calls are those of a submodule run several times in one iteration (which it tracks), so give them
        # a parent before FSDP's pre-forward (allocates nothing).
        model.output.register_forward_pre_hook(lambda *_: tracker._mod_tracker.parents.add("ChunkedLossWrapper"),
                                               prepend=True)
    return state["chunked_loss"]


def train_step(torch, model, optim, spec, plan, state, clip, tracker):
    """torchtitan's train_step: micro-batches (forward, loss, backward), clip_grad_norm_, optimizer step."""
    import contextlib

    state["phase"] = "step"
    loss_ctx = contextlib.nullcontext
    if plan["tp"] > 1:
        from torch.distributed.tensor.parallel import loss_parallel as loss_ctx
    for micro in range(plan["grad_accum"]):
        state["micro"] = micro
        # FSDPMemTracker keeps per-module stats for one forward/backward: clear them (live storages stay tracked).
        tracker.reset_mod_stats()
        tokens = torch.randint(0, spec["vocab"], (plan["mbs"], plan["seq"]))
        labels = torch.randint(0, spec["vocab"], (plan["mbs"], plan["seq"]))
        if plan.get("activation_offload", "none") == "all":
            # The emitted FSDP2 script: the model's forward under save_on_cpu(pin_memory=True), the loss outside it.
            offload = state.setdefault("offload", SaveOnCpu(torch))
            with offload.context():
                pred = model(tokens)
        else:
            pred = model(tokens)
        if plan["loss_impl"] == "chunked":
            # The trainer's forward_backward_step: `loss = self.loss_fn(pred, labels, global_valid_tokens)`,
            # `del pred`, `loss.backward()`.
            loss = chunked_loss(torch, model, plan, state, tracker)(pred, labels, torch.tensor(labels.numel()))[0]
            tracker._mod_tracker.parents.discard("ChunkedLossWrapper")
            del pred
            loss.backward()
            del loss, tokens, labels
            continue
        if plan["hold_logits"]:
            # shardplan's --hold-logits is torchtitan until mid-2024, whose model returned output(h).float(): the
            # loop's `pred` keeps fp32 logits referenced through backward.
            pred = pred.float()
        # torchtitan components/loss.py cross_entropy_loss: upcast the logits to fp32.
        logits = pred.flatten(0, 1)
        if plan["loss_dtype"] == "fp32":
            logits = logits.float()
        with loss_ctx():
            loss = torch.nn.functional.cross_entropy(logits, labels.flatten(0, 1))
            del logits
            if not plan["hold_logits"]:
                del pred  # torchtitan deletes pred before backward
            scaler = state.get("scaler")
            (scaler.scale(loss) if scaler else loss).backward()
        del loss, tokens, labels
        if plan["hold_logits"]:
            del pred
    state["phase"] = "optimizer"
    scaler = state.get("scaler")
    if scaler:
        # ShardedGradScaler.unscale_ (torch 2.15 torch/distributed/fsdp/sharded_grad_scaler.py): found_inf and
        # inv_scale, _amp_foreach_non_finite_check_and_unscale_ over the gradient shards, found_inf all-reduced.
        scaler.unscale_(optim)
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optim.step()
    if scaler:
        # GradScaler.step and, on the CPU device, update() (_amp_update_scale_cpu_) read found_inf with `.item()`,
        # which a fake tensor cannot answer: the step is taken as it is when no inf was found (the common case), and
        # update's end is done by hand: the per-optimizer state (found_inf per device) is dropped. On CUDA update()
        # runs torch._amp_update_scale_ in place on the scale and the growth tracker (no new tensors).
        from collections import defaultdict
        from torch.amp.grad_scaler import _refresh_per_optimizer_state

        scaler._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)
    if plan["fp8_all_gather"]:
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(model)
    optim.zero_grad()


def run(a) -> int:
    spec_raw, record_model = load_spec(a.model)
    if a.layers:
        if a.layers < 1:
            raise PlanError("--layers: must be >= 1")
        spec_raw = dict(spec_raw)
        spec_raw["name"] = f"{spec_raw.get('name', 'custom')}-d{a.layers}"
        spec_raw["layers"] = a.layers
        record_model = spec_raw
    spec = normalize_spec(spec_raw)
    plan = resolve_plan(a, spec)
    if a.pp != 1 or a.pp_layers or a.pp_rank != -1 or a.virtual_stages:
        return run_pp(a, spec, record_model, plan)
    N = a.gpus

    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    t0 = time.time()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)
    # HSDP (--shard-group S < N): a 2-D mesh (replicate N/S, shard S); fully_shard on it replicates across the
    # first dimension and shards across the second (torch/distributed/fsdp/_fully_shard/_fully_shard.py).
    S, TP = plan["shard_group"], plan["tp"]
    tp_mesh = None
    if TP > 1:
        # torchtitan's (dp_shard, tp) mesh: FSDP2 over "dp_shard", DTensor TP over "tp" (innermost).
        mesh2 = init_device_mesh("cpu", (N // TP, TP), mesh_dim_names=("dp_shard", "tp"))
        mesh, tp_mesh = mesh2["dp_shard"], mesh2["tp"]
        patch_mesh_concatenate(torch)
    elif S == N:
        mesh = init_device_mesh("cpu", (N,))
    else:
        mesh = init_device_mesh("cpu", (N // S, S), mesh_dim_names=("replicate", "shard"))
    Transformer = build_model_classes(torch)
    state = {"phase": "init", "step": 0, "micro": 0, "propagating": False}
    fake = FakeTensorMode(allow_non_fake_inputs=False)
    with fake:
        param_dtype = torch.bfloat16 if plan["precision"] in ("bf16", "bf16-true") else torch.float32
        with torch.device("cpu"):
            torch.set_default_dtype(param_dtype)
            model = Transformer(spec, plan["seq"])
            torch.set_default_dtype(torch.float32)
        model.skip_lm_head = plan["loss_impl"] == "chunked"
        state["group_hooks"] = model.skip_lm_head  # FSDP2's grouped forward hooks (lane/tracker.py)
        n_params = sum(p.numel() for p in model.parameters())
        expect = param_count(spec)
        if n_params != expect:
            raise RuntimeError(f"built {n_params} parameters, closed form says {expect}")
        if plan["fp8"] != "none":
            apply_float8(torch, model, plan)
        if tp_mesh is not None:
            apply_tp(torch, model, tp_mesh)
        # Activation checkpointing, as torchtitan applies it: one checkpoint_wrapper per block.
        apply_ac(torch, model.layers, plan["ac"])
        if plan["zero"] == 0:
            model, optim, tracker = wrap_ddp(torch, model, plan, state)
        elif plan["runtime"] == "fsdp1":
            model, optim, tracker = wrap_fsdp1(torch, model, spec, plan, state, mesh)
        else:
            model, optim, tracker = wrap_fsdp2(torch, model, spec, plan, state, mesh)
        if plan["precision"] == "fp16-mixed":
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            state["scaler"] = ShardedGradScaler(device="cpu")
        # torchtitan's GarbageCollection (components/gc? tools/utils.py): gc.disable(), one collection at start,
        # then every gc_freq = 50 steps. Frees then come from reference counting only: deterministic traces.
        gc.collect()
        gc.disable()
        with tracker:
            if plan["zero"] == 0:
                # DDP's Reducer allocates its flat bucket buffers in the constructor: build it inside the tracker.
                state["phase"] = "wrap (DDP Reducer buckets)"
                model = model.wrap()
            if a.warmup == "init":
                # The optimizer states exist from the first step on: create them as that step would (zero
                # gradients in the sharded parameters' dtype, one optimizer step), without its forward/backward.
                state["phase"] = "optimizer"
                for p in model.parameters():
                    p.grad = torch.zeros_like(p)
                optim.step()
                optim.zero_grad()
            else:
                state["step"] = 0
                train_step(torch, model, optim, spec, plan, state, clip=not a.no_clip, tracker=tracker)
            for step in range(1, a.steps + 1):
                state["step"] = step
                train_step(torch, model, optim, spec, plan, state, clip=not a.no_clip, tracker=tracker)
            state["phase"] = "end"
    rid = f"ref-{spec.get('name', 'custom')}-g{N}-z{plan['zero']}-ac{plan['ac']}-mbs{plan['mbs']}" \
          f"-s{plan['seq']}-ga{plan['grad_accum']}-{plan['precision']}" + \
          ("-activation-offload-all" if plan["activation_offload"] == "all" else "")
    rec_plan = record_plan(plan, plan["grad_accum"])
    if spec.get("moe"):  # SparseMoe: Hugging Face's loop over the experts (shardplan --moe-impl loop)
        rec_plan["moe_impl"] = "loop"
    if plan["shard_group"] != N // plan["tp"]:
        rec_plan["shard_group"] = plan["shard_group"]
    if plan["tp"] > 1:
        rec_plan["tp"] = plan["tp"]
    if plan["activation_offload"] != "none":
        rec_plan["activation_offload"] = plan["activation_offload"]
    notes_offload = state["offload"].notes(plan["grad_accum"] * (a.steps + (a.warmup != "init"))) \
        if "offload" in state else ""
    if plan["fp8"] != "none":
        rec_plan["fp8"] = plan["fp8"]
        rec_plan["fp8_all_gather"] = plan["fp8_all_gather"]
    if plan["zero"] == 0:
        wrapping = "DDP (bucket_cap_mb=25, gradient_as_bucket_view=False)"
    elif plan["runtime"] == "fsdp1":
        wrapping = "FSDP1 FullyShardedDataParallel (use_orig_params) per block + root"
    else:
        wrapping = "FSDP2 fully_shard per block + root" + (
            f", explicit prefetch {plan['prefetch']}" if plan["prefetch"] > 1 else "")
    return write_outputs(a, torch, dist, tracker.events, t0, rid, record_model, rec_plan, {},
                         f"tools/reference/run.py: rank 0 of {N}, FakeTensorMode on the CPU device, {wrapping}, "
                         + notes_offload,
                         n_params)

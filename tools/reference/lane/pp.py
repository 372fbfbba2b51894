"""The reference lane's pipeline-parallel run: one pipeline rank of a torchtitan-style PP x FSDP2 step."""
import gc
import time

from lane.models import build_model_classes
from lane.record import record_plan, write_outputs
from lane.sac import apply_ac
from lane.spec import PlanError
from lane.tracker import make_tracker


# ---------------------------------------------------------------------------------------------------------------
# Pipeline parallelism: torchtitan's split and FSDP2-inside-the-stage, driven by torch.distributed.pipelining.

PP_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "zbv": "ZBVZeroBubble",
                "dualpipev": "DualPipeV"}


def resolve_pp(a, spec, plan) -> dict:
    """The pipeline part of the plan, checked as simulator/simulate/pipeline_step.cpp checks it (resolve_pipeline,
    stage_blocks): stages, the blocks of each (torchtitan's split or --pp-layers), the ranks' stages, the
    measured rank."""
    def bad(flag, why):
        raise PlanError(f"{flag}: {why}")

    pp, sched = a.pp, a.pp_schedule
    if pp < 2:
        bad("--pp", "the pipeline lane needs --pp >= 2")
    if sched not in PP_SCHEDULES:
        bad("--pp-schedule", f"unknown value \"{sched}\"; expected {' | '.join(PP_SCHEDULES)}")
    if a.gpus % pp:
        bad("--pp", f"{pp} does not divide --gpus {a.gpus}")
    if plan["runtime"] != "fsdp2" or plan["zero"] == 0 or plan["tp"] > 1 or a.shard_group not in (0, a.gpus // pp):
        bad("--pp", "the reference lane runs pipeline parallelism with FSDP2 (ZeRO-2/3) inside each stage, "
                    "no TP, no HSDP")
    if plan["fp8"] != "none" or plan["prefetch"] != 1 or plan["wrap"] != 1 or plan["hold_logits"]:
        bad("--pp", "float8, explicit prefetch, --wrap and --hold-logits are not covered with pipelining")
    if spec.get("tied_embeddings") or spec.get("moe"):
        bad("--pp", "tied embeddings and MoE are not covered with pipelining")
    if a.global_batch:
        bad("--global-batch", "give the pipeline's micro-batches as --grad-accum")
    single = sched in ("gpipe", "1f1b")
    V = a.virtual_stages or (1 if single else 2)
    if single and V != 1:
        bad("--virtual-stages", f"{sched} runs one stage per rank; use --virtual-stages 1")
    if sched in ("zbv", "dualpipev") and V != 2:
        bad("--virtual-stages", f"{sched} needs exactly 2 stages per rank")
    if not single and V < 2:
        bad("--virtual-stages", f"{sched} needs at least 2 stages per rank")
    S, L, m = pp * V, spec["layers"], plan["grad_accum"]
    if a.pp_layers:
        try:
            blocks = [int(x) for x in a.pp_layers.split(",")]
        except ValueError:
            bad("--pp-layers", "expected comma-separated block counts (\"3,4,4,3\")")
        if len(blocks) != S or sum(blocks) != L or min(blocks) < 0 or 0 in blocks[1:-1]:
            bad("--pp-layers", f"expected {S} entries summing to {L}, only the first and last may be 0")
    else:
        # torchtitan pipeline_parallel.py _generate_llm_fqn_per_model_part(S, L, input_weight=1,
        # output_weight=1): L + 2 effective layers, each stage effective // S, the first effective % S one more;
        # the embedding takes one of the first stage's, norm + head one of the last's.
        eff = L + 2
        if S > eff:
            bad("--pp", f"{S} stages exceed the model's {L} blocks + embedding + head")
        per, extra, left, blocks = eff // S, eff % S, L, []
        for s in range(S):
            n = per + (s < extra) - (s in (0, S - 1))
            n = min(max(n, 0), left)
            blocks.append(n)
            left -= n
    if sched == "1f1b" and m < pp:
        bad("--grad-accum", f"1f1b needs at least as many micro-batches ({m}) as stages ({pp})")
    if sched == "dualpipev" and m < S:
        bad("--grad-accum", f"dualpipev needs at least as many micro-batches ({m}) as stages ({S})")
    if sched == "interleaved-1f1b" and m % max(1, m // pp):
        bad("--grad-accum", f"interleaved-1f1b needs the micro-batches ({m}) to be a multiple of max(1, m / pp)")
    rank = a.pp_rank if a.pp_rank >= 0 else 0
    if rank >= pp:
        bad("--pp-rank", f"{rank} is not a rank of --pp {pp}")
    # torchtitan _get_pp_rank_to_stage_indices_mapping: loop style r, r + pp, ...; V style (r, 2 pp - 1 - r).
    stages = [rank, 2 * pp - 1 - rank] if sched in ("zbv", "dualpipev") else [rank + v * pp for v in range(V)]
    return {"pp": pp, "schedule": sched, "V": V, "S": S, "blocks": blocks, "rank": rank, "stages": stages,
            "pp_layers": a.pp_layers}


def stage_model_class(Transformer):
    """The model class of a pipeline stage, derived from the lane's Transformer."""

    class StageModel(Transformer):
        """torchtitan's Decoder forward tolerates the modules a stage lacks (None): tokens in on the first stage,
        hidden states between stages, logits out of the last."""

        def forward(self, x):
            h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
            fc = self.freqs_cis[: x.shape[1]] if self.freqs_cis.is_complex() else self.freqs_cis
            for layer in self.layers.values():
                h = layer(h, fc)
            h = self.norm(h) if self.norm is not None else h
            return self.output(h) if self.output is not None else h

    return StageModel


def split_stage(torch, StageModel, s, spec, plan, pp_cfg, param_dtype):
    """Stage s's module as torchtitan's _split_module leaves it: this stage's blocks (FQNs kept), the embedding on
    the first stage, the final norm and head on the last, the others None; activation checkpointing per block."""
    S, blocks = pp_cfg["S"], pp_cfg["blocks"]
    first_block = sum(blocks[:s])
    with torch.device("cpu"):
        torch.set_default_dtype(param_dtype)
        mod = StageModel(spec, plan["seq"])
        torch.set_default_dtype(torch.float32)
    # torchtitan _split_module: keep this stage's modules, the others None / deleted.
    keep = {str(i) for i in range(first_block, first_block + blocks[s])}
    for name in list(mod.layers.keys()):
        if name not in keep:
            del mod.layers[name]
    if s != 0:
        mod.tok_embeddings = None
    if s != S - 1:
        mod.norm = None
        mod.output = None
    apply_ac(torch, mod.layers, plan["ac"])
    return mod


def shard_stage(torch, mod, plan, mesh):
    """torchtitan apply_fsdp_to_decoder with pp_enabled: reshard_after_forward "default" -> not pp_enabled (False)
    for the embedding and the blocks; [norm, output] never resharded after forward; the root."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if plan["precision"] == "bf16-mixed":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, cast_forward_inputs=False,
                                  reduce_dtype=torch.float32 if plan["reduce_dtype"] == "fp32" else torch.bfloat16)
    else:
        mp = MixedPrecisionPolicy(cast_forward_inputs=False)
    kw = {"mesh": mesh, "mp_policy": mp}
    if mod.tok_embeddings is not None:
        fully_shard(mod.tok_embeddings, reshard_after_forward=False, **kw)
    if mod.norm is not None:
        fully_shard([mod.norm, mod.output], reshard_after_forward=False, **kw)
    for block in mod.layers.values():
        fully_shard(block, reshard_after_forward=False, **kw)
    fully_shard(mod, **kw)


def pipeline_stage(torch, mod, s, spec, plan, S, act_dtype, pp_group, state):
    """The PipelineStage of stage s of S in static mode (its input and output metadata given); its actions set the
    trace's micro-batch."""
    from torch.distributed.pipelining import PipelineStage

    mbs_shape = (plan["mbs"], plan["seq"])
    inp = (torch.empty(mbs_shape, dtype=torch.long) if s == 0
           else torch.empty(mbs_shape + (spec["hidden"],), dtype=act_dtype, requires_grad=True))
    # requires_grad marks the tensors whose gradients travel back (static mode derives the gradients' metadata
    # from these).
    out = torch.empty(mbs_shape + ((spec["vocab"],) if s == S - 1 else (spec["hidden"],)), dtype=act_dtype,
                      requires_grad=True)
    pstage = PipelineStage(mod, s, S, torch.device("cpu"), input_args=inp, output_args=out, group=pp_group)
    # The trace's phases name the micro-batch each action of the schedule runs.
    for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
        def action(chunk_id, *args, _run=getattr(pstage, name), **kwargs):
            state["micro"] = chunk_id
            return _run(chunk_id, *args, **kwargs)
        setattr(pstage, name, action)
    return pstage


def run_pp(a, spec, record_model, plan) -> int:
    """One pipeline rank of a torchtitan-style PP x FSDP2 step: the rank's stage modules split from the model as
    torchtitan's _split_module does (modules of other stages set to None, blocks deleted from the ModuleDict,
    FQNs kept), FSDP2 applied to each as apply_fsdp_to_decoder with pp_enabled (reshard_after_forward False for
    the blocks and the embedding, [norm, output] one unit, the stage root), a PipelineStage per stage on the pp
    group of a (pp, dp_shard) mesh, the schedule class torchtitan builds (n_microbatches = grad_accum, the
    loss function, scale_grads=False) and schedule.step(tokens, target=labels, losses=[], return_outputs=False)
    as torchtitan's trainer calls it; then clip_grad_norm_ and the optimizer step. Stage input/output metadata
    is given to PipelineStage (static mode): the dynamic mode exchanges it with send_object_list, whose
    pickled payload a fake process group cannot carry (docs/reference-lane.md "Pipeline parallelism")."""
    pp_cfg = resolve_pp(a, spec, plan)
    N, pp, rank = a.gpus, pp_cfg["pp"], pp_cfg["rank"]
    dp = N // pp

    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class

    t0 = time.time()
    # Rank `rank` of the pipeline: global rank rank x dp on the (pp, dp_shard) mesh (pp outermost).
    dist.init_process_group("fake", store=FakeStore(), rank=rank * dp, world_size=N)
    mesh2 = init_device_mesh("cpu", (pp, dp), mesh_dim_names=("pp", "dp_shard"))
    pp_group, mesh = mesh2.get_group("pp"), mesh2["dp_shard"]
    StageModel = stage_model_class(build_model_classes(torch))
    state = {"phase": "init", "step": 0, "micro": 0, "propagating": False}
    S = pp_cfg["S"]
    fake = FakeTensorMode(allow_non_fake_inputs=False)
    with fake:
        param_dtype = torch.bfloat16 if plan["precision"] in ("bf16", "bf16-true") else torch.float32
        act_dtype = torch.float32 if plan["precision"] == "fp32" else torch.bfloat16
        mods, pstages = [], []
        for s in pp_cfg["stages"]:
            mod = split_stage(torch, StageModel, s, spec, plan, pp_cfg, param_dtype)
            shard_stage(torch, mod, plan, mesh)
            pstages.append(pipeline_stage(torch, mod, s, spec, plan, S, act_dtype, pp_group, state))
            mods.append(mod)
        params = [p for mod in mods for p in mod.parameters()]
        optim = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, fused=plan["fused_optimizer"],
                                  foreach=None if plan["fused_optimizer"] else True)

        def loss_fn(pred, labels):
            # torchtitan components/loss.py cross_entropy_loss: the logits upcast to fp32.
            logits = pred.flatten(0, 1)
            if plan["loss_dtype"] == "fp32":
                logits = logits.float()
            return torch.nn.functional.cross_entropy(logits, labels.flatten(0, 1))

        cls = get_schedule_class(PP_SCHEDULES[pp_cfg["schedule"]])
        m = plan["grad_accum"]
        if issubclass(cls, PipelineScheduleMulti):
            schedule = cls(pstages, n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
        else:
            schedule = cls(pstages[0], n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
        has_first, has_last = 0 in pp_cfg["stages"], S - 1 in pp_cfg["stages"]
        # FSDPMemTracker instruments the FSDP modules under its root: every stage module of this rank.
        tracker = make_tracker(torch, mods[0], optim, state)
        tracker._root_mod = torch.nn.ModuleList(mods)
        gc.collect()
        gc.disable()
        with tracker:
            state["phase"] = "optimizer"
            for p in params:
                p.grad = torch.zeros_like(p)
            optim.step()
            optim.zero_grad()
            for step in range(1, a.steps + 1):
                state["step"] = step
                state["phase"] = "step"
                tracker.reset_mod_stats()
                tokens = torch.randint(0, spec["vocab"], (plan["mbs"] * m, plan["seq"])) if has_first else None
                labels = torch.randint(0, spec["vocab"], (plan["mbs"] * m, plan["seq"])) if has_last else None
                losses = [] if has_last else None
                args = (tokens,) if has_first else ()
                schedule.step(*args, target=labels, losses=losses, return_outputs=False)
                del tokens, labels, losses, args
                state["phase"] = "optimizer"
                if not a.no_clip:
                    torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                optim.step()
                optim.zero_grad()
            state["phase"] = "end"
    rid = f"ref-{spec.get('name', 'custom')}-g{N}-pp{pp}-{pp_cfg['schedule']}-r{rank}-ac{plan['ac']}" \
          f"-mbs{plan['mbs']}-s{plan['seq']}-m{m}"
    rec_plan = record_plan(plan, m)
    if spec.get("moe"):  # SparseMoe: Hugging Face's loop over the experts (shardplan --moe-impl loop)
        rec_plan["moe_impl"] = "loop"
    rec_plan.update({"pp": pp, "pp_schedule": pp_cfg["schedule"], "virtual_stages": pp_cfg["V"]})
    if pp_cfg["pp_layers"]:
        rec_plan["pp_layers"] = pp_cfg["pp_layers"]
    return write_outputs(
        a, torch, dist, tracker.events, t0, rid, record_model, rec_plan, {"pp_rank": rank},
        f"tools/reference/run.py: pipeline rank {rank} of {pp} (stages {pp_cfg['stages']} of {S}, blocks per "
        f"stage {pp_cfg['blocks']}), global rank {rank * dp} of {N}, FakeTensorMode on the CPU device, "
        f"torch.distributed.pipelining Schedule{PP_SCHEDULES[pp_cfg['schedule']]} with {m} micro-batches, FSDP2 "
        f"fully_shard per block + embedding + [norm, output] + stage root (reshard_after_forward=False), ",
        sum(p.numel() for p in params))

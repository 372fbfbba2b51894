"""One published run -> one shardplan.run/1 record (or a skip reason)."""
from published.clusters import map_cluster, scope_of
from published.measured import map_measured
from published.models import map_megatron, map_model, nemo_preset
from published.plan import _positive_int, fp8_recipe, fp8_text, map_ac, runtime_of, zero_of
from published.presets import FP8_REASON, load_presets
from published.rules import cite, map_precision


def pipeline_expressible(rec):
    """PP runs the tool models: DeepSpeed's PipelineEngine (ZeRO 0/1; Megatron-DeepSpeed) and FSDP2 stages
    under torch.distributed.pipelining (torchtitan)."""
    rt = runtime_of(rec)
    z = zero_of(rec)
    return (rt == "deepspeed" and z is not None and z <= 1) or rt in ("fsdp2", "megatron")


def skip_reason(rec):
    """Return (primary reason, [other reasons]) or (None, [])."""
    p = rec["parallel"]
    reasons = []
    if fp8_recipe(rec) == "mx":
        reasons.append(FP8_REASON)
    if (p.get("pp") or 1) > 1 and not pipeline_expressible(rec):
        reasons.append("pipeline parallelism (pp=%d) with this runtime not modelled (PP is modelled for "
                       "torch.distributed.pipelining over FSDP2 and DeepSpeed's PipelineEngine with ZeRO 0/1)"
                       % p["pp"])
    fw = str(p.get("framework") or "")
    if not rec["cluster"].get("num_gpus"):
        reasons.append("GPU count not published")
    if not p.get("seq_len"):
        reasons.append("sequence length not published (activation memory cannot be predicted)")
    m = rec["model"]
    if nemo_preset(rec) is None and not all(
            _positive_int(m.get(k)) for k in ("num_layers", "hidden_size", "num_attention_heads",
                                              "ffn_hidden_size", "vocab_size")):
        reasons.append("architecture not published/retrieved")
    if not _positive_int(p.get("micro_batch_size_per_gpu")):
        reasons.append("micro-batch size not published")
    if runtime_of(rec) is None and not reasons:
        reasons.append("framework %r not expressible" % fw)
    if zero_of(rec) is None and not reasons:
        reasons.append("ZeRO stage / sharding strategy not published (%r)" % p.get("sharding"))
    if not reasons:
        return None, []
    return reasons[0], reasons[1:]
from published.sources import early_notes, map_ao_e2e, map_legacy_sources, map_torchtitan_dated


def map_parallel(rec, plan, notes, gpus, sharding):
    """Context, pipeline and data parallelism: plan cp, pp (schedule, DeepSpeed stage layers), shard_group and
    ZeRO-2 from SHARD_GRAD_OP; returns the data-parallel degree."""
    par = rec["parallel"]
    runtime, tp, zero = plan["runtime"], plan["tp"], plan["zero"]
    cp = par.get("cp") or 1
    if cp > 1:
        # Context parallelism (ring attention, docs/model.md "Context parallelism"): dp = gpus / (tp x cp x pp);
        # the published shard_group_size counts data-parallel ranks (FSDP then shards over them x cp).
        plan["cp"] = cp
    pp = par.get("pp") or 1
    dp = gpus // (tp * cp * pp)
    if pp > 1:
        plan["pp"] = pp
        plan["pp_schedule"] = "1f1b"
        layers = rec["model"].get("num_layers")
        if runtime == "deepspeed":
            notes.append("DeepSpeed PipelineEngine (TrainSchedule, 1F1B) over %d stages; grad_accum = its "
                         "gradient_accumulation_steps = pipeline micro-batches per step" % pp)
            if _positive_int(layers) and layers % pp == 0:
                # Megatron-DeepSpeed partition_method 'type:transformer': transformer layers balanced over the
                # stages, the embedding on the first and the head on the last on top.
                plan["pp_layers"] = ",".join([str(layers // pp)] * pp)
                notes.append("stages hold %d transformer layers each (partition_method type:transformer)"
                             % (layers // pp))
            if rec["model"].get("tied_embeddings") or "bloom" in rec["id"]:
                notes.append("tied word embeddings: DeepSpeed keeps a copy on the last stage too (TiedLayerSpec), "
                             "not modelled (the last stage's memory is understated by one embedding)")
    if zero and zero > 0:
        sg = par.get("shard_group_size") or dp
        if "HYBRID_SHARD" in sharding.upper() and _positive_int(rec["cluster"].get("gpus_per_node")):
            sg = rec["cluster"]["gpus_per_node"] // tp
        plan["shard_group"] = sg
    if "SHARD_GRAD_OP" in sharding:
        plan["zero"] = 2
    return dp


def map_fp8(rec, plan, notes, runtime):
    """Float8: plan fp8 (the recipe) and fp8_all_gather, with the note of how the run ran it."""
    recipe = fp8_recipe(rec)
    if recipe:
        plan["fp8"] = recipe
        t = fp8_text(rec)
        if ("float8 all-gather" in t or "f8 all-gather" in t or "float8_all_gather" in t) \
                and "float8_all_gather=false" not in t:
            plan["fp8_all_gather"] = True
        if runtime == "megatron":
            pass  # map_megatron's note
        elif "transformerengine" in t:
            notes.append("fp8 via TransformerEngine (delayed scaling, per-tensor scales) expressed as fp8 "
                         "'tensorwise'; TE fuses the amax into the cast, so the cast traffic is overstated")
        elif "gw_hp" in t:
            notes.append("rowwise_with_gw_hp keeps the grad-weight GEMM in bf16; expressed as 'rowwise'")
        else:
            notes.append("float8 %s (torchao Float8Linear on the blocks' linears)%s"
                         % (recipe, " with float8 FSDP2 all-gather" if plan.get("fp8_all_gather") else ""))


def convert(rec):
    reason, others = skip_reason(rec)
    if reason:
        return None, {"id": rec["id"], "reason": reason, "details": others}
    notes = []
    par = rec["parallel"]
    seq = par["seq_len"]
    model, err = map_model(rec, seq, notes)
    if err:
        return None, {"id": rec["id"], "reason": err, "details": []}
    cluster = map_cluster(rec, notes)
    if cluster is None:
        return None, {"id": rec["id"], "reason": "GPU type %r has no preset or datasheet entry"
                      % rec["cluster"]["gpu_type"], "details": []}
    gpus = rec["cluster"]["num_gpus"]
    runtime = runtime_of(rec)
    tp = par.get("tp") or 1
    zero = zero_of(rec)
    if par.get("zero_stage_equivalent") is None:
        notes.append("ZeRO stage %d read from the sharding name %r" % (zero, par.get("sharding")))
    sharding = str(par.get("sharding") or "")
    plan = {"runtime": runtime, "zero": zero, "tp": tp, "seq": seq,
            "mbs": par["micro_batch_size_per_gpu"], "grad_accum": par.get("grad_accumulation_steps") or 1}
    if par.get("grad_accumulation_steps") is None:
        notes.append("grad accumulation not published; 1 assumed")
    dp = map_parallel(rec, plan, notes, gpus, sharding)
    ac = map_ac(par.get("activation_checkpointing"))
    if ac is None:
        ac = "none"
    if par.get("activation_checkpointing") is None and runtime != "megatron":
        notes.append("activation checkpointing not published; 'none' assumed")
    plan["ac"] = ac
    if runtime in ("fsdp1", "fsdp2") and (zero or 0) > 0:
        plan["wrap"] = 1
    map_precision(rec, plan, notes)
    if runtime == "megatron":
        spec_layers = model["layers"] if isinstance(model, dict) else None
        if spec_layers is None and isinstance(model, str):
            spec_layers = load_presets().get(model, {}).get("layers")
        map_megatron(rec, plan, notes, spec_layers)
    map_fp8(rec, plan, notes, runtime)
    other_knobs = par.get("other") or {}
    if other_knobs.get("async_tp") is True:
        plan["async_tp"] = True
    plan["compile"] = bool(par.get("torch_compile"))
    src = rec["source"].get("repo")
    other = par.get("other") or {}
    early_notes(rec, notes, src, ac, other)
    map_torchtitan_dated(rec, plan, notes, cluster, src, other)
    if src == "pytorch/ao" and rec["id"].startswith("torchao-e2e-"):
        map_ao_e2e(rec, plan, notes)
    map_legacy_sources(rec, plan, notes, src, runtime, zero, tp, dp)
    if isinstance(model, str):
        notes.append("architecture matches preset %s exactly" % model)
    for inf in rec.get("inferred_fields") or []:
        if not isinstance(inf, dict):
            continue
        notes.append("inferred by the dataset: %s = %s (%s)" % (inf.get("field"), inf.get("value"),
                                                                 inf.get("reason")))
    measured = map_measured(rec, notes)
    if not measured:
        return None, {"id": rec["id"], "reason": "no measurement with a certain unit", "details": []}
    if "mfu" in measured and isinstance(cluster, dict) and cluster["name"] == "meta-h100-96g-hbm2e":
        # torchtitan divides by the H100 SXM datasheet peak; restate against this cluster's peak so that the
        # predicted and measured MFU share one denominator (exact arithmetic on the published value).
        peak = cluster["gpu"]["peak_flops"]["bf16"]
        measured["mfu"] = round(measured["mfu"] * 989.4e12 / peak, 6)
        notes.append("published MFU is against 989.4 TFLOPS (H100 SXM); restated against this cluster's %.1f "
                     "TFLOPS peak (x %.4f)" % (peak / 1e12, 989.4e12 / peak))
    out = {
        "schema": "shardplan.run/1",
        "id": rec["id"],
        "model": model,
        "cluster": cluster,
        "gpus": gpus,
        "plan": plan,
        "measured": measured,
        "source": cite(rec),
        "notes": "; ".join(notes),
        **scope_of(rec, cluster),
    }
    return out, None

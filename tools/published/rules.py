"""The version-dependent rules (tools/framework_defaults.json) and the torchtitan-specific mappings."""
import json
import os

from published import TOOLS

# --------------------------------------------------------------------------------------------------
# One record
# --------------------------------------------------------------------------------------------------
# The version-dependent defaults: ONE table, planner/frameworks.cpp, written to tools/framework_defaults.json by
# `shardplan list frameworks --json` (tests/planner/test_frameworks.cpp keeps the file equal to the binary's table).
# Each rule holds for torchtitan commit dates from `from` (inclusive) to `to` (exclusive) and carries the note the
# records state; the converter reads the dates and notes from it rather than keeping a copy.
with open(os.path.join(TOOLS, "framework_defaults.json"), encoding="utf-8") as _f:
    RULES = {r["id"]: r for r in json.load(_f)["rules"]}


def rule_holds(rule_id, date):
    """Whether the rule's value holds at this torchtitan date (an empty bound is open)."""
    r = RULES[rule_id]
    return (not r["from"] or date >= r["from"]) and (not r["to"] or date < r["to"])


def row_date(rec):
    """The run's date: source.date (published_runs_dev.json) or source.row_date (published_runs_dev2.json, the PR
    commit's date); "9999" when neither is given (no date rule applies)."""
    s = rec["source"]
    return str(s.get("date") or s.get("row_date") or "9999")


def cite(rec):
    s = rec["source"]
    parts = [s.get("repo") or s.get("name")]
    if s.get("path"):
        parts.append(s["path"])
    if s.get("section"):
        parts.append("section '%s'" % s["section"])
    if s.get("commit_read"):
        parts.append("commit %s" % s["commit_read"])
    if s.get("url"):
        parts.append(s["url"])
    if s.get("date") or s.get("row_date"):
        parts.append(s.get("date") or s.get("row_date"))
    return "; ".join(str(p) for p in parts if p)


def map_precision(rec, plan, notes):
    p = rec["precision"]
    src = rec["source"].get("repo")
    runtime = plan["runtime"]
    compute = (p.get("compute") or "").lower()
    if src == "mosaicml/llm-foundry":
        mode = p.get("fsdp_mixed_precision_mode")
        plan["precision"] = "bf16-mixed"
        plan["reduce_dtype"] = "fp32" if mode == "DEFAULT" else "bf16"
        notes.append("Composer precision %r + FSDP mixed_precision %s: fp32 sharded flat params, bf16 "
                     "param/buffer dtype, reduce_dtype %s (Composer get_mixed_precision of that period)"
                     % (p.get("published_precision"), mode, plan["reduce_dtype"]))
        return
    if runtime == "megatron":
        # NeMo megatron_amp_O2 (every launcher recipe): bf16 parameters, fp32 main parameters and Adam state in
        # the distributed optimizer, gradients synchronised in grad_sync_dtype (Apex DistributedFusedAdam:
        # default = its state dtype, fp32; nemotron_340b.yaml sets bf16): NEMO_RECIPES.
        plan["precision"] = "bf16-mixed"
        plan["reduce_dtype"] = "fp32"
        return
    if runtime == "deepspeed":
        plan["precision"] = "bf16"
        plan["reduce_dtype"] = "bf16"
        if "fp16" in compute:
            notes.append("fp16 training with fp32 master (DeepSpeed/Megatron): same bytes as bf16 -> precision "
                         "'bf16' (2+2+12 per parameter), communication in 16 bit")
        elif not compute:
            notes.append("precision not published: TITAN RTX has no bf16, DeepSpeed fp16 with fp32 master assumed "
                         "-> 'bf16' accounting (2+2+12)" if "titan" in (rec["cluster"]["gpu_type"] or "").lower()
                         else "precision not published: 16-bit with fp32 master assumed")
        return
    # torch-native (FSDP / DDP)
    if (str(p.get("param_dtype") or "").startswith("bf16") and (p.get("master_weights") or "").startswith("fp32")) \
            or "amp" in compute or "precision=16" in compute:
        plan["precision"] = "bf16-mixed"
        rd = (p.get("reduce_dtype") or "").lower()
        plan["reduce_dtype"] = "fp32" if rd.startswith("fp32") or "amp" in compute or "16" in compute else "bf16"
        if "fp16" in compute:
            notes.append("fp16 autocast (Lightning precision=16) with fp32 weights: same bytes as bf16-mixed")
        return
    plan["precision"] = "bf16-mixed"
    plan["reduce_dtype"] = "fp32"
    notes.append("precision fields incomplete; bf16-mixed assumed")


def map_torchtitan_pr(rec, plan, notes, cluster):
    """Knobs of a torchtitan PR-description row (published_runs_dev2.json) that the PR's commit and date decide:
    the allocator, the SDPA backend and the SAC save list, and the PR's own change when the tool has it."""
    d = row_date(rec)
    other = rec["parallel"].get("other") or {}
    rid = rec["id"]
    h100 = isinstance(cluster, dict) and cluster["name"] == "meta-h100-96g-hbm2e" or cluster == "dgx-h100"
    # Allocator: run_llama_train.sh (run_train.sh from 82afc842e) starts torchrun with
    # PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" from a5e57e4a9 (2024-10-22): run_llama_train.sh at
    # 2271b6386 and 5940ddeb5, run_train.sh at c14ab776c and 379cd13a5 (the dev2 commits) carry it; at 40f8fd007,
    # baad09c3b and 9dc418a8b it is absent. PR 615 (2024-10-21, the day before) sets it on its command line.
    env = str(other.get("env") or "")
    if "expandable_segments:True" in env:
        plan["allocator"] = "expandable"
        notes.append("allocator expandable: the PR's command line sets PYTORCH_CUDA_ALLOC_CONF="
                     "expandable_segments:True (%s)" % env)
    elif rule_holds("allocator_expandable", d):
        plan["allocator"] = "expandable"
        notes.append(RULES["allocator_expandable"]["note"])
    else:
        notes.append(RULES["allocator_default"]["note"])
    # SDPA backend. Before 6a3a9da95 (2025-10-09) torchtitan calls F.scaled_dot_product_attention without a
    # backend list outside context parallelism (models/llama/model.py at these commits), so torch's default
    # order decides: flash on A100; on H100 flash too, except in the torch nightlies that put cuDNN first
    # (pytorch PR 125343, reverted 2024-06-28, back for 2.5; opt-in again since pytorch PR 138522, Oct 2024).
    # PR 615's own log (2024-10-21) prints "cuDNN SDPA backward got grad_output.strides() != output.strides()":
    # it ran cuDNN attention. From 6a3a9da95 torchtitan's ScaledDotProductAttention asks for [cuDNN, flash,
    # efficient, math] with set_priority=True on every CUDA GPU (models/attention.py at 379cd13a5).
    if "pr615" in rid:
        plan["sdpa_backend"] = "cudnn"
        notes.append("sdpa_backend cudnn: the PR's log prints torch's cuDNN SDPA backward warning (the source "
                     "build of 2024-10-21 put cuDNN first on H100)")
    elif rule_holds("sdpa_cudnn_hopper", d) and h100:
        plan["sdpa_backend"] = "cudnn"
        notes.append(RULES["sdpa_cudnn_hopper"]["note"])
    else:
        plan["sdpa_backend"] = "flash"
        notes.append("sdpa_backend flash: torchtitan of this date passes no backend list and torch's default "
                     "order puts flash first on %s (cuDNN first on H100 only in the nightlies between pytorch "
                     "PR 125343's relanding and PR 138522; July 2024 nightlies followed its 2024-06-28 revert; "
                     "assumed, the PR does not print the torch version)" % ("H100" if h100 else "A100"))
    # SAC save list: mm, efficient and flash attention, reduce_scatter, max (abs for float8 at 2271b6386) at
    # every dev2 commit; the cuDNN op joined in b39377f9f (2025-12-01).
    if plan.get("ac") == "selective" and rule_holds("sac_sdpa_ops", d):
        plan["sac_sdpa_ops"] = "flash-efficient"
        notes.append(RULES["sac_sdpa_ops"]["note"])
    if "pr615" in rid:
        # train.py at 466586975: `loss = torch.compile(loss_fn)(model(input_ids), labels)` with training.compile,
        # loss_fn doing `pred.flatten(0, 1).float()`: the loss is compiled, as the plan's compile default.
        plan.pop("loss_impl", None)
        notes.append("loss_impl compiled (the compile default): the PR's train.py (466586975) wraps loss_fn, "
                     "with its .float(), in torch.compile; TORCH_NCCL_AVOID_RECORD_STREAMS=1 is the FSDP2 "
                     "default behaviour the tool models")
    if "pr382" in rid:
        # The dataset read the PR text at baad09c3b (10:52), whose logs (10:47-10:48) do not name the setup. The
        # PR's final description re-ran both variants (10:55, 11:03) and states it: "Llama3-8B on 8xH100, 1D
        # FSDP, local batch size 2, selective op AC, `compiled_rmsnorm`, `torch.compile` enabled per transformer
        # block, fused AdamW" (github.com/pytorch/torchtitan/pull/382), with the same memory to the hundredth
        # of a GiB as the earlier logs (step 1 60.27 / 61.21 GiB, then 68.09 / 69.04 GiB): the same
        # configuration. torchtitan's compile of this date wraps each block only (the loss stays eager).
        plan["compile"] = True
        plan["fused_optimizer"] = True
        plan.pop("fp32_norm", None)
        notes[:] = [n for n in notes if not n.startswith(("fp32_norm:", "fused_optimizer false:"))]
        notes.append("compile, fused_optimizer, no fp32_norm: the PR's final description states 'compiled_rmsnorm, "
                     "torch.compile enabled per transformer block, fused AdamW' for these runs (its re-run logs "
                     "repeat the 60.27/61.21 and 68.09/69.04 GiB of the logs at baad09c3b)")
    if "pr822" in rid and "always" in str(other.get("reshard_after_forward_policy") or ""):
        notes.append("reshard_after_forward_policy always: every block reshards (no keep_last_block); 'default' "
                     "keeps the last block unsharded (parallelize_llama.py at 5940ddeb5: layer_id < len(layers) "
                     "- 1)")
    if "pr355" in rid:
        notes.append("PR 355 A/B: fused vs foreach AdamW, same memory")

def map_torchtitan_root(rec, plan, notes, date):
    """torchtitan's FSDP2 wrapping of the modules outside the blocks, which its version decides (docs/model.md
    "FSDP2's root unit"). From 14d422f0c (2024-05-10; torchtrain at 83c879f18, the PR 165 commit, alike) to
    83e694105 (2025-07-28) apply_fsdp wrapped every block and then fully_shard(model, reshard_after_forward=not
    pp_enabled) (parallelisms/parallelize_llama.py at 40f8fd007, 2271b6386, 5940ddeb5; models/llama/
    parallelize_llama.py at c14ab776c): tok_embeddings, norm and output are the root's parameters, and FSDP2
    before pytorch PR 154704 (2025-06, torch 2.8) clamped the root to stay unsharded after forward
    (_fsdp_state.py _lazy_init: `post_forward_mesh_info = None`). Its "default" policy kept the last block
    unsharded too (`reshard_after_forward = int(layer_id) < len(model.layers) - 1`; "always", from PR 822,
    reshards every block). `date` is the torchtitan's date; rows from 2025-06 on are left alone (the torch they
    ran is not known to clamp the root)."""
    if plan["runtime"] != "fsdp2" or plan["zero"] < 2 or plan["tp"] != 1 or plan.get("pp", 1) != 1 \
            or not rule_holds("root_params", date):
        return
    rid = rec["id"]
    other = rec["parallel"].get("other") or {}
    if "pr615" in rid:  # the PR's own branch wraps tok_embeddings and [output, norm] (the default plan)
        notes.append("root_params none: the PR's branch (466586975) wraps tok_embeddings and [output, norm] as "
                     "units of their own, every block with reshard_after_forward=False")
        return
    if "tok_embeddings own FSDP unit" in str(other.get("variant") or ""):
        notes.append("root_params none: this variant wraps tok_embeddings and [norm, output] as units of their "
                     "own (baad09c3b)")
    else:
        plan["root_params"] = "embedding-head"
        notes.append(RULES["root_params"]["note"])
    if plan["zero"] == 3 and "always" not in str(other.get("reshard_after_forward_policy") or ""):
        plan["keep_last_block"] = True
        notes.append(RULES["keep_last_block"]["note"])

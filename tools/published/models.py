"""The published runs' models: preset names or inline specs, Megatron/NeMo mappings."""
import json
import os

from published import TOOLS
from published.plan import _positive_int, runtime_of
from published.presets import _LLAMA, ARCH_KEYS, load_presets, param_count


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------
def family_of(rec):
    src = rec["source"].get("repo", "")
    name = (rec["model"].get("name") or "").lower()
    fam = (rec["model"].get("family") or "").lower()
    if src == "mosaicml/llm-foundry":
        return "mpt-foundry"
    if "bloom" in fam or "bloom" in name:
        return "bloom"
    if "gpt-2" in fam or "gpt2" in name:
        return "gpt2"
    if "llama" in fam or "llama" in name:
        return "llama"
    return None


# NeMo's own GPT-3 and Nemotron architectures: the model presets written from NeMo-Framework-Launcher's training
# configs at 1a7171d7 (2024-07-17, the launcher of the 24.07 container; models/<name>.json cite the files).
NEMO_PRESETS = (("gpt3-5b", "gpt3-5b"), ("gpt3-20b", "gpt3-20b"), ("gpt3-175b", "gpt3-175b"),
                ("nemotron-8b", "nemotron3-8b"), ("nemotron-22b", "nemotron3-22b"),
                ("nemotron-340b", "nemotron4-340b"))


def nemo_preset(rec):
    """The preset of a NeMo GPT-3 / Nemotron row (by its id, e.g. nemo2407-pretrain-gpt3-5b-...), else None."""
    if runtime_of(rec) != "megatron":
        return None
    key = (rec["model"].get("name") or "").lower().replace("(nemo)", "").replace(" ", "")
    return dict(NEMO_PRESETS).get(key)


# What NeMo-Framework-Launcher's pretraining configs at 1a7171d7 (2024-07-17) set beyond the published table:
# ub_tp_comm_overlap (TE userbuffers: the TP all-gather / reduce-scatter split into chunks overlapped with the
# GEMMs), activations_checkpoint_granularity, optim.grad_sync_dtype. Every one of them runs
# optim.name distributed_fused_adam with overlap_grad_sync and overlap_param_sync true, sequence_parallel with
# tp > 1, and fp8 false (the table's FP8 rows set fp8 True on top of these).
NEMO_RECIPES = {
    "gpt3-5b": dict(file="gpt3/5b.yaml", tp_overlap=False),
    "gpt3-20b": dict(file="gpt3/20b.yaml", tp_overlap=True),
    "gpt3-175b": dict(file="gpt3/175b.yaml", tp_overlap=False),
    "llama2-7b": dict(file="llama/llama2_7b.yaml", tp_overlap=False),
    "llama2-13b": dict(file="llama/llama2_13b.yaml", tp_overlap=False),
    "llama2-70b": dict(file="llama/llama2_70b.yaml", tp_overlap=True),
    "llama3-8b": dict(file="llama/llama3_8b.yaml", tp_overlap=False),
    "llama3-70b": dict(file="llama/llama3_70b.yaml", tp_overlap=True),
    "nemotron-8b": dict(file="nemotron/nemotron_8b.yaml", tp_overlap=True),
    "nemotron-22b": dict(file="nemotron/nemotron_22b.yaml", tp_overlap=True),
    "nemotron-340b": dict(file="nemotron/nemotron_340b.yaml", tp_overlap=False, ac="selective",
                          grad_sync_dtype="bf16"),
}


def nemo_recipe(rec):
    """(key, recipe) of a NeMo performance row: the model key read from its id (nemo2407-<task>-<model>-g...)."""
    for key, r in NEMO_RECIPES.items():
        if "-%s-g" % key in rec["id"]:
            return key, r
    return None, None


def map_megatron(rec, plan, notes, layers):
    """Plan knobs of a NeMo / Megatron-core row (runtime megatron; docs/validation-mapping.md)."""
    par = rec["parallel"]
    pp, tp = plan.get("pp", 1), plan["tp"]
    vp = (par.get("other") or {}).get("virtual_pipeline") or 1
    notes.append("NeMo 24.07 (NeMo-Framework-Launcher recipes): optim distributed_fused_adam (Apex "
                 "DistributedFusedAdam through NeMo MegatronDistributedFusedAdam) with contiguous grad and param "
                 "buffers, overlap_grad_sync and overlap_param_sync: expressed as runtime megatron zero 1 (the "
                 "Megatron-core distributed optimizer's mechanism: bucketed reduce-scatter of the gradients at the "
                 "last micro-batch, fp32 main parameters and Adam state sharded over dp x cp, parameter all-gather "
                 "overlapped with the next forward)")
    if pp > 1:
        if vp > 1:
            plan["pp_schedule"] = "interleaved-1f1b"
            plan["virtual_stages"] = vp
        if _positive_int(layers) and layers % (pp * vp) == 0:
            # megatron/core/transformer/transformer_block.py get_num_layers_to_build: num_layers / pp / vp per
            # model chunk; the embedding on the first stage, the final norm and output layer on the last.
            plan["pp_layers"] = ",".join([str(layers // (pp * vp))] * (pp * vp))
        notes.append("Megatron-core %s over %d ranks x %d model chunks (virtual_pipeline_model_parallel_size), "
                     "%s transformer layers per chunk" % ("interleaved 1F1B" if vp > 1 else "1F1B", pp, vp,
                                                          layers // (pp * vp) if _positive_int(layers) else "?"))
    key, r = nemo_recipe(rec)
    task = str((par.get("other") or {}).get("task") or "")
    if r is not None and task == "pretrain":
        src = ("NeMo-Framework-Launcher launcher_scripts/conf/training/%s at 1a7171d7951425d080dfb183f676ce3b11e75dcb"
               % r["file"])
        if r.get("tp_overlap") and tp > 1:
            plan["async_tp"] = True
            notes.append("async_tp: ub_tp_comm_overlap true (%s; TE userbuffers overlap the sequence-parallel "
                         "all-gather / reduce-scatter with the GEMMs; the exposed share is the tool's fitted "
                         "async-TP constant, fitted on torchtitan)" % src)
        else:
            notes.append("ub_tp_comm_overlap false (%s)" % src)
        if r.get("ac"):
            plan["ac"] = r["ac"]
            notes.append("ac selective: activations_checkpoint_granularity selective (%s): Megatron recomputes "
                         "the core attention only; the tool's 'selective' is torchtitan's per-op SAC (an "
                         "approximation)" % src)
        else:
            notes.append("no activation recomputation (%s: activations_checkpoint_granularity null)" % src)
        if r.get("grad_sync_dtype"):
            plan["reduce_dtype"] = r["grad_sync_dtype"]
            notes.append("reduce_dtype %s: optim.grad_sync_dtype %s (%s)" % (r["grad_sync_dtype"],
                                                                           r["grad_sync_dtype"], src))
    else:
        notes.append("%s recipe not retrieved (NeMo's SFT configs of 24.07 were not read): no TP comm overlap, "
                     "no recomputation, fp32 gradient sync assumed" % (task or "this"))
    notes.append("fp8: Transformer Engine (DelayedScaling, HYBRID format) on the blocks' linear layers, as the tool's "
                 "'tensorwise' recipe: the same GEMMs in fp8 (qkv, proj, fc1, fc2; embedding, output layer and the "
                 "attention core in bf16), but TE fuses the amax into the cast (no separate amax pass), caches the "
                 "fp8 weights across micro-batches (is_first_microbatch) and makes the transposes in the same "
                 "kernel, so the cast traffic is overstated")


def megatron_vocab(vocab, tp):
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (128 in every NeMo recipe) x tp
    (megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding; NeMo's _vocab_size_with_padding): the
    embedding and the LM head hold, and compute, the padded rows."""
    mult = 128 * tp
    return (vocab + mult - 1) // mult * mult


def map_model(rec, seq, notes):
    m = rec["model"]
    nemo = nemo_preset(rec)
    if nemo is not None:
        mdir = os.path.join(TOOLS, "..", "models")
        with open(os.path.join(mdir, nemo + ".json"), encoding="utf-8") as f:
            spec = json.load(f)
        tp = rec["parallel"].get("tp") or 1
        v = megatron_vocab(spec["vocab"], tp)
        if v == spec["vocab"] and seq == spec["seq"]:
            notes.append("architecture: preset %s (%s)" % (nemo, spec["source"].split(";")[0]))
            return nemo, None
        notes.append("architecture: preset %s with the vocabulary %d padded to %d (128 x tp %d, Megatron's "
                     "_vocab_size_with_padding)" % (nemo, spec["vocab"], v, tp))
        spec["vocab"] = v
        spec["seq"] = seq
        spec["name"] = "%s-vpad%d" % (nemo, v)
        return spec, None
    fam = family_of(rec)
    if fam is None or not m.get("num_layers"):
        return None, "architecture not published/retrieved"
    spec = {
        "schema": "shardplan.model/1",
        "layers": m["num_layers"], "hidden": m["hidden_size"], "heads": m["num_attention_heads"],
        "kv_heads": m.get("num_kv_heads") or m["num_attention_heads"], "ffn_hidden": m["ffn_hidden_size"],
        "vocab": m["vocab_size"], "seq": seq,
    }
    if fam == "llama":
        spec.update(_LLAMA)
        if runtime_of(rec) == "megatron":
            v = megatron_vocab(spec["vocab"], rec["parallel"].get("tp") or 1)
            if v != spec["vocab"]:
                notes.append("vocabulary %d padded to %d (Megatron pads to a multiple of 128 x tp)"
                             % (spec["vocab"], v))
                spec["vocab"] = v
    elif fam == "mpt-foundry":
        # llm-foundry benchmark yamls (scripts/train/yamls/pretrain/mpt-*.yaml) leave MPTConfig defaults:
        # learned_pos_emb=True (max_seq_len x d_model table), alibi=False, no_bias=False, tied wte.
        spec.update(mlp="gelu", norm="layernorm", norm_bias=True, attn_bias=True, mlp_bias=True,
                    tied_embeddings=True, positions="learned", max_positions=seq)
    elif fam == "gpt2":
        spec.update(mlp="gelu", norm="layernorm", norm_bias=True, attn_bias=True, mlp_bias=True,
                    tied_embeddings=True, positions="learned", max_positions=1024)
    elif fam == "bloom":
        spec.update(mlp="gelu", norm="layernorm", norm_bias=True, attn_bias=True, mlp_bias=True,
                    tied_embeddings=True, positions="alibi")
        notes.append("BLOOM has an extra LayerNorm after the word embedding (2h parameters) that the model spec "
                     "cannot express; ignored (%d parameters)" % (2 * m["hidden_size"]))
    # preset?  (exact architecture match only; ties broken by the published model name)
    cands = [pname for pname, p in sorted(load_presets().items())
             if all(spec.get(k) == p.get(k) for k in ARCH_KEYS)]
    if cands:
        key = "".join((m.get("name") or "").lower().split()).replace("-", "")
        named = [c for c in cands if c.replace("-", "") in key]
        pick = named[0] if named else cands[0]
        if len(cands) > 1:
            notes.append("architecture matches presets %s; %s chosen by the published name" % (cands, pick))
        return pick, None
    n = param_count(spec)
    pub = m.get("num_params_published")
    if pub:
        if pub == n:
            notes.append("published parameter count %d equals the spec's closed-form count" % pub)
        else:
            notes.append("parameter count mismatch: published %d, spec %d (diff %d)" % (pub, n, pub - n))
    base = {"mpt-foundry": "mpt", "gpt2": "gpt2", "bloom": "bloom", "llama": "llama"}[fam]
    spec["name"] = "%s-L%d-h%d-inline" % (base, spec["layers"], spec["hidden"])
    if fam == "mpt-foundry":
        spec["name"] = "%s-foundry-s%d" % ((m.get("name") or "mpt").lower(), seq)
        spec["notes"] = ("llm-foundry benchmark MPT: learned position embedding of max_seq_len rows, biases on, "
                         "LayerNorm with bias (low_precision_layernorm), tied embeddings; NOT the released "
                         "MPT checkpoints (ALiBi, no_bias)")
    spec["source"] = m.get("notes") or ""
    return spec, None

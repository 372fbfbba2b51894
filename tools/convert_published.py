#!/usr/bin/env python3
"""Convert the shared published-runs set into shardplan run records.

    tools/convert_published.py SHARED_JSON [SHARED_JSON ...] -o tests/data/runs/published_dev.json

Input: one or more files of the `published_runs_dev.json` layout described in shared/validation/README.md
(published_runs_dev2.json has the same layout); the output holds every record of every file, in input order, and
an id that repeats across the files is an error.
Output: {"schema": "shardplan.runs/1", "records": [shardplan.run/1 ...], "skipped": [{id, reason, details}]}
(docs/formats.md for the record format, docs/validation-mapping.md for every mapping rule used here).

Python 3 standard library only; output is deterministic (input order, sorted keys).
"""

import argparse
import json
import os
import sys

GIB = 1 << 30
MIB = 1 << 20

FP8_REASON = "MX (block-scaled) fp8 compute not modelled"

# --------------------------------------------------------------------------------------------------
# Model presets the tool ships (models/*.json).  A published architecture is mapped to a preset name
# only when every field below matches; otherwise an inline spec is emitted.
# --------------------------------------------------------------------------------------------------
_LLAMA = dict(mlp="swiglu", norm="rmsnorm", positions="rotary", tied_embeddings=False,
              attn_bias=False, mlp_bias=False, norm_bias=False)
PRESETS = {
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000, **_LLAMA),
    "llama2-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=13824, vocab=32000, **_LLAMA),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, **_LLAMA),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, **_LLAMA),
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256, **_LLAMA),
    "llama3.1-405b": dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248, vocab=128256,
                          **_LLAMA),
}
ARCH_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "norm", "positions",
             "tied_embeddings", "attn_bias", "mlp_bias", "norm_bias")


_PRESET_CACHE = {}


def _arch_of(d):
    """Architecture fields of a model spec with docs/formats.md defaults filled in."""
    a = {k: d.get(k) for k in ARCH_KEYS}
    a["kv_heads"] = d.get("kv_heads", d["heads"])
    a["tied_embeddings"] = bool(d.get("tied_embeddings", False))
    a["attn_bias"] = bool(d.get("attn_bias", False))
    a["mlp_bias"] = bool(d.get("mlp_bias", False))
    a["norm_bias"] = bool(d.get("norm_bias", d.get("norm") == "layernorm"))
    if d.get("head_dim") not in (None, d["hidden"] // d["heads"]) or d.get("moe"):
        a["layers"] = None  # never matches a published dense architecture
    return a


def load_presets():
    """models/*.json of this repository when present (the presets the tool ships), else PRESETS above."""
    if "p" not in _PRESET_CACHE:
        out = {}
        mdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
        if os.path.isdir(mdir):
            for fn in sorted(os.listdir(mdir)):
                if fn.endswith(".json"):
                    try:
                        with open(os.path.join(mdir, fn), encoding="utf-8") as f:
                            d = json.load(f)
                        out[d.get("name") or fn[:-5]] = _arch_of(d)
                    except (ValueError, KeyError, TypeError):
                        continue
        if not out:
            out = {k: _arch_of(v) for k, v in PRESETS.items()}
        _PRESET_CACHE["p"] = out
    return _PRESET_CACHE["p"]


def param_count(spec):
    """Closed-form parameter count of a shardplan.model/1 spec (dense models)."""
    h, L, V = spec["hidden"], spec["layers"], spec["vocab"]
    a = spec["heads"]
    kv = spec.get("kv_heads", a)
    d = spec.get("head_dim", h // a)
    f = spec["ffn_hidden"]
    attn = h * a * d + 2 * h * kv * d + a * d * h
    if spec.get("attn_bias"):
        attn += a * d + 2 * kv * d + h
    if spec["mlp"] == "swiglu":
        mlp = 3 * h * f + ((2 * f + h) if spec.get("mlp_bias") else 0)
    else:
        mlp = 2 * h * f + ((f + h) if spec.get("mlp_bias") else 0)
    norm_w = h * (2 if spec["norm"] == "layernorm" and spec.get("norm_bias", True) else 1)
    per_layer = attn + mlp + 2 * norm_w
    total = L * per_layer + norm_w + V * h
    if not spec.get("tied_embeddings"):
        total += V * h
    if spec.get("positions") == "learned":
        total += spec["max_positions"] * h
    return total


# --------------------------------------------------------------------------------------------------
# Clusters
# --------------------------------------------------------------------------------------------------
H100_SXM_SHEET = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100): SXM5 BF16 989.4 " \
                 "TFLOPS dense (1979 with sparsity), TF32 494.7, FP32 66.9, FP8 1978.9; NVLink 900 GB/s " \
                 "bidirectional per GPU"

INLINE_CLUSTERS = {
    "meta-h100-96g-hbm2e": {
        "schema": "shardplan.cluster/1",
        "name": "meta-h100-96g-hbm2e",
        "description": "Meta H100 96GB HBM2e hosts (devgpu / Grand Teton, 8 GPUs on an NVSwitch baseboard, "
                       "500 W power limit in the torchtitan asyncTP benchmark), RDMA 400 Gb/s per GPU",
        "sources": [
            "torchtitan PR #165 description: 95.0396 GiB usable per H100 (memory_bytes below)",
            "torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: H100 SXM HBM2e 96GB, Grand Teton, "
            "500W power limit, NVLink within host, RDMA backend 400 Gb/s per GPU",
            H100_SXM_SHEET,
            "TorchTitan paper (arXiv 2410.06511), experiments section: 'The H100 GPUs used for the experiments are "
            "non-standard. They have HBM2e and are limited to a lower TDP. The actual peak TFLOPs should be between "
            "SXM and NVL, and we don't know the exact value.' -> peak_flops = midpoint of H100 NVL (835.5 TFLOPS "
            "bf16 dense, 1671 sparse; datasheet) and H100 SXM (989.4): 912.5 TFLOPS; tf32/fp8 scaled alike",
            "hbm_Bps: HBM2e, not the SXM's HBM3. H100 PCIe 80GB (5 HBM2e stacks) is 2.0 TB/s on its datasheet; 96 GB "
            "is 6 such stacks -> 6/5 x 2.0 = 2.4 TB/s (inferred: no source states this variant's bandwidth)",
        ],
        "gpu": {"model": "H100 SXM 96GB HBM2e", "memory_bytes": round(95.0396 * GIB), "arch": "hopper",
                "peak_flops": {"bf16": 912.5e12, "fp32": 61.7e12, "tf32": 456.2e12, "fp8": 1825.0e12},
                "hbm_Bps": 2.4e12},
        "node": {"gpus": 8, "nvlink_Bps": 450e9, "nvlink_domain_gpus": 8, "nvswitch": True, "nvls": True,
                 "pcie_Bps": 64e9, "nics": 8, "nic_Bps": 50e9},
        "fabric": {"latency_s": 5e-6, "nodes_per_leaf": 32, "oversubscription": 1},
    },
    "amd-mi300x-8": {
        "schema": "shardplan.cluster/1",
        "name": "amd-mi300x-8",
        "description": "8x AMD Instinct MI300X OAM platform, fully connected Infinity Fabric (no switch)",
        "sources": [
            "AMD Instinct MI300X data sheet (amd.com): 192 GB HBM3, 5.3 TB/s peak memory bandwidth, peak "
            "BF16/FP16 1307.4 TFLOPS dense, FP8 2614.9, TF32 653.7, FP32 163.4; 7 Infinity Fabric links of "
            "128 GB/s (bidirectional) each; PCIe Gen5 x16",
            "AMD Instinct MI300X platform brief: 8 GPUs fully connected, 896 GB/s aggregate bidirectional "
            "peer bandwidth per GPU -> 448 GB/s per direction (nvlink_Bps field)",
            "memory_bytes: 192 GiB (8 HBM3 stacks of 24 GiB); the data sheet writes 192 GB",
            "NICs: not part of the published run (single node); 8 x 400 Gb/s assumed",
        ],
        "gpu": {"model": "AMD Instinct MI300X", "memory_bytes": 192 * GIB, "arch": "other",
                "peak_flops": {"bf16": 1307.4e12, "fp32": 163.4e12, "tf32": 653.7e12, "fp8": 2614.9e12},
                "hbm_Bps": 5.3e12},
        "node": {"gpus": 8, "nvlink_Bps": 448e9, "nvlink_domain_gpus": 8, "nvswitch": False, "nvls": False,
                 "pcie_Bps": 64e9, "nics": 8, "nic_Bps": 50e9},
        "fabric": {"latency_s": 5e-6, "nodes_per_leaf": 16, "oversubscription": 1},
    },
    "titan-rtx-x2-pcie": {
        "schema": "shardplan.cluster/1",
        "name": "titan-rtx-x2-pcie",
        "description": "Workstation with 2x NVIDIA TITAN RTX 24GB (Turing TU102) on PCIe 3.0; no NVLink bridge "
                       "assumed (not stated in the source)",
        "sources": [
            "NVIDIA TITAN RTX specifications (nvidia.com/en-us/deep-learning-ai/products/titan-rtx): 24 GB GDDR6, "
            "672 GB/s, 130 Tensor TFLOPS (FP16), 16.3 TFLOPS FP32, PCIe 3.0 x16, optional 2-way NVLink bridge "
            "100 GB/s",
            "Turing has no BF16 or TF32 tensor cores: peak_flops.bf16 holds the FP16 tensor-core rate (the run "
            "trained in FP16 on this GPU), tf32 holds the FP32 rate",
        ],
        "gpu": {"model": "NVIDIA TITAN RTX", "memory_bytes": 24 * GIB, "arch": "other",
                "peak_flops": {"bf16": 130e12, "fp32": 16.3e12, "tf32": 16.3e12},
                "hbm_Bps": 672e9},
        "node": {"gpus": 2, "nvlink_Bps": 0, "nvlink_domain_gpus": 2, "nvswitch": False, "nvls": False,
                 "pcie_Bps": 15.75e9, "nics": 1, "nic_Bps": 1.25e9},
        "fabric": {"latency_s": 10e-6, "nodes_per_leaf": 1, "oversubscription": 1},
    },
}


def scope_of(rec, cluster):
    """Terms the tool's defaults cannot express for this record, and why (validate reports them apart)."""
    src = rec["source"].get("repo", "")
    gt = str(rec["cluster"].get("gpu_type") or "").lower()
    why = None
    if isinstance(cluster, dict) and cluster["name"] == "amd-mi300x-8":
        why = ("AMD MI300X: the default GEMM and attention efficiencies are fitted on NVIDIA generations "
               "(cuBLAS, flash-attention); ROCm kernels need a calibration profile")
    elif "power limited" in gt:
        why = "GPU power limited per the source; achieved clocks, hence peak FLOP/s, not published"
    elif src == "hpcaitech/ColossalAI-Pytorch-lightning":
        # The eager attention core is expressed (--attention eager); the rest of 2022 HF GPT-2's eager work is not.
        why = ("2022 Hugging Face GPT-2 under Lightning: the eager attention core is modelled (attention eager), "
               "the rest of its eager elementwise work is not: gelu_new is the tanh GELU written as 8 separate "
               "elementwise ops (transformers activations.py NewGELUActivation) where the model counts one fused "
               "GELU, and the residual/embedding dropout (resid_pdrop, embd_pdrop 0.1) and fp16 GradScaler passes "
               "are not counted")
    elif src == "bigscience-workshop/bigscience":
        # The materialised attention core is expressed (--attention fused-softmax); it adds 1.4-6.8 % to these steps.
        why = ("2022 Megatron-DeepSpeed: the materialised attention core (attention fused-softmax) and the TP "
               "without sequence parallelism (norms, residual adds and their saved tensors over the whole "
               "sequence on every TP rank) are modelled; what else makes this stack slower is not identified: "
               "the published 96-108 TFLOPs per A100 (chronicles-prequel 'Best TFLOPs', TP 8) is about a third "
               "of peak, below the GEMM efficiency fitted on 2023-2025 stacks; Megatron's hidden dropout "
               "(0.1, fused bias-dropout-add) is not counted")
    elif src == "NVIDIA/NeMo":
        # Expressed as runtime megatron (docs/model.md "Megatron-core runtime"). Transformer Engine's fp8 casts
        # (weights once per step, fused amax / LayerNorm / activation casts) and Megatron's TP backward overlap
        # are modelled from their source (issue 28); before them every row was predicted 6.5-38.6 % slow, now
        # -30.6 .. +7.5 % (docs/accuracy.md, "Pipeline- and tensor-parallel records").
        why = ("NeMo 24.07 on Transformer Engine: its fp8 casts and Megatron's TP backward overlap are modelled "
               "from their source, but TE's kernels are not measured here: cuDNN fused attention and the fp8 "
               "GEMMs run at the default efficiencies fitted on cuBLAS / torchao / flash-attention runs, and "
               "ub_tp_comm_overlap's userbuffers overlap is expressed as async TP's fitted exposed share; the SFT "
               "rows' packed sequences are not modelled")
    other = rec["parallel"].get("other") or {}
    if src == "pytorch/torchtitan" and "chunked" in str(other.get("loss") or ""):
        # torchtitan PR 996 (c14ab776c): the cross-entropy over chunks of the sequence, each chunk's fp32 logits
        # and log-softmax freed before the next; the plan's loss is one cross-entropy over the whole T x V logits
        # (loss_impl eager/compiled, loss_dtype) and has no chunk count.
        return {"out_of_scope": {"memory": (
            "chunked cross-entropy (torchtitan PR 996): the loss runs over sequence chunks, so its fp32 logits and "
            "log-softmax are live one chunk at a time; the tool's loss (loss_impl, loss_dtype) is one "
            "cross-entropy over the whole logits and has no chunking knob")}}
    if src == "pytorch/torchtitan" and "enable_float8_linear=true" in str(other.get("float8") or "").lower() \
            and not rec["parallel"].get("torch_compile"):
        # torchtitan PR 812 (2271b6386): the same float8 run measured 81.77 GiB reserved at 3985 tok/s eager and
        # 47.77 GiB at 7448 tok/s with per-block compile; the plan's fp8 accounting is torchao's Float8Linear as
        # compiled (the ao e2e rows all compile), and the eager path's extra saved tensors are not identified.
        return {"out_of_scope": {
            "memory": ("eager torchao float8 (no compile): Float8Linear's eager autograd keeps tensors the compiled "
                       "path does not (PR 812 measures 34 GiB more reserved than the same run compiled); the tool's "
                       "fp8 accounting is the compiled one and the eager path's saved set is not identified"),
            "throughput": ("eager torchao float8: the scale, cast and transpose kernels run unfused (PR 812: 46 % "
                           "fewer tokens/s than compiled); no efficiency of unfused float8 casts is modelled")}}
    if src == "LianjiaTech/BELLE":
        return {"out_of_scope": {"memory": (
            "configuration not pinned down: precision, optimizer, activation checkpointing, DeepSpeed config, packed "
            "length and the memory tool are not stated (user report); the published memory hardly changes with the "
            "ZeRO stage (12.0-12.9 GB for stages 1-3 over 2 ranks) or the sequence length, and grows 16-20 bytes per "
            "added parameter, which no ZeRO-1/2/3 accounting over 2 ranks produces")}}
    return {"out_of_scope": {"throughput": why}} if why else {}


def map_cluster(rec, notes):
    gt = str(rec["cluster"].get("gpu_type") or "")
    g = gt.lower()
    if "mi300x" in g:
        return INLINE_CLUSTERS["amd-mi300x-8"]
    if "titan rtx" in g:
        return INLINE_CLUSTERS["titan-rtx-x2-pcie"]
    if "h100" in g and ("96" in g or "95.0396" in g or "devgpu" in g):
        return INLINE_CLUSTERS["meta-h100-96g-hbm2e"]
    if "h100" in g:
        if "sxm" not in g or "variant not stated" in g:
            notes.append("GPU given as '%s' (SXM/PCIe variant not stated): mapped to dgx-h100 "
                         "(H100 SXM 80GB, 8 per node)" % gt)
        return "dgx-h100"
    if "gb200" in g:
        return "gb200-nvl72"
    if "b200" in g:
        if "power limited" in g:
            notes.append("B200 run was power limited (per source): achieved clocks below the dgx-b200 preset's "
                         "nominal peak")
        return "dgx-b200"
    if "h200" in g:
        return "hgx-h200"
    if "a100" in g and "80" in g:
        return "dgx-a100-80g"
    if "a100" in g and "40" in g:
        return "dgx-a100-40g"
    if "a100" in g:
        notes.append("GPU given as '%s' (memory size not stated): mapped to dgx-a100-80g (A100 SXM 80GB; the 40GB "
                     "part has the same peak FLOP/s and 22%% less HBM bandwidth)" % gt)
        return "dgx-a100-80g"
    return None


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
        mdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
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


# --------------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------------
def map_ac(txt):
    t = (txt or "").lower()
    if not t or t == "none" or t.startswith("none"):
        return "none"
    if "selective" in t or "sac" in t:
        return "selective"
    if "full" in t or "checkpoint" in t:
        return "full"
    return None


def fp8_text(rec):
    p = rec["precision"]
    texts = [str(p.get("compute") or ""), str(p.get("published_precision") or ""),
             str((rec["parallel"].get("other") or {}).get("quantization") or ""),
             str((rec["parallel"].get("other") or {}).get("float8") or "")]
    return " ".join(texts).lower()


def fp8_recipe(rec):
    """None (16-bit GEMMs), "mx" (MX block scaling: not modelled), "rowwise" or "tensorwise" (torchao recipes)."""
    t = fp8_text(rec)
    if "mxfp" in t:
        return "mx"
    if "rowwise" in t:  # torchao recipe names (rowwise, rowwise_with_gw_hp) even when the text says "bfloat16 ..."
        return "rowwise"
    if any(k in t for k in ("fp8", "float8", "tensorwise")):
        return "tensorwise"
    return None


def runtime_of(rec):
    fw = str(rec["parallel"].get("framework") or "").lower()
    sh = str(rec["parallel"].get("sharding") or "").lower()
    if "nemo" in fw or "megatron-core" in fw:
        return "megatron"
    if "deepspeed" in fw or "deepspeed" in sh:
        return "deepspeed"
    if "fsdp1" in sh or "composer" in fw:
        return "fsdp1"
    if "fsdp2" in sh or "fsdp2" in fw or "fully_shard" in sh or "fully_shard" in fw:
        return "fsdp2"
    if "fsdp" in sh or "fsdp" in fw:
        # FSDP without a version (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD are FSDP1's ShardingStrategy names)
        return "fsdp1"
    if sh == "ddp" or sh.startswith("ddp ") or "distributeddataparallel" in sh:
        return "fsdp2"
    return None


def zero_of(rec):
    """ZeRO stage: the record's zero_stage_equivalent, else read from the sharding name; None when unknowable."""
    p = rec["parallel"]
    z = p.get("zero_stage_equivalent")
    if isinstance(z, int) and not isinstance(z, bool) and 0 <= z <= 3:
        return z
    sh = str(p.get("sharding") or "").upper()
    for key, stage in (("SHARD_GRAD_OP", 2), ("FULL_SHARD", 3), ("HYBRID_SHARD", 3), ("FULLY_SHARD", 3),
                       ("HSDP", 3), ("ZERO-3", 3), ("ZERO3", 3), ("ZERO-2", 2), ("ZERO2", 2), ("ZERO-1", 1),
                       ("ZERO1", 1), ("NO_SHARD", 0), ("DDP", 0)):
        if key in sh:
            return stage
    return None


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")


def _positive_int(x):
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


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


# --------------------------------------------------------------------------------------------------
# Measured
# --------------------------------------------------------------------------------------------------
KIND_KEY = {"max_reserved": "peak_reserved_bytes", "max_active": "peak_active_bytes",
            "max_allocated": "peak_allocated_bytes", "unspecified": "peak_device_bytes"}


def map_measured(rec, notes):
    out = {}
    meas = rec["measured"]
    norm = rec.get("normalized") or {}
    src = rec["source"].get("repo")
    pm = meas.get("peak_memory")
    if isinstance(pm, dict):
        kind = str(pm.get("kind") or "")
        if _number(pm.get("bytes")):
            key = KIND_KEY.get(kind)
            if key:
                out[key] = int(pm["bytes"])
        elif src == "pytorch/ao" and "max_reserved" in kind and _number(pm.get("bytes_if_GiB")):
            # torchtitan's memory monitor logs reserved_bytes.all.peak / 2**30 ("GiB"); the ao table labels it GB.
            out["peak_reserved_bytes"] = int(pm["bytes_if_GiB"])
            notes.append("peak memory %.2f 'GB' in the ao table is torchtitan's max_reserved log, which divides "
                         "by 2**30 (GiB): peak_reserved_bytes = value x 2**30" % (pm["bytes_if_GiB"] / GIB))
        elif src == "hpcaitech/ColossalAI-Pytorch-lightning" and _number(pm.get("value")):
            # benchmark/gpt/callback.py prints torch.cuda.max_memory_allocated()/1024**2 labelled 'MB' (rank 0).
            out["peak_allocated_bytes"] = int(round(pm["value"] * MIB))
            notes.append("'Max CUDA memory allocated (MB)' is torch.cuda.max_memory_allocated()/1024**2 printed "
                         "on rank 0 by benchmark/gpt/callback.py: peak_allocated_bytes = value x 2**20")
        elif src == "LianjiaTech/BELLE" and _number(pm.get("bytes_if_GiB")) and _number(pm.get("value")):
            out["peak_device_bytes"] = int(pm["bytes_if_GiB"])
            per = meas.get("peak_memory_per_gpu_GB")
            notes.append("memory '%sGB' per GPU as written by the user (ranks: %s), tool not named; read as "
                         "nvidia-smi-like (device total incl. CUDA context and cache). nvidia-smi prints MiB, so "
                         "the one-decimal 'GB' is taken as GiB (value x 2**30, +-0.05 GiB); if it was decimal GB "
                         "the true value is 7%% lower" % (pm["value"], per))
        else:
            notes.append("published peak memory (%s %s, kind %r) left out: unit not certain"
                         % (pm.get("value"), pm.get("unit"), kind))
    # PR 165 carries active and reserved separately
    pa = meas.get("peak_memory_active")
    if isinstance(pa, dict) and _number(pa.get("bytes")):
        out["peak_active_bytes"] = int(pa["bytes"])
    pr = meas.get("peak_memory_reserved")
    if isinstance(pr, dict) and _number(pr.get("bytes")):
        out["peak_reserved_bytes"] = int(pr["bytes"])
    if pa or pr:
        notes.append("peak memory published as % of 95.0396 GiB; bytes = pct x 95.0396 GiB (+-0.005% rounding)")
    tps = norm.get("tokens_per_s_per_gpu")
    if _number(tps) and tps > 0:
        out["tokens_per_s_per_gpu"] = tps
    st = norm.get("step_time_s")
    if st is None and _number(norm.get("step_time_s_derived")):
        st = norm["step_time_s_derived"]
        notes.append("step_s derived = global batch tokens / published total tokens/s")
    if _number(st) and st > 0:
        out["step_s"] = st
    if _number(meas.get("mfu_pct")) and meas["mfu_pct"] > 0:
        out["mfu"] = round(meas["mfu_pct"] / 100.0, 6)
        tflops = meas.get("model_tflops_per_gpu")
        if fp8_recipe(rec) and _number(tflops) and tflops > 0:
            # shardplan's MFU divides by the bf16 peak; a float8 row may publish it against the fp8 peak, which
            # the ratio of its own columns shows (MosaicML: 598 TFLOP/s at 30.25 % -> 1977 TFLOP/s = H100 fp8).
            implied = tflops / (meas["mfu_pct"] / 100.0)
            if abs(implied / 1978.9 - 1) < 0.02:
                out["mfu"] = round(tflops / 989.4, 6)
                notes.append("published MFU %.2f %% is against the H100 fp8 peak (model TFLOP/s %s / MFU = %.0f "
                             "TFLOP/s); restated against the bf16 peak 989.4 TFLOP/s: %.4f"
                             % (meas["mfu_pct"], tflops, implied, out["mfu"]))
    return out


# --------------------------------------------------------------------------------------------------
# One record
# --------------------------------------------------------------------------------------------------
# The version-dependent defaults: ONE table, planner/frameworks.cpp, written to tools/framework_defaults.json by
# `shardplan list frameworks --json` (tests/planner/test_frameworks.cpp keeps the file equal to the binary's table).
# Each rule holds for torchtitan commit dates from `from` (inclusive) to `to` (exclusive) and carries the note the
# records state; the converter reads the dates and notes from it rather than keeping a copy.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "framework_defaults.json"), encoding="utf-8") as _f:
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
    other_knobs = par.get("other") or {}
    if other_knobs.get("async_tp") is True:
        plan["async_tp"] = True
    plan["compile"] = bool(par.get("torch_compile"))
    src = rec["source"].get("repo")
    other = par.get("other") or {}
    # source specific caveats
    if src == "mosaicml/llm-foundry":
        notes.append("FSDP1 via Composer: limit_all_gathers=True, backward_prefetch BACKWARD_POST (Composer "
                     "default), wrap per MPTBlock, non-reentrant checkpoint_wrapper per block when AC on; "
                     "attention %s; ~12-step runs; MFU is the README's (6N + attention FLOPs)"
                     % other.get("attn_impl", "?"))
    if src == "pytorch/torchtitan" and "asyncTP" in (rec["source"].get("path") or ""):
        if "async" in rec["id"]:
            notes.append("async TP (micro-pipelined TP collectives) on: plan async_tp (the share of the TP "
                         "collectives it leaves exposed is a fitted constant, docs/model.md)")
        notes.append("TP with sequence parallel (torchtitan); seq 8192 inferred from torchtitan configs")
    if ac == "selective":
        notes.append("selective AC as torchtitan's SAC: per-op policy saving matmul/SDPA outputs (op-level at "
                     "these commits unless noted)")
    if src == "pytorch/torchtitan" and "pr165" in rec["id"]:
        notes.append("tokens/s = midpoint of the published WPS range; 'SAC' op- vs layer-level not stated")
    if src == "pytorch/torchtitan" and rule_holds("hold_logits", row_date(rec)):
        # torchtitan's train loop of spring 2024 ran `pred = model(input_ids); loss = loss_fn(pred, labels);
        # loss.backward()` with the model returning `self.output(h).float()` (train.py and models/llama/model.py
        # at 40f8fd007, 2024-06-06); `del pred` (comment: "need to free to before bwd to avoid peaking memory")
        # came with e29b6b4d4 (2024-06-12, PR 391).
        plan["hold_logits"] = True
        notes.append(RULES["hold_logits"]["note"])
    # FSDP2's reduce-scatter input was allocated under the reduce-scatter stream, and the sharded gradients were
    # views of the reduce-scatter output, until pytorch PR 129721 ("[FSDP2] Ran reduce-scatter copy-in in
    # default stream", description and its before/after logs of 2024-06-27; _fsdp_collectives.py foreach_reduce
    # at pytorch 415cc262). A run dated before that day ran a PyTorch without it; the July 2024 runs (PRs 382,
    # 467) are taken to include it (PR 132445 of 2024-08-01 builds on its "After"). Stated on every torchtitan
    # run of such a date (FSDP1 ignores it), so runs that differ in the runtime alone still pair up.
    if src == "pytorch/torchtitan" and rule_holds("rs_input_rs_stream", row_date(rec)):
        plan["rs_input_rs_stream"] = True
        notes.append(RULES["rs_input_rs_stream"]["note"])
    # torchtitan torch.compiles the cross-entropy loss with training.compile since bbb1b616e (2025-04-02,
    # components/loss.py build_cross_entropy_loss; commit message: it reduces memory); the plan's default with
    # compile is that compiled loss (loss_impl compiled). Runs of an earlier torchtitan compiled the blocks
    # only and ran the eager fp32 loss; every run of such a torchtitan states it, with or without compile (so
    # its runs that differ in compile alone still pair up in validate's knob pairs).
    if src == "pytorch/torchtitan" and rule_holds("loss_impl", row_date(rec)):
        plan["loss_impl"] = "eager"
        notes.append(RULES["loss_impl"]["note"])
    # torchtitan's RMSNorm was a Python module computing in fp32 (`self._norm(x.float()).type_as(x) *
    # self.weight`; torchtrain/models/llama/model.py at 83c879f18, the PR 165 commit, and torchtitan/models/
    # norms.py until 3b39d7ab0, 2025-03-19, "Switch RMSNorm implementation to native PyTorch version"): eager,
    # each norm saves an fp32 copy of its input (tools/reference/saved_per_block.py). Compiled blocks save the
    # same as with nn.RMSNorm, so the knob changes nothing with compile; it is stated on every run of such a
    # torchtitan (runs that differ in compile alone still pair up).
    if src == "pytorch/torchtitan" and rule_holds("fp32_norm", row_date(rec)) \
            and "fused_rmsnorm" not in str(other.get("norm_type") or ""):
        plan["fp32_norm"] = True
        notes.append(RULES["fp32_norm"]["note"])
    elif src == "pytorch/torchtitan" and rule_holds("fp32_norm", row_date(rec)):
        notes.append("no fp32_norm: the run sets norm_type fused_rmsnorm (torchtitan's Triton fused RMSNorm, which "
                     "saves its bf16 input and the rstd, not an fp32 copy)")
    # torchtitan's AdamW was foreach (`--optimizer.fused` default False, config_manager.py at 40f8fd007 and
    # 2271b6386; `foreach=True` hard-coded in train.py at 83c879f18, the PR 165 commit) until 6e4988550
    # (2025-02-24, "use Fused AdamW as default"). A row that publishes optimizer_fused states it.
    if src == "pytorch/torchtitan":
        fused = other.get("optimizer_fused")
        if isinstance(fused, bool):
            plan["fused_optimizer"] = fused
            notes.append("fused_optimizer %s: published (optimizer.fused = %s)" % (str(fused).lower(), fused))
        elif rule_holds("fused_optimizer", row_date(rec)):
            plan["fused_optimizer"] = False
            notes.append(RULES["fused_optimizer"]["note"])
    if src == "pytorch/torchtitan" and "github_pr_description" in str(rec["source"].get("type") or ""):
        map_torchtitan_pr(rec, plan, notes, cluster)
    if src == "pytorch/torchtitan":
        map_torchtitan_root(rec, plan, notes, row_date(rec))
    if src == "pytorch/ao" and rec["id"].startswith("torchao-e2e-"):
        # The ao e2e benchmarks launch torchtitan through benchmarks/float8/training/llama3.sh, which runs
        # ${TORCHTITAN_ROOT}/run_train.sh (ao 8c81863ba, 4fc4068d6, e4e681be6); run_train.sh starts torchrun with
        # PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" (torchtitan run_train.sh line 19 at 2c8b594 and
        # 6fc499f; line 22 since the file was added in 82afc842e, 2025-02-24; the H100 rows, added 2025-03-12,
        # call run_train.sh and models/llama/train_configs, which existed together only 2025-02-24..04-07).
        # ROCm builds ignore the option before PyTorch enabled expandable segments on ROCm in 2026 (pytorch PR
        # 173330, relanded as 177974): the MI300X rows (torch 2.9.0.dev20250811+rocm6.4) keep default segments.
        versions = rec["source"].get("versions") or ""
        if "rocm" in versions:
            notes.append("allocator default: torchtitan's run_train.sh sets PYTORCH_CUDA_ALLOC_CONF="
                         "expandable_segments:True, which this ROCm build (%s) ignores (expandable segments on "
                         "ROCm: pytorch PR 173330/177974, 2026)" % versions.split(",")[0])
        else:
            plan["allocator"] = "expandable"
            notes.append("allocator expandable: llama3.sh runs torchtitan's run_train.sh, which sets "
                         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        # Every torchtitan of these rows predates b39377f9f (2025-12-01, first in v0.2.1), which added the cuDNN,
        # math and overrideable SDPA ops to the op-level SAC save list (models/llama3/infra/parallelize.py
        # _save_list at 2c8b594 and 6fc499f: mm, flash, efficient, reduce_scatter_tensor, max).
        plan["sac_sdpa_ops"] = "flash-efficient"
        if "torchtitan 2c8b594" in versions or "torchtitan 6fc499f" in versions:
            # These commits postdate bbb1b616e (2025-04-02): the loss is compiled with the model, the plan's
            # default with compile. The SDPA backend: torchtitan's ScaledDotProductAttention._init_backend
            # (models/attention.py at 2c8b594 and 6fc499f, since 3b85aa31f) runs sdpa_kernel([flash, efficient,
            # math], set_priority=True) with cuDNN put first when has_cuda_capability(10, 0).
            if "cu12" in versions:
                plan["sdpa_backend"] = "cudnn"
                notes.append("sdpa_backend cudnn, sac_sdpa_ops flash-efficient: torchtitan 6fc499f puts cuDNN "
                             "attention first on compute capability >= 10.0 (models/attention.py), and its SAC "
                             "_save_list lacks the cuDNN op (added in b39377f9f, v0.2.1): attention is "
                             "recomputed in backward")
            else:
                # ROCm: an MI300X reports capability 9.4 and ROCm builds have no cuDNN attention; torch's ROCm
                # flash backend (AOTriton) supports gfx942 (hip/flash_attn/aot/mha_all_aot.hip check_gpu_arch).
                plan["sdpa_backend"] = "flash"
                notes.append("sdpa_backend flash: torchtitan 2c8b594 asks for [flash, efficient, math] below "
                             "capability 10.0 and ROCm has no cuDNN attention; flash (AOTriton) is in the SAC "
                             "save list")
        elif plan.get("compile"):
            # The H100 rows were added 2025-03-12 (ao 8c81863ba) with torchtitan's run_train.sh and
            # models/llama/train_configs (together only 2025-02-24..04-07): a torchtitan before bbb1b616e
            # (2025-04-02), which compiled the blocks and ran the eager fp32 loss.
            plan["loss_impl"] = "eager"
            notes.append("loss_impl eager: rows added 2025-03-12 (ao 8c81863ba) ran a torchtitan before "
                         "bbb1b616e (2025-04-02), whose loss was not compiled")
            # Before 3b85aa31f (2025-05-14) torchtitan called F.scaled_dot_product_attention without a backend
            # list: torch 2.7 puts flash first (cuDNN attention opt-in since pytorch PR 138522; the default
            # only where cuDNN > 9.15, torch >= 2.11 wheels).
            plan["sdpa_backend"] = "flash"
            notes.append("sdpa_backend flash: torch 2.7's default order on H100 (cuDNN attention opt-in since "
                         "pytorch PR 138522), saved by the SAC policy")
            # ... and before 3b39d7ab0 (2025-03-19): the Python fp32 RMSNorm (no effect with compile).
            plan["fp32_norm"] = True
            notes.append("fp32_norm: rows added 2025-03-12 ran a torchtitan before 3b39d7ab0 (2025-03-19), whose "
                         "RMSNorm was the Python fp32 module")
            # ... and before 83e694105 (2025-07-28), with torch 2.7: embedding and head in the root unit.
            map_torchtitan_root(rec, plan, notes, "2025-03-12")
    if src == "bigscience-workshop/bigscience":
        notes.append("Megatron-DeepSpeed: Megatron TP%d (column/row parallel, no sequence parallel, 2022) with "
                     "DeepSpeed ZeRO-1 at dp=%d, expressed as runtime deepspeed; iteration-2 snapshot" % (tp, dp))
        # bigscience Megatron-DeepSpeed of 2022 (1cb76a64, 2022-03): ParallelAttention materialises the scores
        # (baddbmm with the ALiBi bias), FusedScaleMaskSoftmax's causal kernel, attention dropout, bmm; no
        # flash attention. Dropout: no --attention-dropout in the tr11 scripts, Megatron's default 0.1 (tr11
        # README: "The default Megatron-LM dropout settings are inherited").
        plan["attention"] = "fused-softmax"
        plan["attention_dropout"] = True
        notes.append("attention fused-softmax with dropout: 2022 Megatron-DeepSpeed ParallelAttention (bigscience "
                     "fork 1cb76a64) materialises the s x s scores (baddbmm with ALiBi), runs the fused causal "
                     "scale-mask-softmax kernel and attention dropout (Megatron default 0.1, inherited per the "
                     "tr11 README)")
    if src == "hpcaitech/ColossalAI-Pytorch-lightning":
        if zero == 0:
            notes.append("PyTorch DDP under Lightning expressed as zero 0 (plain data parallel); DDP gradient "
                         "buckets add 4 bytes/param unless gradient_as_bucket_view")
            # Lightning 1.x's LightningModule.optimizer_zero_grad calls optimizer.zero_grad(), whose default was
            # set_to_none=False before torch 2.0 (2023): the .grad tensors are zeroed in place and persist.
            plan["zero_grad_in_place"] = True
            notes.append("zero_grad_in_place: Lightning 1.x calls optimizer.zero_grad(), set_to_none=False "
                         "before torch 2.0, so DDP's gradients live across steps")
        notes.append("4x A100 40GB, form factor not stated: dgx-a100-40g preset (SXM, NVLink) assumed, 4 of 8 "
                     "GPUs; HF GPT2LMHeadModel with gradient_checkpointing")
        # benchmark/gpt/model.py builds GPT2LMHeadModel(GPT2Config(...)) (attn_pdrop default 0.1) and passes an
        # attention_mask: transformers' 2022 GPT2Attention._attn runs the scores op by op (eager).
        plan["attention"] = "eager"
        plan["attention_dropout"] = True
        notes.append("attention eager with dropout: 2022 Hugging Face GPT2Attention._attn materialises the s x s "
                     "scores op by op (matmul, scale, causal where, mask add, softmax, cast, dropout); "
                     "GPT2Config's attn_pdrop default 0.1")
        if runtime == "deepspeed":
            # DeepSpeed fp16 (Lightning precision=16 with the DeepSpeed strategy) halves the model, no autocast; the
            # 2022 GPT2LMHeadModel computes CrossEntropyLoss on its fp16 logits (no .float()).
            plan["loss_dtype"] = "bf16"
            notes.append("loss_dtype bf16: DeepSpeed fp16 without autocast, HF GPT-2 (2022) cross-entropy on fp16 "
                         "logits; 'bf16' stands for the 16-bit compute dtype")
    if src == "LianjiaTech/BELLE":
        notes.append("LOW QUALITY user report: precision, optimizer, AC and real (packed) sequence length not "
                     "stated; seq = max_len cap; throughput in batch/s not converted")
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


def convert_all(data, names=("published_runs_dev.json",)):
    records, skipped = [], []
    for rec in data["records"]:
        try:
            r, s = convert(rec)
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
            # A record whose fields do not have the documented shape: skipped with the converter's complaint, so
            # that one malformed row never stops the rest (and the reason is there to fix the converter).
            rid = rec.get("id") if isinstance(rec, dict) else None
            sys.stderr.write("convert_published: record %r skipped: %s: %s\n" % (rid, type(e).__name__, e))
            r, s = None, {"id": rid, "reason": "record not understood by the converter (%s: %s)"
                          % (type(e).__name__, e), "details": []}
        if r is not None:
            records.append(r)
        else:
            skipped.append(s)
    return {"schema": "shardplan.runs/1", "records": records, "skipped": skipped,
            "source": "converted by tools/convert_published.py from %s (rules: docs/validation-mapping.md)"
                      % " + ".join("shared/validation/" + n for n in names)}


def dumps(doc):
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def load_inputs(paths):
    """The records of every input file, in order; (data, file names). Raises ValueError on a repeated id."""
    recs, names, seen = [], [], {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        names.append(os.path.basename(path))
        for rec in data["records"]:
            rid = rec.get("id") if isinstance(rec, dict) else None
            if rid is not None and rid in seen:
                raise ValueError("%s: record id %r already in %s" % (path, rid, seen[rid]))
            if rid is not None:
                seen[rid] = path
            recs.append(rec)
    return {"records": recs}, names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shared_json", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args(argv)
    try:
        data, names = load_inputs(args.shared_json)
    except ValueError as e:
        sys.stderr.write("convert_published: %s\n" % e)
        return 2
    doc = convert_all(data, names)
    text = dumps(doc)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    sys.stderr.write("converted %d, skipped %d\n" % (len(doc["records"]), len(doc["skipped"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

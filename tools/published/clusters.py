"""The published runs' clusters: presets, inline clusters from datasheets, the record's scope."""
from published.presets import GIB


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
        "gpu": {"model": "AMD Instinct MI300X", "memory_bytes": 192 * GIB, "arch": "cdna3",
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

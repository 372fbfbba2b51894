"""The source-specific mappings of the published runs: torchtitan's dated defaults, the torchao e2e
benchmarks, and the older runs (bigscience, ColossalAI, BELLE)."""
from published.rules import RULES, map_torchtitan_pr, map_torchtitan_root, row_date, rule_holds


def early_notes(rec, notes, src, ac, other):
    """The notes on llm-foundry's FSDP1, torchtitan's async TP and selective AC, and PR 165's throughput."""
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


def map_torchtitan_dated(rec, plan, notes, cluster, src, other):
    """torchtitan's defaults by the run's date (tools/framework_defaults.json rules), its PR rows and root unit."""
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


def map_ao_e2e(rec, plan, notes):
    """The torchao e2e float8 benchmarks: torchtitan's run_train.sh allocator, SDPA backend, loss and norm."""
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


def map_legacy_sources(rec, plan, notes, src, runtime, zero, tp, dp):
    """Megatron-DeepSpeed (bigscience), ColossalAI's Lightning benchmark and BELLE's user report."""
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

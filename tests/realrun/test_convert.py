"""Tests for tools/convert_published.py (stdlib unittest only).

Run from the repo root:  python3 -m unittest discover -s tests/realrun -p 'test_*.py'
"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import convert_published as cp  # noqa: E402

# The converter's inputs, copied into the repository (tests/data/published/SOURCE.md says from where); the
# committed output converts both: tools/convert_published.py DEV DEV2 -o tests/data/runs/published_dev.json.
# DEV2: torchtitan PR descriptions (PRs 355, 382, 467, 615, 812, 822, 996, 1881).
PUBLISHED = os.path.join(ROOT, "tests", "data", "published")
SHARED = os.environ.get("SHARDPLAN_PUBLISHED_RUNS", os.path.join(PUBLISHED, "published_runs_dev.json"))
SHARED2 = os.environ.get("SHARDPLAN_PUBLISHED_RUNS2",
                         os.path.join(os.path.dirname(SHARED), "published_runs_dev2.json"))
SHARED_FILES = [SHARED, SHARED2]
COMMITTED = os.path.join(ROOT, "tests", "data", "runs", "published_dev.json")
REQUIRED = ("schema", "id", "model", "cluster", "gpus", "plan", "measured")
PLAN_KEYS = {"runtime", "zero", "shard_group", "tp", "seq", "mbs", "grad_accum", "ac", "wrap", "prefetch",
             "reshard_after_forward", "precision", "reduce_dtype", "offload", "compile", "hold_logits", "fp32_norm",
             "fused_optimizer", "rs_input_rs_stream",
             "loss_dtype", "loss_impl", "zero_grad_in_place", "allocator_gc_threshold", "fp8", "fp8_all_gather", "allocator", "async_tp", "pp", "pp_schedule", "virtual_stages", "pp_layers",
             "attention", "attention_dropout",
             "sdpa_backend", "sac_sdpa_ops", "cp", "root_params", "keep_last_block"}
MEASURED_KEYS = {"peak_allocated_bytes", "peak_active_bytes", "peak_reserved_bytes", "peak_device_bytes",
                 "step_s", "tokens_per_s_per_gpu", "mfu"}


def load_doc():
    """Convert the inputs (missing inputs are an error: the repository carries them)."""
    data, names = cp.load_inputs(SHARED_FILES)
    return cp.convert_all(data, names)


class ConvertTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.doc = load_doc()
        cls.by_id = {r["id"]: r for r in cls.doc["records"]}

    def test_deterministic_and_matches_committed(self):
        with tempfile.TemporaryDirectory() as d:
            outs = []
            for i in range(2):
                out = os.path.join(d, "o%d.json" % i)
                subprocess.check_call([sys.executable, os.path.join(ROOT, "tools", "convert_published.py"),
                                       *SHARED_FILES, "-o", out], stderr=subprocess.DEVNULL)
                with open(out, "rb") as f:
                    outs.append(f.read())
            self.assertEqual(outs[0], outs[1])
            with open(COMMITTED, "rb") as f:
                self.assertEqual(outs[0], f.read(), "tests/data/runs/published_dev.json is stale: rerun the converter")

    def test_out_of_scope_and_hold_logits(self):
        by_id = {r["id"]: r for r in self.doc["records"]}
        scoped = {i for i, r in by_id.items() if "out_of_scope" in r}
        # Exactly the records whose hardware or attention the defaults cannot express, each with a reason.
        self.assertTrue(scoped)
        for i in scoped:
            self.assertTrue(any(k in i for k in ("mi300x", "b200", "cai-lightning", "bloom-prequel", "bloom-176b", "belle-", "nemo2407-", "tt-pr")), i)
            if i.startswith("tt-pr"):
                continue  # dev2 rows: ConvertDev2Test
            term = "memory" if i.startswith("belle-") else "throughput"
            self.assertEqual(set(by_id[i]["out_of_scope"]), {term})
            self.assertGreater(len(by_id[i]["out_of_scope"][term]), 20)
        self.assertIn("torchao-e2e-mi300x-llama3-8b-g8-none_bfloat16", scoped)
        self.assertNotIn("torchao-e2e-h100-llama3-8b-g8-none_bfloat16", scoped)
        # torchtitan of March 2024 kept `pred` alive through backward; the 2025 runs do not.
        self.assertTrue(by_id["torchtitan-pr165-fsdp2-full-bs8-eager-2"]["plan"]["hold_logits"])
        self.assertNotIn("hold_logits", by_id["torchao-e2e-h100-llama3-8b-g8-none_bfloat16"]["plan"])
        # The loss is compiled with the model since torchtitan bbb1b616e (2025-04-02): runs of an earlier
        # torchtitan state the eager loss, the later ones keep the compile default.
        self.assertEqual(by_id["torchtitan-pr165-fsdp2-full-bs8-compile-4"]["plan"]["loss_impl"], "eager")
        self.assertEqual(by_id["torchao-e2e-h100-llama3-8b-g8-none_bfloat16"]["plan"]["loss_impl"], "eager")
        self.assertNotIn("loss_impl", by_id["torchao-e2e-mi300x-llama3-8b-g8-none_bfloat16"]["plan"])
        self.assertNotIn("loss_impl", by_id["torchao-e2e-b200-llama3-8b-g8-none_bfloat16"]["plan"])
        # torchtitan's Python fp32 RMSNorm until 3b39d7ab0 (2025-03-19): the PR 165 rows (eager and compiled) and
        # the ao H100 rows (a torchtitan of 2025-02-24..03-12) state it; the 2025-06 and MI300X/B200 runs do not.
        self.assertTrue(by_id["torchtitan-pr165-fsdp2-selective-bs8-eager-3"]["plan"]["fp32_norm"])
        self.assertTrue(by_id["torchtitan-pr165-fsdp2-none-bs8-compile-8"]["plan"]["fp32_norm"])
        self.assertTrue(by_id["torchao-e2e-h100-llama3-8b-g8-none_bfloat16"]["plan"]["fp32_norm"])
        self.assertNotIn("fp32_norm", by_id["torchao-e2e-b200-llama3-8b-g8-none_bfloat16"]["plan"])
        self.assertNotIn("fp32_norm", by_id["torchtitan-asynctp-202506-8b-g64-bf16-tp"]["plan"])
        # FSDP2 before pytorch PR 129721 (2024-06-27): the reduce-scatter input on the reduce-scatter stream.
        self.assertTrue(by_id["torchtitan-pr165-fsdp2-selective-bs8-eager-3"]["plan"]["rs_input_rs_stream"])
        self.assertTrue(by_id["tt-pr355-l3-8b-g8-a100-fsdp-adamw-fused"]["plan"]["rs_input_rs_stream"])
        self.assertTrue(by_id["torchtitan-pr165-fsdp1-full-bs8-eager-0"]["plan"]["rs_input_rs_stream"])
        self.assertNotIn("rs_input_rs_stream", by_id["tt-pr382-l3-8b-g8-h100-fsdp-bs2-sac-baseline"]["plan"])

    def test_every_record_complete(self):
        self.assertEqual(self.doc["schema"], "shardplan.runs/1")
        ids = set()
        for r in self.doc["records"]:
            for k in REQUIRED:
                self.assertIn(k, r, r.get("id"))
            self.assertEqual(r["schema"], "shardplan.run/1")
            self.assertNotIn(r["id"], ids)
            ids.add(r["id"])
            self.assertTrue(set(r["plan"]) <= PLAN_KEYS, set(r["plan"]) - PLAN_KEYS)
            self.assertTrue(r["measured"])
            self.assertTrue(set(r["measured"]) <= MEASURED_KEYS)
            for k, v in r["measured"].items():
                if k.endswith("_bytes"):
                    self.assertIsInstance(v, int)
            self.assertIsInstance(r["gpus"], int)
            self.assertEqual(r["gpus"] % (r["plan"]["tp"] * r["plan"].get("shard_group", 1)), 0)
            self.assertIn(r["plan"]["precision"], ("bf16-mixed", "bf16", "bf16-true", "fp32"))
            self.assertIn(r["plan"]["ac"], ("none", "selective", "full"))
            self.assertTrue(r["source"])
            if isinstance(r["model"], dict):
                self.assertEqual(r["model"]["schema"], "shardplan.model/1")
            if isinstance(r["cluster"], dict):
                self.assertEqual(r["cluster"]["schema"], "shardplan.cluster/1")
                self.assertTrue(r["cluster"]["sources"])
        for s in self.doc["skipped"]:
            self.assertNotIn(s["id"], ids)
            self.assertTrue(s["reason"])

    def test_counts_per_source(self):
        conv = collections.Counter(r["source"].split(";")[0] for r in self.doc["records"])
        self.assertEqual(dict(conv), {
            "mosaicml/llm-foundry": 108, "pytorch/torchtitan": 21 + 16, "LianjiaTech/BELLE": 9, "pytorch/ao": 10,
            "hpcaitech/ColossalAI-Pytorch-lightning": 2, "bigscience-workshop/bigscience": 13, "NVIDIA/NeMo": 15})
        self.assertEqual(len(self.doc["records"]) + len(self.doc["skipped"]), 196 + 16)
        reasons = collections.Counter(s["reason"] for s in self.doc["skipped"])
        self.assertEqual(reasons[cp.FP8_REASON], 2)  # ao mxfp8 on B200 (float8 rows convert; NeMo/OLMo skip for others)
        self.assertEqual(reasons["GPU count not published"], 10)

    def test_dev2_knobs(self):
        """published_runs_dev2.json: each row's knobs from its PR commit and date (docs/validation-mapping.md)."""
        b = self.by_id
        # PR 355 (2024-06-06, 40f8fd007): the A/B of fused vs foreach AdamW; before `del pred` (e29b6b4d4,
        # 2024-06-12) and the native RMSNorm (3b39d7ab0, 2025-03-19); no expandable segments yet.
        self.assertFalse(b["tt-pr355-l3-8b-g8-a100-fsdp-adamw-unfused"]["plan"]["fused_optimizer"])
        p = b["tt-pr355-l3-8b-g8-a100-fsdp-adamw-fused"]["plan"]
        self.assertTrue(p["fused_optimizer"])
        self.assertTrue(p["hold_logits"])
        self.assertTrue(p["fp32_norm"])
        self.assertNotIn("allocator", p)
        self.assertEqual((p["sdpa_backend"], p["sac_sdpa_ops"]), ("flash", "flash-efficient"))
        # PR 382 (2024-07-11): `del pred` present; its final description states compile per block,
        # compiled_rmsnorm and fused AdamW for both variants (the dataset read an earlier revision without it).
        for rid in ("tt-pr382-l3-8b-g8-h100-fsdp-bs2-sac-baseline", "tt-pr382-l3-8b-g8-h100-fsdp-bs2-sac-embwrap"):
            p = b[rid]["plan"]
            self.assertNotIn("hold_logits", p)
            self.assertTrue(p["compile"])
            self.assertTrue(p["fused_optimizer"])
            self.assertNotIn("fp32_norm", p)
            self.assertEqual(p["loss_impl"], "eager")  # torchtitan of that date compiles the blocks only
            self.assertNotIn("fp32_norm: torchtitan of this date", b[rid]["notes"])
            self.assertNotIn("fused_optimizer false", b[rid]["notes"])
        # PR 467 (2024-07-18) states no compile: eager, foreach AdamW (fused default from 6e4988550, 2025-02-24).
        p = b["tt-pr467-l3-8b-g8-h100-fsdp-bs1-noac"]["plan"]
        self.assertFalse(p["compile"])
        self.assertFalse(p["fused_optimizer"])
        self.assertNotIn("out_of_scope", b["tt-pr382-l3-8b-g8-h100-fsdp-bs2-sac-baseline"])
        # Its variant (tok_embeddings and [norm, output] as units of their own) is torchtitan 0.3.0's wrapping:
        # in scope since root_params / keep_last_block (docs/model.md "FSDP2's root unit").
        self.assertNotIn("out_of_scope", b["tt-pr382-l3-8b-g8-h100-fsdp-bs2-sac-embwrap"])
        # PR 615 (2024-10-21): expandable segments and cuDNN attention from its own command line and log, the
        # compiled loss of its train.py, fused_rmsnorm (no fp32 norm), fused AdamW.
        p = b["tt-pr615-l3-8b-g8-h100-fsdp-noreshard-noac-compile"]["plan"]
        self.assertEqual((p["allocator"], p["sdpa_backend"], p["zero"]), ("expandable", "cudnn", 2))
        self.assertNotIn("loss_impl", p)
        self.assertNotIn("fp32_norm", p)
        self.assertTrue(p["fused_optimizer"])
        # PR 812 (2025-01-31): float8 tensorwise without float8 all-gather; eager float8 out of scope.
        p = b["tt-pr812-l3-8b-g8-h100-fsdp-float8-tensorwise-compile"]["plan"]
        self.assertEqual((p["fp8"], p["allocator"], p["loss_impl"]), ("tensorwise", "expandable", "eager"))
        self.assertNotIn("fp8_all_gather", p)
        self.assertNotIn("out_of_scope", b["tt-pr812-l3-8b-g8-h100-fsdp-float8-tensorwise-compile"])
        self.assertEqual(set(b["tt-pr812-l3-8b-g8-h100-fsdp-float8-tensorwise-eager"]["out_of_scope"]),
                         {"memory", "throughput"})
        # PR 996 (2025-03-24): native RMSNorm, fused AdamW default; chunked cross-entropy out of scope.
        p = b["tt-pr996-l3-8b-g8-h100-fsdp-bs1-baseline"]["plan"]
        self.assertNotIn("fp32_norm", p)
        self.assertNotIn("fused_optimizer", p)
        self.assertEqual(set(b["tt-pr996-l3-8b-g8-h100-fsdp-bs1-chunkedce"]["out_of_scope"]), {"memory"})
        # PR 1881 (2025-11-15): torchtitan puts cuDNN first (6a3a9da95) and its SAC list lacks it (b39377f9f).
        p = b["tt-pr1881-l3-8b-g8-fsdp8-fsdp2-eager-bs1"]["plan"]
        self.assertEqual((p["sdpa_backend"], p["sac_sdpa_ops"]), ("cudnn", "flash-efficient"))

    def test_torchtitan_root_unit(self):
        """torchtitan before 83e694105 (2025-07-28) with a torch before pytorch PR 154704 (2025-06): the root
        fully_shard(model) keeps the embedding and head, and the default policy keeps the last block
        (docs/model.md "FSDP2's root unit")."""
        b = self.by_id
        for rid in ("torchao-e2e-h100-llama3-8b-g8-none_bfloat16", "tt-pr822-l3-8b-g8-h100-fsdp-bs1-reshard-default",
                    "tt-pr996-l3-8b-g8-h100-fsdp-bs1-baseline", "torchtitan-pr165-fsdp2-selective-bs8-eager-3"):
            p = b[rid]["plan"]
            self.assertEqual((p.get("root_params"), p.get("keep_last_block")), ("embedding-head", True), rid)
        # "always" reshards every block; "never" is ZeRO-2 (every block kept anyway).
        for rid in ("tt-pr822-l3-8b-g8-h100-fsdp-bs1-reshard-always", "tt-pr822-l3-8b-g8-h100-fsdp-bs1-reshard-never"):
            p = b[rid]["plan"]
            self.assertEqual((p.get("root_params"), p.get("keep_last_block")), ("embedding-head", None), rid)
        # PR 615's branch and PR 382's variant wrap tok_embeddings and [norm, output] as units; later torchtitans
        # (PR 1881, the B200 and MI300X ao rows) too; FSDP1 rows and TP rows are left alone.
        self.assertNotIn("root_params", b["tt-pr615-l3-8b-g8-h100-fsdp-noreshard-noac-compile"]["plan"])
        p = b["tt-pr382-l3-8b-g8-h100-fsdp-bs2-sac-embwrap"]["plan"]
        self.assertEqual((p.get("root_params"), p.get("keep_last_block")), (None, True))
        for rid in ("tt-pr1881-l3-8b-g8-fsdp8-fsdp2-eager-bs1", "torchao-e2e-b200-llama3-8b-g8-none_bfloat16",
                    "torchao-e2e-mi300x-llama3-8b-g8-none_bfloat16", "torchtitan-pr165-fsdp1-full-bs8-eager-0",
                    "torchtitan-asynctp-202506-8b-g64-bf16-tp"):
            self.assertNotIn("root_params", b[rid]["plan"], rid)
            self.assertNotIn("keep_last_block", b[rid]["plan"], rid)

    def test_repeated_id_across_files_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for n in ("a.json", "b.json"):
                paths.append(os.path.join(d, n))
                with open(paths[-1], "w", encoding="utf-8") as f:
                    json.dump({"records": [{"id": "same"}]}, f)
            rc = subprocess.call([sys.executable, os.path.join(ROOT, "tools", "convert_published.py"), *paths,
                                  "-o", os.path.join(d, "o.json")], stderr=subprocess.DEVNULL)
            self.assertEqual(rc, 2)
            self.assertFalse(os.path.exists(os.path.join(d, "o.json")))

    def test_spot_mosaic_mpt70b(self):
        r = self.by_id["mosaic-a100-80gb-mpt70b-s2048-g64-mbs8-ga4-bf16-ac1"]
        self.assertEqual(r["cluster"], "dgx-a100-80g")
        self.assertEqual(r["gpus"], 64)
        self.assertEqual(r["plan"], {"runtime": "fsdp1", "zero": 3, "shard_group": 64, "tp": 1, "seq": 2048,
                                     "mbs": 8, "grad_accum": 4, "ac": "full", "wrap": 1,
                                     "precision": "bf16-mixed", "reduce_dtype": "bf16", "compile": False})
        self.assertEqual(r["measured"], {"tokens_per_s_per_gpu": 410, "step_s": 159.6371, "mfu": 0.5333})
        m = r["model"]
        self.assertEqual((m["layers"], m["hidden"], m["heads"], m["ffn_hidden"], m["vocab"]),
                         (80, 8192, 64, 32768, 50368))
        self.assertEqual((m["positions"], m["max_positions"], m["tied_embeddings"]), ("learned", 2048, True))
        # MosaicML's NumParams includes the seq-len x d_model learned position table
        self.assertEqual(cp.param_count(m), 64862437376)

    def test_spot_torchtitan_pr165(self):
        r = self.by_id["torchtitan-pr165-fsdp2-selective-bs8-eager-3"]
        self.assertEqual(r["model"], "llama2-7b")
        self.assertEqual(r["cluster"]["name"], "meta-h100-96g-hbm2e")
        self.assertEqual(r["plan"]["runtime"], "fsdp2")
        self.assertEqual(r["plan"]["ac"], "selective")
        self.assertEqual(r["plan"]["precision"], "bf16-mixed")
        self.assertEqual(r["plan"]["reduce_dtype"], "fp32")
        self.assertEqual(r["measured"]["peak_reserved_bytes"], 63789928022)
        self.assertEqual(r["measured"]["peak_active_bytes"], 53197464928)
        self.assertEqual(r["measured"]["tokens_per_s_per_gpu"], 6700.0)

    def test_spot_colossal_ddp(self):
        r = self.by_id["cai-lightning-gpt2xl-g4-ddp"]
        self.assertEqual(r["plan"]["zero"], 0)
        self.assertNotIn("shard_group", r["plan"])
        self.assertEqual(r["measured"]["peak_allocated_bytes"], round(37905.422 * 2 ** 20))
        self.assertEqual(r["model"], "gpt2-xl")
        gpt2xl = dict(layers=48, hidden=1600, heads=25, ffn_hidden=6400, vocab=50257, mlp="gelu", norm="layernorm",
                      attn_bias=True, mlp_bias=True, tied_embeddings=True, positions="learned", max_positions=1024)
        self.assertEqual(cp.param_count(gpt2xl), 1557611200)  # HF GPT2LMHeadModel gpt2-xl

    def test_nemo_megatron(self):
        # Llama 2 70B, 64 GPUs, tp 4 x pp 4 (virtual 20) x dp 4: interleaved 1F1B over 80 chunks of one layer; the
        # vocabulary 32000 padded to a multiple of 128 x 4 = 512 -> 32256 (inline spec); ub_tp_comm_overlap.
        r = self.by_id["nemo2407-pretrain-llama2-70b-g64-tp4-pp4-cp1-gbs128"]
        p = r["plan"]
        self.assertEqual((p["runtime"], p["zero"], p["tp"], p["pp"], p["pp_schedule"], p["virtual_stages"]),
                         ("megatron", 1, 4, 4, "interleaved-1f1b", 20))
        self.assertEqual(p["pp_layers"], ",".join(["1"] * 80))
        self.assertEqual((p["precision"], p["reduce_dtype"], p["fp8"], p["async_tp"], p["ac"]),
                         ("bf16-mixed", "fp32", "tensorwise", True, "none"))
        self.assertEqual(r["model"]["vocab"], 32256)
        # Nemotron-4 340B: its preset, selective recompute and bf16 gradient sync from the launcher recipe.
        n = self.by_id["nemo2407-pretrain-nemotron-340b-g128-tp8-pp8-cp1-gbs32"]
        self.assertEqual(n["model"], "nemotron4-340b")  # 256000 is a multiple of 128 x 8
        self.assertEqual((n["plan"]["ac"], n["plan"]["reduce_dtype"]), ("selective", "bf16"))
        # GPT-3 5B at tp 1: the preset with 50257 padded to 50304; Llama 3 8B with cp 2 (no PP).
        g = self.by_id["nemo2407-pretrain-gpt3-5b-g64-tp1-pp1-cp1-gbs2048"]
        self.assertEqual((g["model"]["name"], g["model"]["vocab"]), ("gpt3-5b-vpad50304", 50304))
        c = self.by_id["nemo2407-pretrain-llama3-8b-g8-tp1-pp1-cp2-gbs128"]
        self.assertEqual((c["model"], c["plan"]["cp"], c["plan"]["shard_group"]), ("llama3-8b", 2, 4))
        self.assertNotIn("pp", c["plan"])

    def test_fp8_recipes(self):
        skipped = {s["id"]: s["reason"] for s in self.doc["skipped"]}
        self.assertEqual(skipped["torchao-e2e-b200-llama3-8b-g8-mxfp8_cublas"], cp.FP8_REASON)
        # Pipeline parallelism: Megatron-DeepSpeed (PipelineEngine, ZeRO-1) converts; NeMo converts as runtime
        # megatron (test_nemo_megatron).
        bloom = self.by_id["bloom-176b-production-g384-dp8-tp4-pp12-mbs2"]
        self.assertEqual((bloom["plan"]["runtime"], bloom["plan"]["zero"], bloom["plan"]["pp"]), ("deepspeed", 1, 12))
        self.assertEqual(bloom["plan"]["grad_accum"], 128)  # pipeline micro-batches per step
        te = self.by_id["mosaic-h100-fp8-mpt3b-s512-g8-mbs40-ga6-amp_fp8-ac0"]
        self.assertEqual(te["plan"]["fp8"], "tensorwise")
        self.assertNotIn("fp8_all_gather", te["plan"])
        self.assertIn("TransformerEngine", te["notes"])
        # MosaicML's fp8 MFU is against the fp8 peak (598 TFLOP/s at 30.25 %): restated against bf16's 989.4.
        self.assertEqual(te["measured"]["mfu"], round(598 / 989.4, 6))
        ao = self.by_id["torchao-e2e-h100-llama3-8b-g8-tensorwise_with_float8_all_gather"]
        self.assertEqual((ao["plan"]["fp8"], ao["plan"]["fp8_all_gather"]), ("tensorwise", True))
        rw = self.by_id["torchao-e2e-h100-llama3-8b-g8-rowwise_with_bfloat16_all_gather"]
        self.assertEqual(rw["plan"]["fp8"], "rowwise")
        self.assertNotIn("fp8_all_gather", rw["plan"])
        tt = self.by_id["torchtitan-asynctp-202506-70b-g256-float8_rowwise-asynctp"]
        self.assertEqual((tt["plan"]["fp8"], tt["plan"]["async_tp"]), ("rowwise", True))
        self.assertNotIn("async_tp", self.by_id["torchtitan-asynctp-202506-70b-g256-bf16-tp"]["plan"])
        self.assertNotIn("fp8", self.by_id["torchao-e2e-h100-llama3-8b-g8-none_bfloat16"]["plan"])

def _base_record():
    """A complete torch-native record in the shared layout (torchtitan Llama-3-8B, FSDP2, 8 H100)."""
    return {
        "id": "synthetic-llama3-8b", "source": {"repo": "example/repo", "name": "synthetic"},
        "model": {"name": "Llama-3-8B", "family": "llama", "num_layers": 32, "hidden_size": 4096,
                  "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 128256},
        "precision": {"compute": "bf16", "param_dtype": "bf16", "master_weights": "fp32", "reduce_dtype": "fp32"},
        "optimizer": {"name": "adamw"},
        "cluster": {"gpu_type": "H100-SXM-80GB", "gpus_per_node": 8, "num_nodes": 1, "num_gpus": 8},
        "parallel": {"framework": "torchtitan", "sharding": "FSDP2 fully_shard", "zero_stage_equivalent": 3,
                     "tp": 1, "pp": 1, "cp": 1, "activation_checkpointing": "full", "micro_batch_size_per_gpu": 1,
                     "grad_accumulation_steps": 1, "seq_len": 8192, "torch_compile": False},
        "measured": {"peak_memory": None, "mfu_pct": None},
        "normalized": {"tokens_per_s_per_gpu": 5000},
    }


class ConvertUnseenRecordsTest(unittest.TestCase):
    """Records unlike the development set: nulls, other spellings, other GPUs, malformed fields."""

    def convert_one(self, rec):
        doc = cp.convert_all({"records": [rec]})
        self.assertEqual(len(doc["records"]) + len(doc["skipped"]), 1)
        return (doc["records"] or [None])[0], (doc["skipped"] or [None])[0]

    def test_base_converts(self):
        r, s = self.convert_one(_base_record())
        self.assertIsNone(s)
        self.assertEqual(r["model"], "llama3-8b")
        self.assertEqual(r["cluster"], "dgx-h100")
        self.assertEqual(r["plan"]["runtime"], "fsdp2")
        self.assertEqual(r["plan"]["zero"], 3)

    def test_null_architecture_field_is_skipped_with_reason(self):
        for field in ("ffn_hidden_size", "vocab_size", "num_attention_heads", "hidden_size"):
            rec = _base_record()
            rec["model"][field] = None
            r, s = self.convert_one(rec)
            self.assertIsNone(r, field)
            self.assertEqual(s["reason"], "architecture not published/retrieved", field)

    def test_null_micro_batch_is_skipped_with_reason(self):
        rec = _base_record()
        rec["parallel"]["micro_batch_size_per_gpu"] = None
        _, s = self.convert_one(rec)
        self.assertEqual(s["reason"], "micro-batch size not published")

    def test_other_gpus_map_to_presets(self):
        for gpu, cluster in (("H200-SXM-141GB", "hgx-h200"), ("GB200 NVL72", "gb200-nvl72"), ("A100", "dgx-a100-80g"),
                             ("A100-SXM4-40GB", "dgx-a100-40g")):
            rec = _base_record()
            rec["cluster"]["gpu_type"] = gpu
            r, s = self.convert_one(rec)
            self.assertIsNone(s, gpu)
            self.assertEqual(r["cluster"], cluster, gpu)
        rec = _base_record()
        rec["cluster"]["gpu_type"] = "V100-32GB"
        _, s = self.convert_one(rec)
        self.assertIn("has no preset", s["reason"])

    def test_zero_stage_and_runtime_from_sharding_names(self):
        for fw, sharding, runtime, zero in (("PyTorch FSDP", "SHARD_GRAD_OP", "fsdp1", 2),
                                            ("PyTorch FSDP", "FULL_SHARD", "fsdp1", 3),
                                            ("custom", "fully_shard", "fsdp2", 3),
                                            ("DeepSpeed", "ZeRO-2", "deepspeed", 2),
                                            ("PyTorch", "DDP", "fsdp2", 0)):
            rec = _base_record()
            rec["parallel"].update(framework=fw, sharding=sharding, zero_stage_equivalent=None)
            r, s = self.convert_one(rec)
            self.assertIsNone(s, sharding)
            self.assertEqual((r["plan"]["runtime"], r["plan"]["zero"]), (runtime, zero), sharding)
        rec = _base_record()
        rec["parallel"].update(framework="PyTorch FSDP", sharding=None, zero_stage_equivalent=None)
        _, s = self.convert_one(rec)
        self.assertIn("ZeRO stage", s["reason"])

    def test_malformed_record_is_skipped_not_fatal(self):
        bad = _base_record()
        bad["precision"] = None  # not an object: the converter cannot read it
        doc = cp.convert_all({"records": [bad, _base_record()]})
        self.assertEqual(len(doc["records"]), 1)
        self.assertIn("record not understood by the converter", doc["skipped"][0]["reason"])
        self.assertEqual(doc["skipped"][0]["id"], "synthetic-llama3-8b")

    def test_measurement_with_null_value_is_left_out(self):
        rec = _base_record()
        rec["measured"]["peak_memory"] = {"kind": "max_reserved", "value": None, "unit": "GiB", "bytes": None}
        r, s = self.convert_one(rec)
        self.assertIsNone(s)
        self.assertNotIn("peak_reserved_bytes", r["measured"])
        self.assertEqual(r["measured"]["tokens_per_s_per_gpu"], 5000)


if __name__ == "__main__":
    unittest.main()

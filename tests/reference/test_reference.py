"""End-to-end tests of the reference lane (tools/reference/run.py): a tiny Llama-style spec, 8 fake ranks.

Needs the project's Python environment: run with the python that `bash tools/pyenv.sh` prints, from the repo root:
  $(bash tools/pyenv.sh) -m unittest discover -s tests/reference -p 'test_*.py'
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from lane_env import ROOT, SHARDPLAN

RUN = os.path.join(ROOT, "tools", "reference", "run.py")
SCHEMA = os.path.join(ROOT, "docs", "schema", "run.schema.json")

# 2 blocks, hidden 64, 4 heads of 16 (2 KV heads), SwiGLU 128, vocab 256: every dim 0 divides by 8 ranks.
TINY = {"schema": "shardplan.model/1", "name": "tiny", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
        "ffn_hidden": 128, "vocab": 256, "seq": 32}
# 64*256 (embedding) + 2 * (64*64 wq + 2*64*32 wk,wv + 64*64 wo + 3*64*128 ffn + 2*64 norms) + 64 + 256*64 output
TINY_PARAMS = 106816

# Persistent state of rank 0 of 8. FSDP2 shards each parameter on dim 0 (numel / 8) and keeps it as its own
# allocation; the CUDA caching allocator rounds each request up to a multiple of 512 B (kMinBlockSize).
# fp32 shards (bf16-mixed):  embedding 16384/8*4 = 8192; output 8192; final norm 64/8*4 = 32 -> 512;
#   per block: 2 norms 2*512, wq 4096/8*4 = 2048, wk 2048/8*4 = 1024, wv 1024, wo 2048, w1,w2,w3 3*4096
#   = 19456; total 8192 + 8192 + 512 + 2*19456 = 55808.
PARAMS_FP32 = 55808
# AdamW: exp_avg and exp_avg_sq like each shard (2 * 55808) + one 'step' scalar tensor per parameter
# (21 parameters, 4 B each -> 512 B each): 111616 + 21*512 = 122368.
OPT_FP32 = 122368
# bf16 shards (bf16-true): embedding 4096, output 4096, norm 16 -> 512; per block 2*512 + 1024 + 512 + 512 +
#   1024 + 3*2048 = 10240; total 4096 + 4096 + 512 + 2*10240 = 29184. AdamW states in bf16: 2*29184 + 21*512.
PARAMS_BF16 = 29184
OPT_BF16 = 2 * 29184 + 21 * 512
# Gradients: FSDP2's reduce-scatter output is one flat buffer per FSDP unit, and the sharded gradients are views
# of it. fp32 (reduce fp32): a block's shard is 2*8 + 512 + 256 + 256 + 512 + 3*1024 = 4624 elements = 18496 B
# -> 18944; the root (embedding 2048 + norm 8 + output 2048 = 4104 elements = 16416 B) -> 16896.
GRADS_FP32 = 2 * 18944 + 16896


def run_ref(tmp, *flags, trace=True, model=TINY):
    spec = os.path.join(tmp, "tiny.json")
    with open(spec, "w") as f:
        json.dump(model, f)
    rec, tr = os.path.join(tmp, "rec.json"), os.path.join(tmp, "trace.json")
    cmd = [sys.executable, RUN, "--model", spec, "--gpus", "8", "-o", rec] + (["--trace", tr] if trace else [])
    p = subprocess.run(cmd + list(flags), capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"run.py {' '.join(flags)} failed ({p.returncode}): {p.stderr[-2000:]}")
    with open(rec) as f:
        record = json.load(f)
    trace_doc = None
    if trace:
        with open(tr) as f:
            trace_doc = json.load(f)
    return record, trace_doc


def max_live(trace, category):
    live = peak = 0
    for e in trace["events"]:
        if e["category"] == category:
            live += e["bytes"] if e["op"] == "alloc" else -e["bytes"]
            peak = max(peak, live)
    return peak


def live_before(trace, phase_prefix):
    """Live bytes per category just before the first event whose phase starts with phase_prefix."""
    live = {}
    for e in trace["events"]:
        if e["phase"].startswith(phase_prefix):
            break
        live[e["category"]] = live.get(e["category"], 0) + (e["bytes"] if e["op"] == "alloc" else -e["bytes"])
    return live


class ReferenceLaneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def get(self, *flags):
        if flags not in self.runs:
            d = os.path.join(self.tmp.name, str(len(self.runs)))
            os.makedirs(d)
            self.runs[flags] = run_ref(d, *flags)
        return self.runs[flags]

    def check_schema(self, record):
        import jsonschema  # in the pinned environment (tools/pyenv-requirements.txt)

        with open(SCHEMA) as f:
            jsonschema.validate(record, json.load(f))

    def test_zero3_persistent_state_is_exact(self):
        record, trace = self.get()
        self.assertEqual(trace["parameters"], TINY_PARAMS)
        self.assertEqual(trace["persistent_at_end"], {"params": PARAMS_FP32, "grads": 0, "optimizer": OPT_FP32})
        self.assertEqual(max_live(trace, "grads"), GRADS_FP32)
        self.assertEqual(max_live(trace, "optimizer"), OPT_FP32)
        # Second step: the optimizer states are live through forward and backward.
        self.assertEqual(live_before(trace, "backward layers.1, step 1")["optimizer"], OPT_FP32)
        self.assertEqual(record["measured"]["peak_allocated_bytes"], trace["peak_allocated_bytes"])
        self.assertEqual(sum(trace["breakdown_at_peak"].values()), trace["peak_allocated_bytes"])
        self.assertTrue(record["source"].startswith("pytorch reference, fake process group, torch "))
        self.check_schema(record)

    def test_every_allocation_is_freed_or_persistent(self):
        _, trace = self.get()
        live = {}
        for e in trace["events"]:
            self.assertEqual(e["bytes"] % 512, 0)
            live[e["category"]] = live.get(e["category"], 0) + (e["bytes"] if e["op"] == "alloc" else -e["bytes"])
            self.assertGreaterEqual(live[e["category"]], 0, e)
        # After the last step only the shards, the optimizer states and the freqs_cis buffer (32 x 8 complex64 =
        # 2048 B, torchtitan's non-persistent rotary table) remain.
        self.assertEqual({k: v for k, v in live.items() if v},
                         {"params": PARAMS_FP32, "optimizer": OPT_FP32, "other": 2048})

    def test_zero2_keeps_gathered_params_until_backward(self):
        record, trace = self.get("--zero", "2")
        self.assertEqual(trace["persistent_at_end"]["params"], PARAMS_FP32)
        self.assertFalse(record["plan"]["reshard_after_forward"])
        # Before backward of step 1, every unit's bf16 unsharded parameters are live with ZeRO-2 (106816 * 2 B
        # plus 512 B rounding per tensor at most), only the root's and the last block's with ZeRO-3.
        z2 = live_before(trace, "backward root, step 1").get("gathered_params", 0)
        _, t3 = self.get()
        z3 = live_before(t3, "backward root, step 1").get("gathered_params", 0)
        self.assertGreaterEqual(z2, TINY_PARAMS * 2)
        self.assertLess(z3, z2)

    def test_activation_checkpointing_saves_less(self):
        saved = {}
        for ac in ("none", "selective", "full"):
            _, trace = self.get("--ac", ac) if ac != "none" else self.get()
            saved[ac] = live_before(trace, "backward root, step 1")["activations"]
        self.assertLess(saved["full"], saved["selective"])
        self.assertLess(saved["selective"], saved["none"])

    def test_bf16_true_state_is_exact(self):
        record, trace = self.get("--precision", "bf16-true")
        self.assertEqual(trace["persistent_at_end"], {"params": PARAMS_BF16, "grads": 0, "optimizer": OPT_BF16})
        self.check_schema(record)

    def test_fp16_mixed_with_sharded_grad_scaler(self):
        # --precision fp16-mixed: MixedPrecisionPolicy(param_dtype=float16) over the same fp32 shards and
        # ShardedGradScaler around backward and the step. Persistent state is bf16-mixed's exactly (fp32 shards,
        # fp32 gradients, fp32 AdamW states); fp16 gathered parameters are as large as bf16 ones. What the scaler
        # adds and keeps: its scale (fp32, one element) and growth tracker (int32, one element), created by the
        # first scale(loss): 2 x 512 B blocks live after the last step (the tracker counts them as activations:
        # they are created during the loss computation).
        record, trace = self.get("--precision", "fp16-mixed")
        self.assertEqual(trace["persistent_at_end"], {"params": PARAMS_FP32, "grads": 0, "optimizer": OPT_FP32})
        self.assertEqual(max_live(trace, "grads"), GRADS_FP32)
        _, bf = self.get()
        self.assertEqual(max_live(trace, "gathered_params"), max_live(bf, "gathered_params"))
        live = {}
        for e in trace["events"]:
            live[e["category"]] = live.get(e["category"], 0) + (e["bytes"] if e["op"] == "alloc" else -e["bytes"])
        self.assertEqual({k: v for k, v in live.items() if v},
                         {"params": PARAMS_FP32, "optimizer": OPT_FP32, "other": 2048, "activations": 2 * 512})
        self.assertEqual(record["plan"]["precision"], "fp16-mixed")
        self.check_schema(record)

    def test_grad_accumulation_runs_every_micro_batch(self):
        record, trace = self.get("--mbs", "2", "--grad-accum", "2")
        self.assertEqual(record["plan"]["grad_accum"], 2)
        self.assertTrue(any(e["phase"].endswith("micro-batch 1") for e in trace["events"]))
        self.assertEqual(trace["persistent_at_end"]["params"], PARAMS_FP32)

    def test_unsupported_plan_exits_2_with_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            spec = os.path.join(d, "tiny.json")
            with open(spec, "w") as f:
                json.dump(TINY, f)
            for flags in (["--runtime", "deepspeed"], ["--ac", "bogus"], ["--zero", "2", "--reshard-after-forward",
                                                                           "true"],
                          ["--zero", "0", "--grad-accum", "2"], ["--runtime", "fsdp1", "--prefetch", "2"],
                          ["--root-params", "bogus"], ["--runtime", "fsdp1", "--root-params", "embedding-head"],
                          ["--zero", "0", "--keep-last-block"]):
                p = subprocess.run([sys.executable, RUN, "--model", spec, "--gpus", "8", "-o",
                                    os.path.join(d, "r.json")] + flags, capture_output=True, text=True)
                self.assertEqual(p.returncode, 2, flags)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertTrue(p.stderr.startswith("run.py: --"), p.stderr)

    def test_ddp_buckets_hold_a_second_copy_of_the_gradients(self):
        record, trace = self.get("--zero", "0")
        self.assertEqual(record["plan"]["zero"], 0)
        # DDP keeps every parameter whole: 21 fp32 tensors, each allocation rounded up to 512 B: embedding and
        # output 16384*4 = 65536 each, final norm 256 -> 512; per block 2 norms 2*512, wq 16384, wk 8192, wv 8192,
        # wo 16384, w1,w2,w3 3*32768 = 148480; total 65536*2 + 512 + 2*148480 = 428544.
        self.assertEqual(trace["persistent_at_end"]["params"], 428544)
        # The Reducer's buckets (bucket_cap_mb=25, the first capped at 1 MiB): all 106816 fp32 gradients fit the
        # first bucket, one flat tensor of 106816*4 = 427264 B -> 427520 B, allocated by the constructor.
        wrap = [e for e in trace["events"] if e["phase"].startswith("wrap")]
        self.assertEqual(sum(e["bytes"] for e in wrap if e["op"] == "alloc"), 427520)
        self.assertEqual(max_live(trace, "comm_buffers"), 427520)
        self.check_schema(record)

    def test_fsdp1_flat_parameters_are_exact(self):
        record, trace = self.get("--runtime", "fsdp1")
        self.assertEqual(record["plan"]["runtime"], "fsdp1")
        # FSDP1 flattens each unit into one FlatParameter and keeps rank 0's 1/8 as one allocation: the root
        # (embedding 16384 + norm 64 + output 16384 = 32832 elements -> 4104 fp32 = 16416 B -> 16896) and each
        # block (4096 + 2*2048 + 4096 + 3*8192 + 2*64 = 36992 -> 4624 fp32 = 18496 B -> 18944).
        self.assertEqual(trace["persistent_at_end"]["params"], 16896 + 2 * 18944)
        self.assertEqual(record["measured"]["peak_allocated_bytes"], trace["peak_allocated_bytes"])
        self.check_schema(record)

    def test_pipeline_rank_state_is_exact(self):
        # --pp 2 on 8 GPUs: a (pp 2, dp_shard 4) mesh; torchtitan's split of 2 blocks + embedding + head over 2
        # stages puts the embedding and block 0 on stage 0. Rank 0's fp32 shards (numel / 4, rounded up to 512 B):
        # embedding 16384/4*4 = 16384; block 0: 2 norms 2*512, wq 4096, wk 2048, wv 2048, wo 4096, w1,w2,w3
        # 3*8192 = 37888; total 54272. No sharded gradients at the end (zero_grad set_to_none).
        record, trace = self.get("--pp", "2", "--pp-schedule", "1f1b", "--grad-accum", "2", "--pp-rank", "0")
        self.assertEqual(trace["persistent_at_end"]["params"], 54272)
        self.assertEqual(trace["persistent_at_end"]["grads"], 0)
        self.assertEqual(record["plan"]["pp"], 2)
        self.assertEqual(record["plan"]["pp_schedule"], "1f1b")
        self.assertEqual(record["measured"]["pp_rank"], 0)
        # Every micro-batch runs a forward and a backward on the stage (the trace names each action's).
        phases = {e["phase"].split(", micro-batch ")[-1] for e in trace["events"] if "micro-batch" in e["phase"]}
        self.assertEqual(phases, {"0", "1"})
        self.check_schema(record)

    def test_pipeline_rank_out_of_range_exits_2(self):
        with tempfile.TemporaryDirectory() as d:
            spec = os.path.join(d, "tiny.json")
            with open(spec, "w") as f:
                json.dump(TINY, f)
            p = subprocess.run([sys.executable, RUN, "--model", spec, "--gpus", "8", "-o", os.path.join(d, "r.json"),
                                "--pp", "2", "--grad-accum", "2", "--pp-rank", "2"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stderr.strip(), "run.py: --pp-rank: 2 is not a rank of --pp 2")

    @unittest.skipUnless(os.path.exists(SHARDPLAN), "shardplan not built")
    def test_tied_weight_gradient_waits_for_the_embedding_backward(self):
        # Tied embeddings under FSDP2 ([tok_embeddings, norm, output] one group): the head's gradient of the tied
        # weight (V x h bf16 = 256*64*2 = 32768 B, `aten.mm` in the root's backward) waits in autograd's input
        # buffer for the embedding's: it is alive when the first block's backward starts and freed only in the
        # root's last backward phase, after the blocks' (docs/model.md "Tied embeddings under FSDP2"). The root's
        # post-backwards reduce-scatter the norm's gradient (64 fp32 = 256 B -> 512 B input) before the blocks
        # and the tied weight's (256*64*4 = 65536 B) after them. seq 16: the fp32 logits (16*256*4 = 16384 B)
        # are not of the dW's size.
        with tempfile.TemporaryDirectory() as d:
            _, trace = run_ref(d, "--seq", "16", model=dict(TINY, tied_embeddings=True))
        ev = trace["events"]
        first_block_bwd = next(i for i, e in enumerate(ev) if e["phase"].startswith("backward layers."))
        dw = [i for i, e in enumerate(ev) if e["op"] == "alloc" and e["bytes"] == 32768
              and e["aten"] == "aten.mm.default" and e["phase"].startswith("backward root")
              and i < first_block_bwd]
        self.assertEqual(len(dw), 1)
        sid = ev[dw[0]]["storage"]
        freed = next(i for i, e in enumerate(ev) if i > dw[0] and e["op"] == "free" and e["storage"] == sid)
        last_block_bwd = max(i for i, e in enumerate(ev) if e["phase"].startswith("backward layers."))
        self.assertGreater(freed, last_block_bwd)
        rs_in = [(i, e["bytes"]) for i, e in enumerate(ev)
                 if e["op"] == "alloc" and e["aten"] == "c10d._reduce_scatter_base_.default"
                 and e["phase"].startswith("backward root")]
        self.assertEqual([b for _, b in rs_in], [512, 65536])
        self.assertLess(rs_in[0][0], first_block_bwd)
        self.assertGreater(rs_in[1][0], last_block_bwd)

    def test_block_activations_are_the_models_tensor_lists(self):
        # docs/model.md "Activations: one list of tensors per layer": block 0's eager forward (no AC) in the
        # lane's trace, tensor by tensor against the graph's lists (`show model --graph`, "activations"): what
        # the block allocates and frees before SDPA (wq's and wk's outputs, the rotary's fp32 copies and complex
        # products) are the tensors of life "transient"; what it frees after a residual add (wo's and w2's
        # outputs) those of life "output"; what survives the block is every tensor eager autograd saves
        # ("eager"), less the block's input (made before the block) plus its output (the next block's input).
        # Sizes as the lane records them: rounded up to 512 B (kMinBlockSize).
        _, trace = self.get()
        tokens = TINY["seq"]  # mbs 1
        block = [e for e in trace["events"] if e["phase"].startswith("forward layers.0") and "step 1" in e["phase"]]
        start = 1 + max(i for i, e in enumerate(block) if e["category"] == "gathered_params")  # after copy-out
        block = [e for e in block[start:] if e["category"] == "activations"]
        sdpa = [i for i, e in enumerate(block) if e["op"] == "alloc" and "scaled_dot_product" in e["aten"]]
        freed = {e["storage"]: i for i, e in enumerate(block) if e["op"] == "free"}
        allocs = [(i, e) for i, e in enumerate(block) if e["op"] == "alloc"]
        temps = sorted(e["bytes"] for i, e in allocs if e["storage"] in freed and freed[e["storage"]] < sdpa[0])
        outs = sorted(e["bytes"] for i, e in allocs if e["storage"] in freed and freed[e["storage"]] > sdpa[0])
        # SDPA's outputs 3 and 4 are its RNG state (0-dim philox seed and offset), not in the lists.
        kept = sorted(e["bytes"] for i, e in allocs if e["storage"] not in freed and i not in sdpa[2:4])
        with tempfile.TemporaryDirectory() as d:
            spec = os.path.join(d, "tiny.json")
            with open(spec, "w") as f:
                json.dump(TINY, f)
            p = subprocess.run([SHARDPLAN, "show", "--graph", "model", spec], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
        layers = [l for l in json.loads(p.stdout)["layers"] if l["block"] == 0]
        size = {"compute": 2, "fp32": 4, "int64": 8, "bool": 1}

        def rounded(a):
            return -(-int(a["per_token"] * size[a["dtype"]] * tokens) // 512) * 512

        acts = [a for l in layers for a in l["activations"] if a.get("only", "always") == "always"]
        self.assertEqual(temps, sorted(rounded(a) for a in acts if a["life"] == "transient" and not a["eager"]))
        self.assertEqual(outs, sorted(rounded(a) for a in acts if a["life"] == "output"))
        saved = [rounded(a) for a in acts if a["eager"] and a.get("role") != "block_input"]
        self.assertEqual(kept, sorted(saved + [TINY["hidden"] * 2 * tokens]))
        # e.g. the rotary's temporaries: wq 4096, wk 2048, xq.float() 8192, xk.float() 4096, the products 8192
        # and 4096 (10 bytes per element of q = 64 and k = 32, 32 tokens).
        self.assertEqual(temps, [2048, 4096, 4096, 4096, 8192, 8192])

    def test_shardplan_validate_reads_the_record(self):
        record, _ = self.get()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rec.json")
            rec = dict(record)
            rec["model"] = TINY
            with open(path, "w") as f:
                json.dump(rec, f)
            p = subprocess.run([SHARDPLAN, "validate", path], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("peak_allocated_bytes", p.stdout)


if __name__ == "__main__":
    unittest.main()

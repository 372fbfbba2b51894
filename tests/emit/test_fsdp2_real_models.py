"""The script `--emit fsdp2` writes, on the model code users run: Hugging Face transformers 5.23.0's Llama, Qwen3
and Mixtral (tiny sizes of the real architectures, random weights saved with save_pretrained: hf_tiny.py) and
torchtitan 0.3.0's llama3 and qwen3 (their model classes at the same sizes: titan_tiny.py), under torchrun with 2
ranks (4 for HSDP) on the CPU (gloo). Each plan is simulated for the tiny model's config.json, so the file carries
the simulator's units (SIM_UNITS); the structures the script prints after its steps are compared with them: the
FSDP units (count, each unit's TP-local parameter count exactly, split by TP dim), the meshes, the AC wrappers and
their mode, the TP styles, the micro-batches. The Hugging Face runs load the checkpoint shard by shard, and their
first loss must be the unsharded model's loss on the same tokens (hf_tiny.reference_loss); the accumulation run's
gradient norm must be the one-micro-batch run's on the same tokens (the loss divided by the accumulation steps).
One emitted plan serves several sources (torchrun's start-up dominates the time)."""
import ast
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import common

HERE = os.path.dirname(os.path.abspath(__file__))


def read(path):
    with open(path) as f:
        return f.read()


def literal(text, name):
    """The literal assigned to NAME in the header of an emitted script (PLAN, SIM_UNITS: dicts and lists of
    ints, strings, bools, None), read without running the script."""
    header = ast.parse(text[:text.index("\nimport argparse\n")])
    for node in header.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return eval(compile(ast.Expression(node.value), name, "eval"), {"dict": dict})
    raise AssertionError(f"no {name} in the script's header")


class RealModelsTest(unittest.TestCase):
    runs = {}

    # The unsharded models' losses the Hugging Face runs are checked against: (architecture, mbs, grad_accum) ->
    # the mean loss over rank 0's first step (the script's data stream: a generator seeded 1000 + data-parallel
    # rank, mbs x grad_accum sequences of seq + 1 tokens per step, cut into micro-batches of mbs).
    SEQ = 32
    REFERENCES = [("llama", 1, 2), ("llama", 2, 1), ("llama", 1, 1), ("qwen3", 1, 1), ("mixtral", 1, 1)]
    # (llama_lora: mbs 1, accumulation 1, the base model's loss: ("llama", 1, 1).)

    @classmethod
    def setUpClass(cls):
        common.require_framework_python(__name__)
        cls.dir = tempfile.mkdtemp(prefix="shardplan-emit-real-")
        # The checkpoints and the reference losses, in one process of the project's interpreter (transformers is
        # there, not necessarily here).
        code = f"""
import json, sys, torch
sys.path.insert(0, {HERE!r})
import hf_tiny
for arch in ("llama", "qwen3", "mixtral"):
    hf_tiny.save(arch, {cls.dir!r} + "/" + arch)
out = {{}}
for arch, mbs, accum in {cls.REFERENCES!r}:
    g = torch.Generator().manual_seed(1000)
    batch = torch.randint(0, hf_tiny.DIMS["vocab_size"], (mbs * accum, {cls.SEQ} + 1), generator=g)
    out[f"{{arch}} {{mbs}} {{accum}}"] = hf_tiny.reference_loss({cls.dir!r} + "/" + arch, list(batch.split(mbs)))
print(json.dumps(out))
"""
        r = subprocess.run([common.python(), "-c", code], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError("saving the tiny Hugging Face models or their reference losses failed:\n"
                                 + r.stderr[-4000:])
        cls.reference = json.loads(r.stdout.strip().splitlines()[-1])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    # --- plans and runs ----------------------------------------------------------------------------------------
    PLANS = {
        # name: (architecture, GPUs, global batch, --fix pins)
        # accumulation 2; transformers' eager attention (its s x s scores and mask) under TP
        "llama_tp2": ("llama", 2, 2, ["tp=2", "zero=3", "wrap=1", "ac=selective", "mbs=1", "attention=eager"]),
        # 2 ranks x 1 sequence x accumulation 2, and the same tokens in one micro-batch of 2
        "llama_accum": ("llama", 2, 4, ["tp=1", "zero=3", "wrap=1", "ac=full", "mbs=1"]),
        "llama_mbs": ("llama", 2, 4, ["tp=1", "zero=3", "wrap=1", "ac=none", "mbs=2"]),
        "qwen3_tp2": ("qwen3", 2, 1, ["tp=2", "zero=2", "wrap=2", "ac=full", "mbs=1"]),  # one unit of 2 blocks
        "mixtral": ("mixtral", 2, 2, ["tp=1", "zero=3", "wrap=1", "ac=selective", "mbs=1"]),
        # transformers 5.23's per-expert loop over the 3-D weights (--moe-impl hf-eager: experts_implementation)
        "mixtral_eager": ("mixtral", 2, 2, ["tp=1", "zero=3", "wrap=1", "ac=none", "mbs=1", "moe_impl=hf-eager"]),
        "llama_hsdp": ("llama", 4, 4, ["tp=1", "zero=3", "wrap=1", "shard_group=2", "ac=selective", "mbs=1"]),
        # LoRA-4 on q, v and down (PEFT 0.21.2 adapters, a bf16 frozen base) under FSDP2 ZeRO-3
        "llama_lora": ("llama", 2, 2, ["tp=1", "zero=3", "wrap=1", "ac=selective", "mbs=1", "lora_rank=4",
                                       "lora_targets=q_proj,v_proj,down_proj"]),
    }
    SOURCES = {  # source name -> script arguments (the model's architecture decides the checkpoint / factory)
        "hf": lambda arch, d: ["--model-source", "hf", "--model-path", os.path.join(d, arch)],
        "titan": lambda arch, d: ["--model-source", "titan", "--model-factory", f"titan_tiny:{arch}3_model"
                                  if arch == "llama" else f"titan_tiny:{arch}_model"],
    }

    @classmethod
    def plan(cls, name):
        key = ("plan", name)
        if key not in cls.runs:
            arch, gpus, batch, fixes = cls.PLANS[name]
            path, _ = common.emit("fsdp2", ["runtime=fsdp2", f"seq={cls.SEQ}", *fixes], gpus=gpus, global_batch=batch,
                                  model=os.path.join(cls.dir, arch, "config.json"))
            cls.runs[key] = path
        return cls.runs[key]

    def run_script(self, name, source):
        """torchrun of plan `name` with `source`; the JSON line rank 0 printed (memoised per class)."""
        key = (name, source)
        if key not in self.runs:
            arch, gpus, _, _ = self.PLANS[name]
            path = self.plan(name)
            cmd = [common.python(), "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), path, "--steps",
                   "2", "--device", "cpu", *self.SOURCES[source](arch, self.dir)]
            env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
            lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
            self.assertEqual(r.returncode, 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr[-6000:]}")
            self.assertEqual(len(lines), 1, r.stdout)
            self.runs[key] = json.loads(lines[0])
        return self.runs[key]

    # --- comparisons ---------------------------------------------------------------------------------------------
    def check_built(self, name, source):
        """What the script built is the simulated plan: units, meshes, AC, TP styles, micro-batches."""
        out = self.run_script(name, source)
        text = read(self.plan(name))
        plan, sim = literal(text, "PLAN"), literal(text, "SIM_UNITS")
        built = out["built"]
        self.assertTrue(out["loss_finite"], out["losses"])
        self.assertTrue(out["params_changed"])
        # FSDP units: the ones holding parameters, in forward order (the root holds none), one per simulated unit,
        # each with the simulated TP-local parameter count, split the same way by TP.
        units = [u for u in built["fsdp_units"] if u["params"]]
        self.assertEqual([u["tp_local_elems"] for u in units], [s["elems"] for s in sim],
                         [(u["modules"], s["name"]) for u, s in zip(units, sim)])
        for u, s in zip(units, sim):
            self.assertEqual((u["tp_dim0"], u["tp_dim1"], u["tp_replicated"]),
                             (s["tp_dim0"], s["tp_dim1"], s["tp_replicated"]), (u["modules"], s["name"]))
            if s["name"] == "embedding":
                self.assertEqual(len(u["modules"]), 1)
                self.assertRegex(u["modules"][0], r"(embed_tokens|tok_embeddings)$")
            elif s["name"] == "head":
                self.assertEqual([m.split(".")[-1] for m in u["modules"]], ["norm", "lm_head"])
                self.assertFalse(u["reshard_after_forward"])
            else:
                # blocks.N, or blocks.A-B for a unit of several blocks (--wrap; fully_shard of the list)
                m = re.fullmatch(r"blocks\.(\d+)(?:-(\d+))?", s["name"])
                self.assertIsNotNone(m, s["name"])
                first, last = int(m.group(1)), int(m.group(2) or m.group(1))
                self.assertEqual([x.rsplit(".", 2)[-2:] for x in u["modules"]],
                                 [["layers", str(i)] for i in range(first, last + 1)], u["modules"])
                self.assertEqual(u["reshard_after_forward"], plan["reshard"])
            # This rank's shard of the unit: 1 / shard group of it (up to FSDP's padding of uneven dims).
            self.assertLessEqual(abs(u["local_elems"] * plan["shard_group"] - u["tp_local_elems"]),
                                 plan["shard_group"] * 64 * len(u["params"]))
            self.assertEqual(u["global_elems"], u["tp_dim0"] * plan["tp"] + u["tp_dim1"] * plan["tp"] +
                             u["tp_replicated"])
        # Meshes: replicate x shard x TP as planned.
        self.assertEqual(out["mesh"], [plan["replicas"], plan["shard_group"], plan["tp"]])
        dp = built["meshes"]["dp"]
        self.assertEqual(dp["shape"], [plan["replicas"], plan["shard_group"]] if plan["replicas"] > 1
                         else [plan["shard_group"]])
        self.assertEqual(dp["dim_names"][0], "dp_replicate" if plan["replicas"] > 1 else dp["dim_names"][0])
        self.assertEqual(built["meshes"]["tp"], {"shape": [plan["tp"]], "dim_names": ["tp"]})
        # AC: every block wrapped, in the plan's mode; nothing else.
        blocks = [b for u, s in zip(units, sim) if s["name"].startswith("blocks.") for b in u["modules"]]
        if plan["ac"] == "none":
            self.assertEqual(built["ac"], [])
        else:
            self.assertEqual([a["module"] for a in built["ac"]], blocks)
            self.assertEqual({a["mode"] for a in built["ac"]}, {plan["ac"]})
        # TP styles: vocab-parallel embedding, colwise head, replicated (sequence-parallel) norms, each block's
        # projections colwise and rowwise; none without TP.
        tp = built["tp_plan"]
        if plan["tp"] == 1:
            self.assertEqual(tp, {})
        else:
            embed, head = units[0]["modules"][0], units[-1]["modules"]
            self.assertEqual(tp[embed], "vocab")
            self.assertEqual((tp[head[0]], tp[head[1]]), ("replicate", "colwise"))
            for b in blocks:
                styles = {v for k, v in tp.items() if k.startswith(b + ".")}
                self.assertEqual(styles, {"colwise", "rowwise", "replicate"}, (b, tp))
        # Micro-batches: the plan's, the loss divided by the accumulation steps.
        self.assertEqual(built["micro_batches"], {"mbs": plan["mbs"], "grad_accum": plan["grad_accum"],
                                                  "seq": plan["seq"], "loss_scale": 1.0 / plan["grad_accum"]})
        return out, plan

    def check_reference_loss(self, name, out, plan):
        """Rank 0's first loss is the unsharded model's (fp32, one process) on rank 0's tokens: the checkpoint
        was loaded shard by shard into the right places, and TP computes the same model."""
        key = f"{self.PLANS[name][0]} {plan['mbs']} {plan['grad_accum']}"
        self.assertIn(key, self.reference, "a reference loss for this plan's micro-batches (REFERENCES)")
        self.assertEqual(plan["seq"], self.SEQ)
        ref = self.reference[key]
        self.assertAlmostEqual(out["losses"][0], ref, delta=5e-3 * ref)  # bf16 compute in the script

    # --- the tests ------------------------------------------------------------------------------------------------
    def test_llama_tp2_selective_ac_accumulation_both_sources(self):
        for source in ("hf", "titan"):
            with self.subTest(source=source):
                out, plan = self.check_built("llama_tp2", source)
                self.assertEqual((plan["tp"], plan["grad_accum"], plan["ac"]), (2, 2, "selective"))
                self.assertEqual(plan["attention"], "eager")  # Hugging Face: attn_implementation="eager"
                if source == "hf":
                    self.check_reference_loss("llama_tp2", out, plan)

    def test_llama_fsdp_no_ac_both_sources(self):
        for source in ("hf", "titan"):
            with self.subTest(source=source):
                out, plan = self.check_built("llama_mbs", source)
                self.assertEqual((plan["tp"], plan["shard_group"], plan["ac"]), (1, 2, "none"))
                if source == "hf":
                    self.check_reference_loss("llama_mbs", out, plan)

    def test_gradient_accumulation_divides_the_loss(self):
        # The same tokens per data-parallel rank: 2 micro-batches of 1 sequence (accumulated) and 1 micro-batch
        # of 2. The step's gradient is the mean over the step's tokens in both only if each micro-batch's loss is
        # divided by the accumulation steps (undivided, the accumulated one is twice as large). Full AC on one
        # side, none on the other: recomputation does not change gradients.
        accum, _ = self.check_built("llama_accum", "hf")
        single, _ = self.check_built("llama_mbs", "hf")
        self.assertEqual((accum["built"]["micro_batches"]["grad_accum"], single["built"]["micro_batches"]["mbs"]),
                         (2, 2))
        self.assertAlmostEqual(accum["grad_norms"][0], single["grad_norms"][0], delta=1e-3 * single["grad_norms"][0])
        self.assertAlmostEqual(accum["losses"][0], single["losses"][0], delta=1e-3)
        self.assertTrue(math.isfinite(accum["grad_norms"][1]))

    def test_qwen3_tp2_zero2_full_ac_both_sources(self):
        # Qwen3's q_norm / k_norm over the TP-local heads; ZeRO-2 keeps the blocks gathered after forward.
        for source in ("hf", "titan"):
            with self.subTest(source=source):
                out, plan = self.check_built("qwen3_tp2", source)
                self.assertFalse(plan["reshard"])
                norms = [k for k, v in out["built"]["tp_plan"].items() if k.endswith(("q_norm", "k_norm"))]
                self.assertEqual(len(norms), 4)  # 2 blocks x (q_norm, k_norm), replicated over TP
                if source == "hf":
                    self.check_reference_loss("qwen3_tp2", out, plan)

    def test_mixtral_selective_ac(self):
        # The checkpoint keeps one w1 / w2 / w3 per expert; the model stacks them (transformers' conversion).
        out, plan = self.check_built("mixtral", "hf")
        self.assertIn("model.layers.0.mlp.experts.gate_up_proj", out["built"]["fsdp_units"][1]["params"])
        self.check_reference_loss("mixtral", out, plan)
        # --moe-impl grouped (torchtitan's, simulated): the script leaves transformers' default, grouped_mm.
        self.assertIsNone(literal(read(self.plan("mixtral")), "HF_EXPERTS"))
        self.assertEqual(out["built"]["experts_implementation"], "grouped_mm")

    def test_mixtral_experts_implementation(self):
        # --moe-impl hf-eager: the script loads the model with experts_implementation="eager" and the model
        # dispatches its experts on it (config._experts_implementation); the same model, so the same loss as the
        # unsharded grouped_mm reference.
        out, plan = self.check_built("mixtral_eager", "hf")
        self.assertEqual(literal(read(self.plan("mixtral_eager")), "HF_EXPERTS"), "eager")
        self.assertEqual(out["built"]["experts_implementation"], "eager")
        self.check_reference_loss("mixtral_eager", out, plan)

    def test_hsdp(self):
        out, plan = self.check_built("llama_hsdp", "hf")
        self.assertEqual((plan["replicas"], plan["shard_group"]), (2, 2))
        self.assertEqual(out["built"]["meshes"]["dp"]["dim_names"], ["dp_replicate", "dp_shard"])
        self.check_reference_loss("llama_hsdp", out, plan)

    def test_llama_lora(self):
        # The units' parameter counts (SIM_UNITS, adapters included) are checked by check_built; then the
        # adapters: per block q [64, 64], v [32, 64], down [64, 128] at rank 4: 4 x ((64 + 64) + (64 + 32) +
        # (128 + 64)) = 1,664 trainable parameters, 3,328 in two blocks, the simulated count; the base frozen in
        # bf16 without gradients. lora_B starts at zero: the first loss is the base model's.
        out, plan = self.check_built("llama_lora", "hf")
        lora = literal(read(self.plan("llama_lora")), "LORA")
        self.assertEqual(lora, {"rank": 4, "targets": ["q_proj", "v_proj", "down_proj"], "trainable": 3328})
        built = out["built"]
        self.assertEqual(built["trainable_params"], lora["trainable"])
        self.assertEqual(built["frozen_dtypes"], ["torch.bfloat16"])
        self.assertEqual(built["frozen_with_grad"], 0)
        self.assertIn("model.layers.0.self_attn.q_proj.lora_A.default.weight", built["fsdp_units"][1]["params"])
        self.check_reference_loss("llama_lora", out, plan)


if __name__ == "__main__":
    unittest.main()

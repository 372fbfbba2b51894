"""The emitted torchtitan config is loaded by the installed torchtitan's own config machinery (ConfigManager,
as `torchtitan.train --module NAME --config shardplan_config` does) and carries the simulated plan: model
flavor (its parameter count is the simulator's), parallel degrees, batch sizes, AC, compile, float8, FSDP
reshard, dtypes, optimizer.

torchtitan 0.3.0 cannot run a training step on the CPU: torchtitan/tools/utils.py takes
`_get_available_device_type() or "cuda"` as its device, and Trainer.__init__ (trainer.py) calls
torch.cuda.set_device before anything else, which on a machine without a GPU raises
"RuntimeError: Found no NVIDIA driver on your system" (tried with torchrun --nproc-per-node 2 and its
llama3_debugmodel). test_trainer_needs_cuda pins that fact, so that a torchtitan gaining a CPU path shows here.
"""
import importlib
import json
import os
import subprocess
import sys
import unittest

import common


def shardplan_json(args):
    r = subprocess.run([common.BIN, *args, "--json", "-"], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"shardplan {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return json.loads(r.stdout)


class TorchtitanConfigTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        common.require_framework_python(__name__)
        import torch
        from torchtitan.config import ConfigManager
        import torchtitan.components.quantization.float8 as float8
        cls.torch = torch
        cls.ConfigManager = ConfigManager
        cls.float8 = float8

    def load(self, path, *overrides):
        """The config as torchtitan's ConfigManager builds it from the emitted module (by its module path, the
        form `--module` takes for modules outside torchtitan), with CLI overrides on top."""
        d, name = os.path.split(path)
        name = name[:-3]
        sys.path.insert(0, d)
        try:
            sys.modules.pop(name, None)
            return self.ConfigManager().parse_args(["--module", name, "--config", "shardplan_config", *overrides])
        finally:
            sys.path.remove(d)
            sys.modules.pop(name, None)

    def plan_of(self, path):
        """The plan `shardplan simulate --from FILE` reads back (16 GPUs, llama3-8b, as emitted)."""
        return shardplan_json(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                               "--from", path])["plan"]

    def test_hsdp_selective_ac_fp8_rowwise(self):
        # 16 GPUs as 2 replicas x 8 shards, selective AC, compile, float8 rowwise; global batch 32 = mbs x
        # accumulation x 16 data-parallel ranks.
        path, err = common.emit("torchtitan", ["runtime=fsdp2", "tp=1", "shard_group=8", "ac=selective", "fp8=rowwise",
                                               "compile=true", "prefetch=1", "wrap=1", "fp8_all_gather=false"])
        # Float8LinearConverter checks the GPU (SM 8.9+) while the config is built (model_registry converts the
        # model config); patched to what an H100 answers, the rest of the config is torchtitan's own.
        saved = self.float8.has_cuda_capability
        self.float8.has_cuda_capability = lambda major, minor: True
        try:
            cfg = self.load(path, "--training.steps", "2")
        finally:
            self.float8.has_cuda_capability = saved
        plan = self.plan_of(path)
        self.assertEqual(cfg.training.steps, 2)  # the CLI override applied on top of the file
        self.assertEqual(cfg.model_spec.name, "llama3")
        self.assertEqual(cfg.model_spec.flavor, "8B")
        self.assertEqual(cfg.parallelism.data_parallel_replicate_degree, 2)
        self.assertEqual(cfg.parallelism.data_parallel_shard_degree, 8)
        self.assertEqual(cfg.parallelism.tensor_parallel_degree, 1)
        self.assertEqual(cfg.parallelism.fsdp_reshard_after_forward, "always")
        self.assertEqual(cfg.training.local_batch_size, plan["mbs"])
        self.assertEqual(cfg.training.global_batch_size, 32)
        self.assertEqual(32, plan["mbs"] * plan["grad_accum"] * 16)
        self.assertEqual(cfg.training.seq_len, plan["seq"])
        self.assertEqual(type(cfg.activation_checkpoint).__qualname__, "SelectiveAC.Config")
        self.assertTrue(cfg.compile.enable)
        self.assertEqual(cfg.training.dtype, "float32")
        self.assertEqual(cfg.training.mixed_precision_param, "bfloat16")
        self.assertEqual(cfg.training.mixed_precision_reduce, "float32")
        # The blocks' linears are float8 (rowwise: axiswise scaling), the output projection is not.
        model = cfg.model_spec.model
        w1 = model.layers[0].feed_forward.w1
        self.assertEqual(type(w1).__qualname__, "Float8Linear.Config")
        self.assertEqual(w1._torchao_config.cast_config_weight.scaling_granularity.value, "axiswise")
        self.assertEqual(type(model.lm_head).__qualname__, "Linear.Config")
        self.assertEqual(plan["fp8"], "rowwise")

    def test_fp8_tensorwise_outside_typed_choices_loads(self):
        # recipe_name is typed rowwise | rowwise_with_gw_hp in torchtitan 0.3.0; "tensorwise" (what the simulator
        # models for --fp8 tensorwise) is written with a note, and torchtitan's converter builds torchao's
        # tensorwise config from it.
        path, err = common.emit("torchtitan", ["runtime=fsdp2", "tp=1", "fp8=tensorwise", "fp8_all_gather=false",
                                               "prefetch=1", "wrap=1"])
        self.assertIn("emit torchtitan: --fp8 tensorwise: Float8LinearConverter.Config.recipe_name", err)
        saved = self.float8.has_cuda_capability
        self.float8.has_cuda_capability = lambda major, minor: True
        try:
            cfg = self.load(path)
        finally:
            self.float8.has_cuda_capability = saved
        w1 = cfg.model_spec.model.layers[0].feed_forward.w1
        self.assertEqual(w1._torchao_config.cast_config_weight.scaling_granularity.value, "tensorwise")
        self.assertEqual(self.plan_of(path)["fp8"], "tensorwise")

    def test_zero2_tp2_full_ac_and_param_count(self):
        # ZeRO-2 (reshard never) with TP 2, full AC, foreach Adam: 8 data-parallel ranks of 2 GPUs each.
        path, _ = common.emit("torchtitan", ["runtime=fsdp2", "zero=2", "tp=2", "ac=full", "fp8=none",
                                               "fused_optimizer=false", "reduce_dtype=fp32", "prefetch=1",
                                               "wrap=1"])
        cfg = self.load(path)
        plan = self.plan_of(path)
        self.assertEqual(plan["zero"], 2)
        self.assertEqual(cfg.parallelism.data_parallel_shard_degree, 8)
        self.assertEqual(cfg.parallelism.tensor_parallel_degree, 2)
        self.assertEqual(cfg.parallelism.fsdp_reshard_after_forward, "never")
        self.assertEqual(type(cfg.activation_checkpoint).__qualname__, "FullAC.Config")
        self.assertEqual(cfg.optimizer.implementation, "foreach")
        self.assertEqual(cfg.training.global_batch_size, plan["mbs"] * plan["grad_accum"] * 8)
        # The flavor is the simulated architecture: torchtitan's llama3 8B built on the meta device has the
        # simulator's parameter count exactly (8,030,261,248).
        with self.torch.device("meta"):
            model = cfg.model_spec.model.build()
        n = sum(p.numel() for p in model.parameters())
        sim = shardplan_json(["simulate", "--model", "llama3-8b", "--gpus", "16"])
        self.assertEqual(n, sim["inputs"]["model"]["parameters"])
        self.assertEqual(n, 8030261248)

    def test_offload_and_bf16_true(self):
        # ZeRO-3 with parameter offload (FSDP2 CPUOffloadPolicy: torchtitan's enable_cpu_offload) and no AC;
        # bf16-true is training.dtype bfloat16.
        path, _ = common.emit("torchtitan", ["runtime=fsdp2", "zero=3", "offload=params", "ac=none", "fp8=none",
                                               "precision=bf16-true", "reduce_dtype=fp32", "prefetch=1", "wrap=1"])
        cfg = self.load(path)
        self.assertTrue(cfg.training.enable_cpu_offload)
        self.assertIsNone(cfg.activation_checkpoint)
        self.assertEqual(cfg.training.dtype, "bfloat16")
        plan = self.plan_of(path)
        self.assertEqual(plan["offload"], "params")
        self.assertEqual(plan["precision"], "bf16-true")
        self.assertEqual(plan["ac"], "none")

    def test_qwen3_flavor_param_count(self):
        # qwen3-8b is torchtitan's qwen3 flavor 8B: 8,190,735,360 parameters in both.
        path, _ = common.emit("torchtitan", ["runtime=fsdp2", "prefetch=1", "wrap=1"], model="qwen3-8b")
        cfg = self.load(path)
        self.assertEqual((cfg.model_spec.name, cfg.model_spec.flavor), ("qwen3", "8B"))
        with self.torch.device("meta"):
            model = cfg.model_spec.model.build()
        sim = shardplan_json(["simulate", "--model", "qwen3-8b", "--gpus", "16"])
        self.assertEqual(sum(p.numel() for p in model.parameters()), sim["inputs"]["model"]["parameters"])

    def test_notes_for_what_torchtitan_cannot_express(self):
        # A bf16 gradient reduction and 2 units prefetched: written as torchtitan does (fp32, one block), and
        # both named on stderr and in the file.
        path, err = common.emit("torchtitan", ["runtime=fsdp2", "reduce_dtype=bf16", "prefetch=2", "wrap=1"])
        with open(path) as f:
            text = f.read()
        for needle in ("--reduce-dtype bf16: TrainingConfig.mixed_precision_reduce", "--prefetch 2:"):
            self.assertIn("emit torchtitan: " + needle, err)
            self.assertIn("# NOTE: " + needle, text)
        self.assertEqual(self.load(path).training.mixed_precision_reduce, "float32")

    def test_from_reads_torchtitans_own_config_registries(self):
        # --from on the installed torchtitan's own config_registry.py files, every config function of llama3,
        # qwen3 and deepseek_v3: each reads (exit 0) or is one input error (exit 2) naming the file (pipeline
        # parallelism, an `if` in the function) or the expert/context degree it sets, never anything else.
        import torchtitan
        root = os.path.join(os.path.dirname(torchtitan.__file__), "models")
        codes = {}
        for fam in ("llama3", "qwen3", "deepseek_v3"):
            path = os.path.join(root, fam, "config_registry.py")
            with open(path) as f:
                names = [l[4:l.index("(")] for l in f if l.startswith("def ")]
            self.assertGreater(len(names), 2, path)
            for name in names:
                r = subprocess.run([common.BIN, "simulate", "--model", "llama3-8b", "--gpus", "16", "--from",
                                    f"{path}:{name}"], capture_output=True, text=True)
                self.assertIn(r.returncode, (0, 2), f"{name}: {r.stderr}")
                if r.returncode == 2:
                    # One line naming the file: an error in the file, or a degree the file sets that the model
                    # cannot take (expert parallelism of a MoE config read against the dense --model), named
                    # by its field ("FILE: parallelism.expert_parallel_degree = 8: ..."), never by a flag
                    # nobody gave.
                    self.assertEqual(r.stderr.count("shardplan: error:"), 1, r.stderr)
                    self.assertIn(f"error: {path}:", r.stderr, name)  # FILE: or FILE:FUNCTION:
                    self.assertNotIn("error: --", r.stderr, name)
                codes[f"{fam}:{name}"] = r.returncode
        self.assertEqual(codes["llama3:llama3_8b"], 0)
        # llama3_8b(): local_batch_size 1, seq_len 8192, SelectiveAC, no compile (torchtitan's file).
        plan = shardplan_json(["simulate", "--model", "llama3-8b", "--gpus", "16", "--from",
                               os.path.join(root, "llama3", "config_registry.py") + ":llama3_8b"])["plan"]
        self.assertEqual((plan["mbs"], plan["seq"], plan["ac"], plan["compile"]), (1, 8192, "selective", False))

    def test_pipeline_parallel_interleaved(self):
        # pp 4, interleaved 1F1B on 16 GPUs (4 data-parallel ranks, global batch 32: 8 micro-batches of the
        # plan's size per rank and step), once with torchtitan's own split of the stages (2 per rank) and once
        # with the plan's split of the 32 blocks over the 8 stages (module_fqns_per_model_part).
        # virtual_stages is searched (2, 4, 8, ... per rank): pinned to torchtitan's default of 2.
        pins = ["runtime=fsdp2", "pp=4", "pp_schedule=interleaved-1f1b", "virtual_stages=2", "tp=1", "ac=full",
                "fp8=none", "prefetch=1", "wrap=1"]
        for extra in ([], ["pp_layers=3,4,4,4,4,4,4,5"]):
            path, _ = common.emit("torchtitan", pins + extra)
            cfg = self.load(path)
            plan = self.plan_of(path)
            par = cfg.parallelism
            self.assertEqual((plan["pp"], plan["pp_schedule"], plan["virtual_stages"]), (4, "interleaved-1f1b", 2))
            self.assertEqual(par.pipeline_parallel_degree, 4)
            self.assertEqual(par.pipeline_parallel_schedule, "Interleaved1F1B")
            self.assertEqual(par.pipeline_parallel_microbatch_size, plan["mbs"])
            # torchtitan splits local_batch_size into micro-batches: mbs x grad_accum = 32 / 4 ranks.
            self.assertEqual(cfg.training.local_batch_size, plan["mbs"] * plan["grad_accum"])
            self.assertEqual(cfg.training.local_batch_size, 8)
            self.assertEqual(cfg.training.global_batch_size, 32)
            self.assertTrue(cfg.training.disable_cuda_graphs)  # torchtitan refuses PP with CUDA graphs
            if not extra:
                self.assertIsNone(par.module_fqns_per_model_part)
                self.assertFalse(plan.get("pp_layers"))
            else:
                parts = par.module_fqns_per_model_part
                self.assertEqual(len(parts), 8)
                self.assertEqual([sum(m.startswith("layers.") for m in part) for part in parts],
                                 [3, 4, 4, 4, 4, 4, 4, 5])
                self.assertEqual(parts[0][0], "tok_embeddings")
                self.assertEqual(parts[-1][-2:], ["norm", "lm_head"])
                self.assertEqual(plan["pp_layers"], "3,4,4,4,4,4,4,5")
            # The schedule name is one torch's pipelining knows, with stages per rank > 1 (a looped schedule).
            from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
            self.assertTrue(issubclass(get_schedule_class(par.pipeline_parallel_schedule), PipelineScheduleMulti))

    def test_sdpa_backend_allocator_and_cuda_graphs(self):
        # --sdpa-backend flash is torchtitan 0.3.0's varlen attention (FlashAttention; the registry's default is
        # FlexAttention); expandable segments go on the launch line; CUDA graphs are off (the simulator models
        # eager steps whose zero_grad frees the gradients).
        path, _ = common.emit("torchtitan", ["runtime=fsdp2", "tp=1", "sdpa_backend=flash", "allocator=expandable"])
        cfg = self.load(path)
        attn = cfg.model_spec.model.layers[0].attention.inner_attention
        self.assertEqual(type(attn).__qualname__, "VarlenAttention.Config")
        self.assertTrue(cfg.training.disable_cuda_graphs)
        with open(path) as f:
            self.assertIn("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH=. torchrun", f.read())
        # cuDNN attention has no torchtitan 0.3.0 language-model backend: refused, nothing written.
        r, path = common.run_plan("torchtitan", ["runtime=fsdp2", "tp=1", "sdpa_backend=cudnn"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--sdpa-backend cudnn", r.stderr)
        self.assertFalse(os.path.exists(path))

    def test_unknown_flavor_is_refused(self):
        # gpt2-xl has no torchtitan 0.3.0 flavor: an input error, exit 2, nothing written.
        r, out = common.run_plan("torchtitan", ["runtime=fsdp2"], model="gpt2-xl", gpus=8, global_batch=8)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("torchtitan 0.3.0 has no model flavor with the dimensions of gpt2-xl", r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_trainer_needs_cuda(self):
        # Why no training step runs here: the Trainer picks "cuda" when no accelerator is found and sets the
        # device first (see the module docstring).
        if self.torch.cuda.is_available():
            self.skipTest("a GPU is present: this pins the CPU-only failure")
        path, _ = common.emit("torchtitan", ["runtime=fsdp2", "prefetch=1", "wrap=1"])
        cfg = self.load(path)
        env = {k: os.environ.get(k) for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
        os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1")
        try:
            with self.assertRaisesRegex(RuntimeError, "Found no NVIDIA driver"):
                cfg.build()
        finally:
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


if __name__ == "__main__":
    unittest.main()

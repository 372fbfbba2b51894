"""--precision fp16-mixed as the emitters write it: the FSDP2 script trains the tiny model with
MixedPrecisionPolicy(param_dtype=float16) and FSDP's ShardedGradScaler on the CPU (gloo, 2 ranks: torch 2.15 has
CPU float16 GEMMs and a CPU _amp_foreach_non_finite_check_and_unscale_, so the whole loss-scaled step runs), and
the ds_config's fp16 block is accepted by DeepSpeedConfig with DeepSpeed's dynamic loss-scaler defaults;
torchtitan 0.3.0 has no fp16 and is refused."""
import json
import re
import subprocess
import unittest

import common


class Fp16MixedEmitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        common.require_framework_python(__name__)

    def test_fsdp2_script_with_sharded_grad_scaler(self):
        path, _ = common.emit("fsdp2", ["runtime=fsdp2", "zero=3", "tp=1", "mbs=1", "precision=fp16-mixed",
                                        "reduce_dtype=fp32"])
        with open(path) as f:
            text = f.read()
        m = re.search(r"^PLAN = dict\((.*?)\)\n", text, re.S | re.M)
        plan = eval(f"dict({m.group(1)})")
        self.assertEqual((plan["precision"], plan["param_dtype"], plan["reduce_dtype"]),
                         ("fp16-mixed", "float16", "float32"))
        self.assertIn("ShardedGradScaler", text)
        cmd = [common.python(), "-m", "torch.distributed.run", "--nproc-per-node", "2", path, "--tiny", "--steps",
               "2", "--device", "cpu", "--model-source", "titan"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, f"{r.stdout}\n{r.stderr[-4000:]}")
        out = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][0])
        self.assertTrue(out["loss_finite"], out)
        self.assertTrue(out["params_changed"], out)
        # The scaler ran: ShardedGradScaler's init_scale 2**16 for the first step; the second step's scale is
        # 2**16 again (no inf: growth only after growth_interval 2000 clean steps) or halved (an inf skipped the
        # first step's update, backoff_factor 0.5). Either way a real loss-scaled step.
        self.assertEqual(out["loss_scales"][0], 65536.0)
        self.assertIn(out["loss_scales"][1], (65536.0, 32768.0))

    def test_deepspeed_fp16_block(self):
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=2", "tp=1", "mbs=1", "precision=fp16-mixed"])
        with open(path) as f:
            raw = json.load(f)
        self.assertNotIn("bf16", raw)
        self.assertEqual(raw["fp16"], {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                                       "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1})
        import deepspeed.runtime.config as dsc
        saved = dsc.dist.get_rank
        dsc.dist.get_rank = lambda *a, **k: 0
        class Mpu:  # 16 GPUs, tp 1: 16 data-parallel ranks (global batch 32 = mbs 1 x accum 2 x 16)
            def get_data_parallel_world_size(self):
                return 16

        try:
            cfg = dsc.DeepSpeedConfig(raw, mpu=Mpu())
        finally:
            dsc.dist.get_rank = saved
        f16 = cfg.float16_config
        self.assertTrue(f16.enabled)
        self.assertFalse(cfg.bfloat16_config.enabled)
        self.assertEqual(f16.loss_scale, 0)  # dynamic
        # DeepSpeed's own defaults (deepspeed/runtime/constants.py FP16_*_DEFAULT), which the emitter writes out.
        import deepspeed.runtime.constants as C
        self.assertEqual(f16.initial_scale_power, C.FP16_INITIAL_SCALE_POWER_DEFAULT)
        self.assertEqual(f16.loss_scale_window, C.FP16_LOSS_SCALE_WINDOW_DEFAULT)
        self.assertEqual(f16.hysteresis, C.FP16_HYSTERESIS_DEFAULT)
        self.assertEqual(f16.min_loss_scale, C.FP16_MIN_LOSS_SCALE_DEFAULT)
        self.assertEqual(f16.initial_dynamic_scale(), 65536)  # 2 ** initial_scale_power

    def test_torchtitan_refuses_fp16(self):
        r, _ = common.run_plan("torchtitan", ["runtime=fsdp2", "zero=3", "tp=1", "mbs=1", "precision=fp16-mixed"])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("torchtitan 0.3.0 has no fp16", r.stderr)


if __name__ == "__main__":
    unittest.main()

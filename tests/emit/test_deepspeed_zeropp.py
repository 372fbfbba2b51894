"""ZeRO++ as the deepspeed emitter writes it (docs/model.md "ZeRO++"): a plan pinned to hpZ, qwZ and qgZ emits
zero_hpz_partition_size, zero_quantized_weights and zero_quantized_gradients, and the installed DeepSpeed's
own config class (DeepSpeedConfig) reads them back; a MiCS-style --shard-group is refused (DeepSpeed 0.19.8
removed MiCS, its mics_shard_size key now raises DeepSpeedConfigError)."""
import json
import unittest

import common


class DeepSpeedZeroppTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        common.require_framework_python(__name__)
        import deepspeed.runtime.config as dsc  # noqa: E402
        cls.dsc = dsc

    def load(self, raw):
        """DeepSpeedConfig with 16 data-parallel ranks (16 GPUs, tp 1: the world it checks the batch against),
        dist.get_rank answered without a process group."""
        dsc = self.dsc

        class Mpu:
            def get_data_parallel_world_size(self):
                return 16

        saved = dsc.dist.get_rank
        dsc.dist.get_rank = lambda *a, **k: 0
        try:
            return dsc.DeepSpeedConfig(raw, mpu=Mpu())
        finally:
            dsc.dist.get_rank = saved

    def test_hpz_qwz_qgz_reach_deepspeed(self):
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=3", "tp=1", "mbs=1", "hpz_partition=8",
                                            "quantized_weights=true", "quantized_gradients=true"])
        with open(path) as f:
            raw = json.load(f)
        z = raw["zero_optimization"]
        self.assertEqual(z["zero_hpz_partition_size"], 8)
        self.assertIs(z["zero_quantized_weights"], True)
        self.assertIs(z["zero_quantized_gradients"], True)
        self.assertIs(z["reduce_scatter"], True)  # stage3.py asserts it with quantized gradients
        zc = self.load(raw).zero_config
        self.assertEqual(zc.zero_hpz_partition_size, 8)
        self.assertTrue(zc.zero_quantized_weights)
        self.assertTrue(zc.zero_quantized_gradients)

    def test_plain_zero3_writes_no_zeropp_keys(self):
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=3", "tp=1", "mbs=1"])
        with open(path) as f:
            z = json.load(f)["zero_optimization"]
        for k in ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients"):
            self.assertNotIn(k, z)

    def test_mics_is_removed_in_deepspeed_and_refused(self):
        # DeepSpeed itself rejects the MiCS key ...
        with self.assertRaises(self.dsc.DeepSpeedConfigError):
            self.load({"train_batch_size": 16, "zero_optimization": {"stage": 3, "mics_shard_size": 8}})
        # ... and the planner refuses a deepspeed shard group, naming hpZ instead.
        r, _ = common.run_plan("deepspeed", ["runtime=deepspeed", "zero=3", "tp=1", "mbs=1", "shard_group=8"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--hpz-partition", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()

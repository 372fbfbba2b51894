"""The emitted ds_config is accepted by the installed DeepSpeed's own config class (DeepSpeedConfig) with the
data-parallel world size of the plan, and says what was simulated (stage, TP, offload, precision, buckets)."""
import json
import unittest

import common


def load_json(path):
    with open(path) as f:
        return json.load(f)


class DeepSpeedConfigTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        common.require_framework_python(__name__)
        import deepspeed.runtime.config as dsc  # noqa: E402
        cls.dsc = dsc

    def load(self, path, dp_world):
        """DeepSpeedConfig with a model-parallel unit whose data-parallel world is `dp_world` (what
        deepspeed.initialize passes for AutoTP); dist.get_rank is answered without a process group."""
        dsc = self.dsc

        class Mpu:
            def get_data_parallel_world_size(self):
                return dp_world

        saved = dsc.dist.get_rank
        dsc.dist.get_rank = lambda *a, **k: 0
        try:
            # DeepSpeedConfig reads the file itself; the dict is the file's content (the path form leaves the file
            # open, a ResourceWarning).
            return dsc.DeepSpeedConfig(load_json(path), mpu=Mpu())
        finally:
            dsc.dist.get_rank = saved

    def test_zero3_tp2_offload_params(self):
        # 16 GPUs, tp 2 -> 8 data-parallel ranks; global batch 32 = mbs 1 x accum 4 x 8.
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=3", "tp=2", "mbs=1", "offload=params"])
        raw = load_json(path)
        self.assertEqual(raw["tensor_parallel"]["autotp_size"], 2)
        cfg = self.load(path, 8)
        self.assertEqual(cfg.train_batch_size, 32)
        self.assertEqual(cfg.train_micro_batch_size_per_gpu, 1)
        self.assertEqual(cfg.gradient_accumulation_steps, 4)
        self.assertEqual(cfg.zero_optimization_stage, 3)
        self.assertEqual(cfg.tensor_parallel_config.autotp_size, 2)
        zc = cfg.zero_config
        self.assertEqual(str(zc.offload_param.device), "cpu")
        self.assertEqual(str(zc.offload_optimizer.device), "cpu")
        self.assertEqual(zc.reduce_bucket_size, 500000000)  # simulator/cost/constants.hpp kDeepSpeedReduceBucketElems
        self.assertEqual(zc.prefetch_bucket_size, 50000000)
        self.assertEqual(zc.param_persistence_threshold, 100000)
        self.assertTrue(cfg.bfloat16_config.enabled)
        # With a wrong data-parallel world (TP ignored: 16 ranks) DeepSpeed's own batch assertion fails.
        with self.assertRaises(AssertionError):
            self.load(path, 16)

    def test_zero1_offload_optimizer_no_tp(self):
        # tp 1 -> 16 data-parallel ranks; 32 = mbs 2 x accum 1 x 16.
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=1", "tp=1", "mbs=2", "offload=optimizer"])
        raw = load_json(path)
        self.assertNotIn("tensor_parallel", raw)
        self.assertNotIn("offload_param", raw["zero_optimization"])
        cfg = self.load(path, 16)
        self.assertEqual(cfg.train_batch_size, 32)
        self.assertEqual(cfg.gradient_accumulation_steps, 1)
        self.assertEqual(cfg.zero_optimization_stage, 1)
        self.assertEqual(str(cfg.zero_config.offload_optimizer.device), "cpu")
        self.assertFalse(cfg.zero_config.overlap_comm)  # DeepSpeed's default below stage 3, as simulated

    def test_activation_offload_is_cpu_checkpointing(self):
        # --activation-offload all under full AC: activation_checkpointing.cpu_checkpointing, which DeepSpeed's
        # own config class reads back.
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=3", "tp=1", "mbs=1", "ac=full",
                                            "activation_offload=all"])
        self.assertTrue(load_json(path)["activation_checkpointing"]["cpu_checkpointing"])
        self.assertTrue(self.load(path, 16).activation_checkpointing_config.cpu_checkpointing)
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=3", "tp=1", "mbs=1", "ac=full"])
        self.assertFalse(load_json(path)["activation_checkpointing"]["cpu_checkpointing"])

    def test_zero0_has_no_offload_and_fp32(self):
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=0", "tp=1", "mbs=1", "precision=fp32"],
                              model="gpt2-xl")
        raw = load_json(path)
        self.assertEqual(raw["zero_optimization"]["stage"], 0)
        self.assertNotIn("offload_optimizer", raw["zero_optimization"])
        self.assertNotIn("bf16", raw)
        cfg = self.load(path, 16)
        self.assertEqual(cfg.train_batch_size, 32)
        self.assertFalse(cfg.bfloat16_config.enabled)

    def test_zero2_bf16_true_keeps_bf16_master_and_moments(self):
        # --precision bf16-true: 2 + 2 + 4 bytes/param (simulator/cost/constants.cpp), i.e. no fp32 master and bf16
        # Adam moments: DeepSpeed's bf16_master_weights_and_grads + bf16_optimizer_states.
        path, _ = common.emit("deepspeed", ["runtime=deepspeed", "zero=2", "tp=1", "mbs=1", "precision=bf16-true"])
        cfg = self.load(path, 16)
        self.assertTrue(cfg.bfloat16_config.bf16_master_weights_and_grads)
        self.assertTrue(cfg.bfloat16_config.bf16_optimizer_states)
        self.assertEqual(cfg.gradient_accumulation_steps, 2)  # 32 / (1 x 16)


if __name__ == "__main__":
    unittest.main()

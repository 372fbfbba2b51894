"""Activation offload in the reference lane (tools/reference/lane/offload.py): the tiny Llama of test_reference.py
on 8 fake ranks (FSDP2, bf16-mixed, no AC) with its forward under save_on_cpu's hooks, against shardplan's
--activation-offload all (docs/model.md "Activation offload").

What save_on_cpu packs is autograd's choice, and the lane counts it pack by pack: the weights the matmuls and norms
save (under FSDP2 the unsharded bf16 parameters) are packed with the activations, which shardplan's
SimUnit::saved_weight_bytes says; a tensor saved by k ops is packed k times (ActTensor::packs) and the tensors saved
that are no activation (the rotary table, the token ids: ActTensor::pack_only) are packed too, which
SimUnit::repacked_act_bytes says; the GPU peak follows the tensors that leave and come back. What remains is named
exactly: SDPA's RNG state, 24 B per call, not per token.
"""
import json
import os
import subprocess
import tempfile
import unittest

from lane_env import SHARDPLAN
from test_reference import TINY, TINY_PARAMS, run_ref

TOKENS = TINY["seq"]  # mbs 1


class ActivationOffloadLaneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.record, _ = run_ref(cls.tmp.name, "--activation-offload", "all", trace=False)
        notes = cls.record["notes"]
        words = notes[notes.index("save_on_cpu packed"):].split()
        cls.host, cls.weights = int(words[2]), int(words[9])
        spec = os.path.join(cls.tmp.name, "tiny.json")
        p = subprocess.run([SHARDPLAN, "memory", "--model", spec, "--cluster", "dgx-h100", "--gpus", "8",
                            "--mbs", "1", "--seq", str(TOKENS), "--global-batch", "8", "--ac", "none",
                            "--activation-offload", "all", "--json", "-"], capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.memory = json.loads(p.stdout)["memory"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_record_names_the_plan(self):
        self.assertEqual(self.record["plan"]["activation_offload"], "all")
        self.assertTrue(self.record["id"].endswith("-activation-offload-all"))

    def test_the_packed_weights_are_every_parameter_but_the_embedding(self):
        # Every weight but the embedding's (embedding saves its indices): 106,816 - 256 x 64 = 90,432 bf16
        # values, whatever the sharding (the unsharded parameters are what the forward's ops save).
        self.assertEqual(self.weights, (TINY_PARAMS - TINY["vocab"] * TINY["hidden"]) * 2)
        self.assertEqual(self.weights, 180864)

    def test_host_bytes_differ_only_by_sdpa_rng_state(self):
        # One micro-batch's packs less shardplan's activation_host_bytes. shardplan counts every pack: per block
        # the attention norm's output by wq, wk and wv (packs 3), SDPA's output by SDPA and wo (2), the MLP norm's
        # output by w1 and w3 (2), the rotary table (complex64 [T, head_dim / 2], a buffer) by the q and k products
        # (2 x T x 8 x 8 B), and the embedding's int64 indices (T x 8 B): before those were counted the gap was
        # layers x (4 x T x h x 2 + 2 x T x (head_dim / 2) x 8 + 24) + T x 8 = 41,264 B. What remains: the flash
        # op's rng_state (uint64 [2]) and unused (uint64 []) outputs, which its backward saves (torch 2.15
        # derivatives.yaml _scaled_dot_product_flash_attention), 24 B per SDPA call whatever the tokens.
        self.assertEqual(self.host - self.memory["activation_host_bytes"], TINY["layers"] * 24)

    def test_peak_within_3_percent(self):
        predicted, measured = self.memory["peak_bytes"], self.record["measured"]["peak_allocated_bytes"]
        self.assertLess(abs(predicted - measured) / measured, 0.03, (predicted, measured))


if __name__ == "__main__":
    unittest.main()

"""The real losses' buffers against the loss layer's tensor lists (tools/reference/loss_tensors.py; the same
closed forms as tests/simulator/test_loss_tensors.cpp, in bytes per T x V element: bf16 logits, fp32 loss).

Run with the project's Python environment from the repo root:
  $(bash tools/pyenv.sh) -m unittest discover -s tests/reference -p 'test_loss_tensors.py'
SHARDPLAN_MEGATRON_CE names Megatron-LM's megatron/core/tensor_parallel/cross_entropy.py to check its kernel too.
"""
import json
import os
import subprocess
import sys
import unittest

from lane_env import ROOT

SCRIPT = os.path.join(ROOT, "tools", "reference", "loss_tensors.py")


class LossTensors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        args = [sys.executable, SCRIPT, "--sizes", "64:1000,128:4096"]
        if os.environ.get("SHARDPLAN_MEGATRON_CE"):
            args += ["--megatron", os.environ["SHARDPLAN_MEGATRON_CE"]]
        cls.out = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)

    def check(self, name, fwd, bwd, saved, allocs):
        for row in self.out[name]:
            with self.subTest(loss=name, T=row["T"], V=row["V"]):
                self.assertEqual(row["peaks_TV"]["loss_forward"], fwd)
                self.assertEqual(row["peaks_TV"]["loss_backward"], bwd)
                self.assertEqual(row["saved_TV"], saved)
                self.assertEqual([a.split(":", 1)[1] for a in row["allocs"]], allocs)

    # LossKernel::kEager: logits (2), .float() (4), log_softmax saved (4) -> 10; backward nll_loss's and
    # log_softmax's gradients (4 + 4) with the saved output -> 12; the cast (2) for the head.
    EAGER = ["mm.default:bfloat16:2", "_to_copy.default:float32:4", "_log_softmax.default:float32:4",
             "nll_loss_backward.default:float32:4", "_log_softmax_backward_data.default:float32:4",
             "_to_copy.default:bfloat16:2"]

    def test_torchtitan_eager(self):
        self.check("torchtitan_eager", 10, 12, [4.0], self.EAGER)

    def test_hf_for_causal_lm(self):
        self.check("hf_for_causal_lm", 10, 12, [4.0], self.EAGER)

    def test_megatron(self):
        # LossKernel::kMegatron: logits (2) + one fp32 copy made the softmax in place (4) -> 6; backward the
        # gradient in its storage and the bf16 cast (2) -> 6.
        if "megatron" not in self.out:
            self.skipTest("SHARDPLAN_MEGATRON_CE not set")
        self.check("megatron", 6, 6, [4.0], ["mm.default:bfloat16:2", "_to_copy.default:float32:4",
                                             "_to_copy.default:bfloat16:2"])


if __name__ == "__main__":
    unittest.main()

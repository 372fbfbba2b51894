"""DeepSpeed 0.19.8's MoE layer with a capacity factor (tools/reference/deepspeed_moe_capacity.py: TopKGate,
MOELayer and Experts forward and backward on CPU tensors, ep_size 1) against shardplan's expert capacity
(docs/model.md "Capacity factor"; shardplan's is Megatron-core's get_capacity, run with --runtime megatron
--moe-pad-to-capacity): the capacity, the rows the experts run (DeepSpeed always pads every expert's slot to C),
their independence of the routing, and the absence of the dense [S, E, C] tensors in 0.19.8.

Needs the project's Python environment (tools/pyenv.sh pins deepspeed); outside CI it skips when deepspeed is
not importable, in CI (CI=true) its absence is a failure. About 30 s on 2 cores.
  SHARDPLAN_BIN=build/planner/shardplan $(bash tools/pyenv.sh) -m unittest discover -s tests/reference \
    -p 'test_deepspeed_moe_capacity.py'
"""
import json
import math
import os
import subprocess
import sys
import unittest

from lane_env import ROOT, SHARDPLAN, have

SCRIPT = os.path.join(ROOT, "tools", "reference", "deepspeed_moe_capacity.py")
HAVE_DS = have("deepspeed")

S, E, K = 64, 8, 2


def run(*args):
    r = subprocess.run([sys.executable, SCRIPT, "--shardplan", SHARDPLAN, *args], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise AssertionError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


@unittest.skipUnless(HAVE_DS, "deepspeed is not importable (tools/pyenv.sh pins it)")
class DeepSpeedMoeCapacity(unittest.TestCase):
    def test_capacity_and_rows(self):
        # S = 64 tokens, top-2 of 8 experts: 128 routed rows, 16 per expert. DeepSpeed's _capacity (topkgating
        # passes capacity_factor x k): ceil(S / E x F x k), at least min_capacity 4; shardplan's (Megatron-core
        # get_capacity): ceil(S x k / E x F). F 1.25 -> 20, F 1 -> 16, F 2 -> 32, F 0.5 -> 8: the same
        # capacities, and the experts run E x C rows in both (DeepSpeed pads every slot; shardplan padded).
        for factor in (0.5, 1.0, 1.25, 2.0):
            with self.subTest(factor=factor):
                out = run("--factor", repr(factor))
                ds, sp = out["deepspeed"], out["shardplan"]
                expected = math.ceil(S * K / E * factor)
                self.assertEqual(ds["capacity"], expected)
                self.assertEqual(sp["capacity"], expected)
                self.assertEqual(ds["expert_input_shape"], [1, E, expected, 32])
                self.assertEqual(ds["expert_rows"], E * expected)
                self.assertEqual(sp["busiest_rows"], ds["expert_rows"])
                # 0.19.8's MOELayer asks the gate for sparse routes: no [S, E, C] combine weights or mask.
                self.assertFalse(ds["dense_sec_saved"])

    def test_rows_do_not_follow_the_routing(self):
        # Every token's first choice is expert 0 (64 of the 128 routed rows, 4 x the mean of 16): the experts
        # still run E x C = 8 x 20 = 160 rows, as shardplan's padded capacity at any --moe-imbalance.
        out = run("--factor", "1.25", "--skew")
        ds = out["deepspeed"]
        self.assertEqual(ds["busiest_expert_routed"], S)
        self.assertEqual(ds["expert_rows"], 160)
        self.assertEqual(out["shardplan"]["busiest_rows"], 160)

    def test_min_capacity(self):
        # F 0.25 on 32 tokens: ceil(32 / 8 x 0.25 x 2) = 2 < min_capacity 4, so DeepSpeed's capacity is 4 where
        # Megatron-core's (no minimum) is 2: shardplan, modelling Megatron-core, gives 2.
        out = run("--factor", "0.25", "--tokens", "32")
        self.assertEqual(out["deepspeed"]["capacity"], 4)
        self.assertEqual(out["shardplan"]["capacity"], 2)


if __name__ == "__main__":
    unittest.main()

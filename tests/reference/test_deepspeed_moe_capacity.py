"""DeepSpeed 0.19.8's MoE layer with a capacity factor (tools/reference/deepspeed_moe_capacity.py: TopKGate,
MOELayer and Experts forward and backward on CPU tensors, ep_size 1) against shardplan's expert capacity
(docs/model.md "Capacity factor"; shardplan's is Megatron-core's get_capacity, run with --runtime megatron
--moe-pad-to-capacity): the capacity, the rows the experts run (DeepSpeed always pads every expert's slot to C),
their independence of the routing, and the absence of the dense [S, E, C] tensors in 0.19.8; and every tensor the
real layer saves against shardplan's --moe-impl deepspeed list (--saved).

Needs the project's Python environment (tools/pyenv.sh pins deepspeed); outside CI it skips when deepspeed is
not importable, in CI (CI=true) its absence is a failure. About 90 s on 2 cores.
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
        # Megatron-core's (no minimum) is 2: shardplan's Megatron-core capacity gives 2, its --moe-impl deepspeed
        # 4 x 8 experts = 32 rows, the real layer's.
        out = run("--factor", "0.25", "--tokens", "32", "--saved")
        self.assertEqual(out["deepspeed"]["capacity"], 4)
        self.assertEqual(out["shardplan"]["capacity"], 2)
        self.assertEqual(out["listed"]["busiest_rows"], out["deepspeed"]["expert_rows"])
        self.assertEqual(out["listed"]["busiest_rows"], 32)

    def test_saved_bytes_of_the_layer(self):
        # --moe-impl deepspeed's list against every storage the real bf16 layer saves and its backward reads
        # (SwiGLU experts, h 32, f 48, E 8, S 64, l_aux in the loss), for each of the gate's branches (k 1:
        # top1gating, 2: top2gating, 3: topkgating) and capacities below, at and above the routed rows. The
        # list has per-token and per-capacity-row sizes; the layer also saves three of a fixed size per layer,
        # which it leaves out: the gate weight's fp32 copy (`self.wg.weight.float()`, E x h x 4 = 1,024 B),
        # l_aux's mean gates (E x 4 = 32 B) and the slot map's pad slot (`source` has E x C + 1 int64: 8 B).
        # Exact beyond those (1,064 B of 49,448 at k 1, 84,520 at k 2, 120,104 at k 3, F 1).
        per_layer = E * 32 * 4 + E * 4 + 8
        for k, factor in ((1, 1.0), (2, 0.5), (2, 1.0), (2, 1.25), (3, 1.0)):
            with self.subTest(k=k, factor=factor):
                out = run("--factor", repr(factor), "--top-k", str(k), "--saved")
                ds, listed = out["deepspeed"], out["listed"]
                self.assertEqual(listed["busiest_rows"], ds["expert_rows"])
                self.assertEqual(out["saved"]["bytes"], listed["bytes"] + per_layer, out["saved"]["tensors"])


if __name__ == "__main__":
    unittest.main()

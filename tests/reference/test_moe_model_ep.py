"""Whole torchtitan 0.3.0 MoE models with expert parallelism and FSDP2 on gloo (tools/reference/moe_model_ep.py):
qwen3 MoE and deepseek_v3 at tiny sizes, world 2 (EP 2) and qwen3 at world 4 (EP 2, the experts FSDP-sharded over
efsdp 2), one real training step per rank, against `shardplan memory` of the same spec and plan.

Needs the project's Python environment (tools/pyenv.sh pins torch and torchtitan); outside CI it skips when
torchtitan is not importable, in CI (CI=true) its absence is a failure. About 60 s on 2 cores.
  SHARDPLAN_BIN=build/planner/shardplan $(bash tools/pyenv.sh) -m unittest discover -s tests/reference \
    -p 'test_moe_model_ep.py'

Tiny architectures (tools/reference/lane/titan_moe.py): T = 64 tokens (mbs 1, seq 64), hidden 64, 8 experts of
32, top-2. qwen3: 2 MoE blocks, 4 heads / 2 KV heads of 16 (torchtitan's fused wqkv, q/k norms), route_norm.
deepseek_v3: 3 blocks (the first dense, FFN 128), MLA with 4 heads (nope 16, rope 8, v 24, kv rank 32, no q
rank), one shared expert. Every allocation counts rounded up to 512 B (the lane's tracker and shardplan alike).
"""
import json
import os
import subprocess
import sys
import unittest

from lane_env import ROOT, SHARDPLAN, have

SCRIPT = os.path.join(ROOT, "tools", "reference", "moe_model_ep.py")

HAVE_TITAN = have("torchtitan")

T, K = 64, 2
RUNS = {"qwen3": ("qwen3", 2, 2), "deepseek_v3": ("deepseek_v3", 2, 2), "qwen3-w4": ("qwen3", 4, 2)}


def run(model, world, ep):
    r = subprocess.run([sys.executable, SCRIPT, "--model", model, "--world", str(world), "--ep", str(ep),
                        "--shardplan", SHARDPLAN], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(r.stderr[-3000:])
    return json.loads(r.stdout)


@unittest.skipUnless(HAVE_TITAN, "torchtitan is not importable (tools/pyenv.sh pins it)")
class MoeModelExpertParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = {name: run(*args) for name, args in RUNS.items()}

    def test_router_counts(self):
        # Every rank routes its T tokens to K experts in every MoE layer: T·K = 128 (token, choice) pairs; the EP
        # group's ep ranks together receive ep·T·K of them.
        for name, o in self.out.items():
            for r in o["ranks"]:
                for counts in r["router_counts"].values():
                    self.assertEqual(sum(counts), T * K, name)
            for rows in o["received_rows"].values():
                for g in range(0, o["world"], o["ep"]):
                    self.assertEqual(sum(rows[g:g + o["ep"]]), o["ep"] * T * K, name)

    def test_persistent_params_optimizer(self):
        # qwen3, world 2 (fp32 shards, each tensor rounded to 512 B): per block wqkv [128, 64]/2 -> 16384 B, wo
        # [64, 64]/2 -> 8192, q/k norms [16]/2 and the two block norms [64]/2 -> 512 each, router gate [8, 64]/2
        # -> 1024, the rank's 4 experts' three [32, 64] matrices unsharded (efsdp = fsdp/ep = 1) 98304: 125952;
        # embedding and head [256, 64]/2 32768 each, final norm 512: 2·125952 + 66048 = 317952. AdamW: two moments
        # per parameter (2·317952) and one step tensor (512 B) per parameter: torchtitan has 23 (10 per block + 3),
        # shardplan lists wq, wk, wv for torchtitan's one fused wqkv (27): measured 635904 + 11776 = 647680,
        # shardplan 4·512 more. World 4: every dense shard half as large, experts Shard(0) over efsdp 2.
        q2, d2, q4 = self.out["qwen3"], self.out["deepseek_v3"], self.out["qwen3-w4"]
        for r in q2["ranks"]:
            self.assertEqual(r["persistent"]["params"], 317952)
            self.assertEqual(r["persistent"]["optimizer"], 647680)
        self.assertEqual(q2["shardplan"]["persistent"]["params"], 317952)
        self.assertEqual(q2["shardplan"]["persistent"]["optimizer"], 647680 + 4 * 512)
        for r in q4["ranks"]:
            self.assertEqual(r["persistent"]["params"], q4["shardplan"]["persistent"]["params"])
            self.assertEqual(r["persistent"]["optimizer"] + 4 * 512, q4["shardplan"]["persistent"]["optimizer"])
        # deepseek_v3 (no fused projection): parameters and AdamW state exactly shardplan's.
        for r in d2["ranks"]:
            self.assertEqual(r["persistent"]["params"], d2["shardplan"]["persistent"]["params"])
            self.assertEqual(r["persistent"]["optimizer"], d2["shardplan"]["persistent"]["optimizer"])

    def test_persistent_grads(self):
        # FSDP2's sharded gradients are views of each parameter group's reduce-scatter output (one allocation per
        # group, rounded to 512 B); shardplan sums them unrounded. qwen3 world 2: per block the dense group
        # 25920 B (16384 + 8192 + 32 + 32 + 128 + 128 + 1024) -> 26112 and the experts' 98304; embedding 32768;
        # [norm, lm_head] 32896 -> 33280: 2·(26112 + 98304) + 66048 = 314880; shardplan 2·124224 + 65664 =
        # 314112. World 4: dense 12960 -> 13312, experts 49152, embedding 16384, [norm, lm_head] 16448 -> 16896:
        # 158208; shardplan 2·62112 + 32832 = 157056. deepseek_v3: dense block 0 (MLA 20000 + norms 128 + FFN
        # 24576 elements)/2·4 B = 89408 -> 89600; MoE blocks' dense group (20128 + gate 512 + shared expert 6144)
        # /2·4 = 53568 -> 53760 and experts 98304: 89600 + 2·(53760 + 98304) + 32768 + 33280 = 459776; shardplan
        # 89408 + 2·(53568 + 98304) + 32768 + 32896 = 458816.
        for name, measured, listed in (("qwen3", 314880, 314112), ("qwen3-w4", 158208, 157056),
                                       ("deepseek_v3", 459776, 458816)):
            o = self.out[name]
            for r in o["ranks"]:
                self.assertEqual(r["persistent"]["grads"], measured, name)
            self.assertEqual(o["shardplan"]["persistent"]["grads"], listed, name)

    def test_saved_per_block(self):
        # What each block saves at the end of the forward against shardplan's list at T tokens and the rank's
        # received rows (lane/moe_listed.py). Not in the list, each under 512 B raw: the grouped GEMMs' offsets
        # (E/ep int32) in every MoE block; qwen3's route_norm (`top_scores / (top_scores.sum(-1) + 1e-20)`) saves
        # the gathered top-k scores ([T, K], bf16 on the CPU) and the denominator ([T, 1]): qwen3 +3·512 = 1536
        # per block; deepseek_v3 (no route_norm) +512 per MoE block, its dense block exactly the list (MLA's
        # saved V being a view of wkv_b's whole output, as the list now has it).
        extra = {"qwen3": {"0": 1536, "1": 1536}, "qwen3-w4": {"0": 1536, "1": 1536},
                 "deepseek_v3": {"0": 0, "1": 512, "2": 512}}
        for name, o in self.out.items():
            for r in o["ranks"]:
                for block, listed in r["listed_per_block"].items():
                    self.assertEqual(r["saved_per_block"][block] - listed, extra[name][block], (name, block))

    def test_peak(self):
        # Peak allocated over the step, shardplan against the real step. The measured peak is in the first MoE
        # block's backward, at torchtitan's combine backward: the fp32 gradient of `routed_output.float() *
        # scores` and the multiply's two fp32 outputs (3·T·K·hidden·4 = 98304 B) and the scores' gradient (512),
        # beside the previous block's in-flight reduce-scatter inputs; shardplan's grouped MoE backward
        # (units_moe_backward.cpp) holds the same tensors at the same op, and its `other` holds torchtitan's RoPE
        # caches (one per attention module: qwen3 CosSinRoPE 64·32·4 = 8192 B, deepseek_v3 ComplexRoPE 64·4·8 =
        # 2048 B) and the MoE counters (tokens_per_expert, expert_bias: 512 B each per MoE block), 18432 and 8192
        # B, as measured. Measured on these runs (2026-12-05): qwen3 world 2 1673216 vs 1669504 (-0.2 %);
        # deepseek_v3 world 2 2495488 / 2486272 vs 2500288 (+0.2 / +0.6 %); qwen3 world 4 1121280..1131008 vs
        # 1120928 (-0.0..-0.9 %). Before the grouped backward and the buffers: -2.3, -2.7, -5.2 %. gloo is not
        # deterministic: deepseek_v3's rank 0 or 1 peaks at 2545152 / 2535936 B (-1.8 / -1.4 %) in about one
        # run of three (a block's reduce-scatter input, 107520 B, seen freed later; the peak moves to block 0's
        # backward all-gather), qwen3's rank 1 once 1.8 points below its usual row. Bound: 3 % (issue 30),
        # with at least 1.2 points of margin over every row seen.
        for name, o in self.out.items():
            predicted = o["shardplan"]["peak"]
            for r in o["ranks"]:
                err = predicted / r["peak"] - 1
                self.assertLessEqual(abs(err), 0.03, (name, r["rank"], err))

    def test_peak_by_category(self):
        # The peak's breakdown, category by category, where the two name the same bytes alike. The tracker
        # files the combine backward's fp32 transients and FSDP2's prefetch all-gather output as activations
        # (Temp: not a parameter, gradient or optimizer state when allocated); shardplan files the former as its
        # backward workspace (`other`, beside the RoPE caches and MoE counters) and the latter as gathered
        # parameters. So three groups are compared: the persistent state (params + grads + optimizer), the
        # reduce-scatter buffers (comm_buffers) and the step's transients (activations + gathered_params +
        # other). Measured W2 qwen3 rank 0 (2026-12-05): state 1123328 vs 1124800 (+0.1 %), comm 150528 vs
        # 150144 (-0.3 %), transients 399360 vs 394560 (-1.2 %). Bound: 3 % each (issue 30: per category).
        groups = {"state": ("params", "grads", "optimizer"), "comm": ("comm_buffers",),
                  "transients": ("activations", "gathered_params", "other")}
        for name, o in self.out.items():
            predicted = o["shardplan"]["at_peak"]
            for r in o["ranks"]:
                for group, cats in groups.items():
                    measured = sum(r["at_peak"][c] for c in cats)
                    listed = sum(predicted[c] for c in cats)
                    err = listed / measured - 1
                    self.assertLessEqual(abs(err), 0.03, (name, r["rank"], group, measured, listed))


if __name__ == "__main__":
    unittest.main()

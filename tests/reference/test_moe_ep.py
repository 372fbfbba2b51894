"""torchtitan 0.3.0's MoE layer with expert parallelism over gloo (tools/reference/moe_ep.py): two CPU processes,
real tensors, the variable-split all-to-all; per rank the persistent state, the router's counts and the saved
tensors against shardplan's MoE tensor list at the rank's received rows; the busiest rank's expert side against
shardplan run with --moe-imbalance at its measured rows over the mean.

Needs the project's Python environment (tools/pyenv.sh pins torch and torchtitan); outside CI it skips when
torchtitan is not importable, in CI (CI=true) its absence is a failure. About 40 s on 2 cores.
  SHARDPLAN_BIN=build/planner/shardplan $(bash tools/pyenv.sh) -m unittest discover -s tests/reference \
    -p 'test_moe_ep.py'
"""
import json
import os
import subprocess
import sys
import unittest

from lane_env import ROOT, SHARDPLAN, have

SCRIPT = os.path.join(ROOT, "tools", "reference", "moe_ep.py")

HAVE_TITAN = have("torchtitan")

T, D, F, E, K, W = 64, 32, 48, 8, 2, 2


@unittest.skipUnless(HAVE_TITAN, "torchtitan is not importable (tools/pyenv.sh pins it)")
class MoeExpertParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([sys.executable, SCRIPT, "--shardplan", SHARDPLAN, "--world", str(W)], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError(r.stderr[-3000:])
        cls.out = json.loads(r.stdout)

    def test_router_counts(self):
        # Every rank routes its T tokens to K experts each: the counts sum to T·K = 128 per rank; rank r's experts
        # (E/W = 4 of them) receive the sum of all ranks' counts for them, and all ranks together receive W·T·K.
        totals = self.out["tokens_per_expert_all_ranks"]
        for r in self.out["ranks"]:
            self.assertEqual(sum(r["tokens_per_expert"]), T * K)
        self.assertEqual([r["received_rows"] for r in self.out["ranks"]],
                         [sum(totals[i * E // W:(i + 1) * E // W]) for i in range(W)])
        self.assertEqual(sum(r["received_rows"] for r in self.out["ranks"]), W * T * K)

    def test_persistent_state(self):
        # bf16 parameters: the router gate E·D = 256 (replicated) plus the rank's E/W = 4 experts' three matrices
        # 3·4·F·D = 18432: (256 + 18432)·2 = 37376 bytes; gradients alike; AdamW's two moments in the parameters'
        # dtype: 2·37376 = 74752.
        for r in self.out["ranks"]:
            self.assertEqual(r["params"], 37376)
            self.assertEqual(r["grads"], 37376)
            self.assertEqual(r["adam_state"], 74752)

    def test_saved_tensors(self):
        # shardplan's list (CPU dtypes, tools/reference/moe_tensors.py) at T tokens on the token side and R received
        # rows on the expert side: token side 16 + 16 + 16 + 4 + 16 + 256 = 324 B/token · 64 = 20736; expert side
        # (128 + 4·192)/K = 448 B/row plus, under EP, _permute's permuted_indices (token_dispatcher.py
        # AllToAllTokenDispatcher._permute; int64, one per received row, saved by the rank-major -> expert-major
        # index and by _unpermute's index_put; `only: moe_ep` in the list): 456 B/row. Measured = listed + the
        # grouped GEMMs' offsets (E/W int32 = 16 B, per layer, not per token), which the list leaves out.
        for r in self.out["ranks"]:
            rows = r["received_rows"]
            self.assertEqual(r["listed_bytes"], 20736 + 456 * rows)
            self.assertEqual(r["saved_bytes"], r["listed_bytes"] + E // W * 4)
            self.assertIn([8 * rows, [rows], "int64"], r["saved"])

    def test_busiest_rank_with_imbalance(self):
        # shardplan run with --moe-imbalance F = R / (T·K), R the busiest rank's received rows (133 at W 2 on the
        # seeds here): its experts receive ceil(F·T·K) = R rows, and the expert side it saves (routed input 2·D,
        # _permute's index 8, the grouped GEMMs' w1 and w3 outputs, SiLU and product 4·2·F: 456 B per row) is
        # what the real rank's saved storages with R rows hold, to the byte. At F = 1 (the balanced mean,
        # 128 rows) it is 456·(R - 128) short: 2.8 % of the rank's saved bytes at W 2.
        b = self.out["busiest"]
        rows = b["received_rows"]
        self.assertEqual(rows, max(r["received_rows"] for r in self.out["ranks"]))
        self.assertGreater(rows, T * K)
        self.assertEqual(b["measured_expert_side_bytes"], 456 * rows)
        self.assertEqual(b["shardplan_rows"], rows)
        self.assertEqual(b["shardplan_expert_side_bytes"], b["measured_expert_side_bytes"])
        self.assertEqual(b["shardplan_balanced_rows"], T * K)
        self.assertEqual(b["shardplan_balanced_expert_side_bytes"], 456 * T * K)

    def test_peak_bound(self):
        # At the end of the forward the parameters, the input (T·D bf16 = 4096 B) and every saved tensor are live:
        # the peak of live storages over forward and backward is at least their sum (recorded, not compared with
        # shardplan: the layer alone is not a plan, and the CPU has no caching allocator).
        for r in self.out["ranks"]:
            self.assertGreaterEqual(r["peak_fwd_bwd"], r["params"] + T * D * 2 + r["saved_bytes"])


if __name__ == "__main__":
    unittest.main()

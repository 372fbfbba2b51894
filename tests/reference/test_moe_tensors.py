"""torchtitan 0.3.0's MoE layer on CPU tensors against the MoE layer's tensor list shardplan builds for the same
dimensions (tools/reference/moe_tensors.py): the saved bytes per token agree exactly, eager and compiled.

Run from the repo root with the project's Python environment and a built binary:
  SHARDPLAN_BIN=build/planner/shardplan $(bash tools/pyenv.sh) -m unittest discover -s tests/reference \
    -p 'test_moe_tensors.py'
"""
import json
import os
import subprocess
import sys
import unittest

from lane_env import ROOT, SHARDPLAN

SCRIPT = os.path.join(ROOT, "tools", "reference", "moe_tensors.py")


class MoeTensors(unittest.TestCase):
    def run_case(self, *args):
        r = subprocess.run([sys.executable, SCRIPT, "--shardplan", SHARDPLAN, *args], capture_output=True, text=True)
        out = json.loads(r.stdout)
        self.assertEqual(out["listed_bytes_per_token"], out["measured_bytes_per_token"], r.stdout)
        return out

    def test_eager(self):
        # T 64, h 32, f 48, 8 experts, top 2 (CPU: router scores bf16): router.probs 2·8, three int64 index
        # tensors 3·8·2, sorted scores 2·2, routed input 2·2·32, four expert tensors 4·2·2·48, the combine's
        # fp32 copy 4·2·32 = 16 + 48 + 4 + 128 + 768 + 256 = 1220 bytes per token.
        self.assertEqual(self.run_case()["measured_bytes_per_token"], 1220)

    def test_eager_top1(self):
        self.run_case("--tokens", "128", "--hidden", "64", "--ffn", "32", "--experts", "4", "--top-k", "1")

    def test_lane_loop(self):
        # The lane's SparseMoe (Hugging Face's loop) against --moe-impl loop: router scores fp32 (4·8), top-k ids
        # and the expert-ordered pairs (2·8·2), the weights and their sum (4·2 + 4), the experts' token indices
        # (8·2), inputs, down outputs and products (3·2·2·32), SwiGLU tensors (4·2·2·48), gathered weights (2·2):
        # 32 + 32 + 12 + 16 + 384 + 768 + 4 = 1248 bytes per token.
        self.assertEqual(self.run_case("--lane")["measured_bytes_per_token"], 1248)

    def test_compiled(self):
        # Inductor saves the experts' bf16 output (2·2·32) instead of the fp32 copy and recomputes SiLU:
        # 1220 - 256 + 128 - 192 = 900.
        self.assertEqual(self.run_case("--compile")["measured_bytes_per_token"], 900)


if __name__ == "__main__":
    unittest.main()

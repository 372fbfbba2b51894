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

    def test_eager_packs(self):
        # What save_on_cpu copies, pack by pack (ActTensor::packs, pack_only): the input 2·32 (the router's gate
        # alone), router.probs 2 packs of 2·8 (softmax, gather), top-k ids 2 of 8·2 (topk, gather), argsort 8·2,
        # sorted scores 2·2, token indices 8·2 and their expanded view at 8·2·32 (deterministic_scatter_add), the
        # routed input 2 of 2·2·32 (w1's and w3's grouped mm), four expert tensors 4·2·2·48, the fp32 copy
        # 4·2·32: 64 + 32 + 32 + 16 + 4 + 16 + 512 + 256 + 768 + 256 = 1956 bytes per token (the three grouped
        # GEMMs' int32 expert offsets, per layer, left out).
        self.assertEqual(self.run_case("--packs")["measured_bytes_per_token"], 1956)

    def test_lane_loop_packs(self):
        # The loop's packs: test_lane_loop's 1248 less the input-free count, plus the input 64 (the gate), the
        # top-k ids once (topk), each expert's token indices twice (gather, index_add_: +16) and gathered input
        # twice (w1, w3: +128): 1248 + 64 + 16 + 128 = 1456.
        self.assertEqual(self.run_case("--lane", "--packs")["measured_bytes_per_token"], 1456)

    def test_compiled(self):
        # Inductor saves the experts' bf16 output (2·2·32) instead of the fp32 copy and recomputes SiLU:
        # 1220 - 256 + 128 - 192 = 900.
        self.assertEqual(self.run_case("--compile")["measured_bytes_per_token"], 900)


if __name__ == "__main__":
    unittest.main()

"""torchtitan 0.3.0's ChunkedLossWrapper on the CPU (tools/reference/chunked_loss.py: a real llama3 debugmodel's
final norm and lm_head under FSDP2 on a one-rank gloo group, every storage the loss call makes recorded) against
the closed form of the loss layer's chunked list (simulator/model/chunked_loss_tensors.cpp; the same formula as
tests/simulator/test_chunked_loss.cpp): the loss call's peak within 3 %.

Run with the project's Python environment from the repo root:
  $(bash tools/pyenv.sh) -m unittest discover -s tests/reference -p 'test_chunked_loss.py'
Outside CI it skips when torch or torchtitan is not importable; in CI (CI=true) their absence is a failure.
"""
import json
import os
import subprocess
import sys
import unittest

from lane_env import ROOT, have

SCRIPT = os.path.join(ROOT, "tools", "reference", "chunked_loss.py")

HAVE_TITAN = have("torch", "torchtitan")

# (B, L, N): one sequence in 4 chunks, two sequences (the chunks' contiguous copies) in 8, a single chunk
# (no held gradient), four sequences in 2.
CASES = "1:1024:4,2:512:8,1:512:1,4:256:2"


@unittest.skipUnless(HAVE_TITAN, "torch / torchtitan not importable (tools/pyenv.sh)")
class ChunkedLoss(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        run = subprocess.run([sys.executable, SCRIPT, "--cases", CASES], check=True, capture_output=True,
                             text=True)
        cls.rows = json.loads(run.stdout)

    def test_peak_within_3_percent(self):
        self.assertEqual(len(self.rows), 4)
        for r in self.rows:
            with self.subTest(B=r["B"], L=r["L"], N=r["N"]):
                want = r["closed_form"]["peak"]
                self.assertLessEqual(abs(r["peak_bytes"] - want), 0.03 * want, r)

    def test_assembled_gradient_outlives_the_call(self):
        # The bf16 T x D gradient of h is alive at return (saved for the decoder's backward).
        for r in self.rows:
            with self.subTest(B=r["B"], L=r["L"], N=r["N"]):
                self.assertGreaterEqual(r["after_bytes"], r["closed_form"]["after"])

    def test_which_term_peaks(self):
        # (1, 1024, 4), V = 2,048, D = 256: op 5 peaks, 4 T D + G + 14 Tc V = 1,048,576 + 2,097,152 +
        # 14 x 524,288 = 10,485,760 bytes; (2, 512, 8): AccumulateGrad's upcast (op 8) peaks over op 5.
        by = {(r["B"], r["L"], r["N"]): r for r in self.rows}
        self.assertEqual(by[(1, 1024, 4)]["closed_form"]["peak"], 10485760)
        self.assertEqual(by[(2, 512, 8)]["closed_form"]["peak"],
                         2 * 1024 * 256 + 4 * 1024 * 256 + 2 * 4 * 2048 * 256 + 2 * 128 * 2048 + 2 * 128 * 256 +
                         2 * 2048 * 256)


if __name__ == "__main__":
    unittest.main()

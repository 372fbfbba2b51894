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

from lane_env import ROOT, SHARDPLAN, have

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

    def test_reduce_scatter_buffers_outlive_the_call(self):
        # FSDP2 still holds the last chunk's fp32 reduce-scatter input (reduce_scatter_states, released by the
        # next post-backward) and its output is lm_head's sharded gradient: R V D (1 + 1/shard) = 4 x 2,048 x
        # 256 x 2 = 4,194,304 B alive at return, beside the assembled gradient of h (1 x 1,024: 2 T D =
        # 524,288 B; 4,718,592 B in all).
        for r in self.rows:
            with self.subTest(B=r["B"], L=r["L"], N=r["N"]):
                self.assertGreaterEqual(r["after_bytes"], r["closed_form"]["held_after"])
        by = {(r["B"], r["L"], r["N"]): r for r in self.rows}
        self.assertEqual(by[(1, 1024, 4)]["closed_form"]["after"], 4718592)
        self.assertLessEqual(abs(by[(1, 1024, 4)]["after_bytes"] - 4718592), 512)

    def test_which_term_peaks(self):
        # (1, 1024, 4), V = 2,048, D = 256: op 5 peaks, 4 T D + G + 14 Tc V = 1,048,576 + 2,097,152 +
        # 14 x 524,288 = 10,485,760 bytes; (2, 512, 8): AccumulateGrad's upcast (op 8) peaks over op 5.
        by = {(r["B"], r["L"], r["N"]): r for r in self.rows}
        self.assertEqual(by[(1, 1024, 4)]["closed_form"]["peak"], 10485760)
        self.assertEqual(by[(2, 512, 8)]["closed_form"]["peak"],
                         2 * 1024 * 256 + 4 * 1024 * 256 + 2 * 4 * 2048 * 256 + 2 * 128 * 2048 + 2 * 128 * 256 +
                         2 * 2048 * 256)


LANE = os.path.join(ROOT, "tools", "reference", "run.py")
# (blocks, seq, AC, chunks): Llama 3 8B on 8 GPUs (V = 128,256, D = 4,096): the loss call peaks (held + dW +
# upcast) in both; the head's backward then holds the last reduce-scatter input and re-gathers the group.
STEP_CASES = ((2, 4096, "full", 8), (4, 2048, "none", 4))


@unittest.skipUnless(HAVE_TITAN, "torch / torchtitan not importable (tools/pyenv.sh)")
class ChunkedLossWholeStep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile

        cls.tmp = tempfile.TemporaryDirectory()
        cls.rows = []
        for layers, seq, ac, n in STEP_CASES:
            rec = os.path.join(cls.tmp.name, f"c{layers}-{seq}-{ac}-{n}.json")
            trace = rec.replace(".json", ".trace.json")
            subprocess.run([sys.executable, LANE, "--model", "llama3-8b", "--layers", str(layers), "--gpus", "8",
                            "--seq", str(seq), "--ac", ac, "--loss-impl", "chunked", "--loss-chunks", str(n),
                            "-o", rec, "--trace", trace], check=True, capture_output=True, text=True,
                           cwd=os.path.dirname(LANE))
            val = rec.replace(".json", ".val.json")
            subprocess.run([SHARDPLAN, "validate", rec, "--json", val], check=True, capture_output=True, text=True)
            row = next(r for r in json.load(open(val))["rows"] if r["term"] == "peak_allocated_bytes")
            cls.rows.append((layers, seq, ac, n, row, json.load(open(trace))))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_peak_within_3_percent(self):
        for layers, seq, ac, n, row, _ in self.rows:
            with self.subTest(layers=layers, seq=seq, ac=ac, chunks=n):
                self.assertLessEqual(abs(row["rel_error"]), 0.03, row)

    def test_reduce_scatter_input_held_into_the_head_backward(self):
        # The last chunk's reduce-scatter input (V D x 4 = 2,101,346,304 B) is allocated in the loss call and
        # freed at the head's post-backward in the decoder's backward, after the head group's second all-gather
        # (1,050,681,344 B; loss.py:772 resharded it).
        for layers, seq, ac, n, _, trace in self.rows:
            with self.subTest(layers=layers, seq=seq, ac=ac, chunks=n):
                ev = trace["events"]
                rs = [e for e in ev if e["op"] == "alloc" and e["aten"].startswith("c10d._reduce_scatter_base_")
                      and e["bytes"] == 2101346304]
                # (the first: the embedding's reduce-scatter, also V x D, comes at the end of the backward)
                self.assertEqual(len(rs), 2)
                sid = rs[0]["storage"]
                freed = next(i for i, e in enumerate(ev) if e["op"] == "free" and e["storage"] == sid
                             and e["category"] == "comm_buffers")
                gathers = [i for i, e in enumerate(ev) if e["op"] == "alloc" and e["bytes"] == 1050681344
                           and e["aten"].startswith("c10d._allgather_base_") and "backward" in e["phase"]]
                self.assertTrue(gathers and gathers[0] < freed)


if __name__ == "__main__":
    unittest.main()

"""tools/common/knob_args.py builds argparse flags from the knob table's snapshot (tools/common/knobs.json): flags,
values, ranges and help as the table has them, bad values refused with shardplan's own reasons; the reference lane
and the real-run harness restate no plan knob by hand; the snapshot is the binary's table (when it is built)."""
import argparse
import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from common import knob_args  # noqa: E402
from common.knob_args import add_knob_args, knob_table, tool_error  # noqa: E402

BIN = os.environ.get("SHARDPLAN_BIN", str(ROOT / "build" / "planner" / "shardplan"))


class Bad(Exception):
    pass


def parser(*args, **kwargs):
    p = argparse.ArgumentParser()
    add_knob_args(p, *args, **kwargs)
    tool_error(p, Bad)
    return p


def refusal(p, *argv):
    try:
        p.parse_args(list(argv))
    except Bad as e:
        return str(e)
    raise AssertionError(f"{argv} accepted")


class KnobArgsTest(unittest.TestCase):
    def test_every_knob_becomes_its_flag(self):
        table = knob_table()
        actions = add_knob_args(argparse.ArgumentParser(), list(table))
        self.assertEqual(list(actions), list(table))
        for key, k in table.items():
            a = actions[key]
            self.assertEqual(a.option_strings, [k["flag"]])
            self.assertTrue(a.help.startswith(k["help"]))
            self.assertIsNone(a.default if k["kind"] != "switch" else None)
            if k["kind"] == "switch":
                self.assertIs(a.default, False)  # store_true: given or not
            elif k["kind"] in ("enum", "bool"):
                self.assertEqual(a.choices, k["values"])
        self.assertEqual(actions["fused_optimizer"].dest, "foreach_optimizer")  # the flag's name, as by hand

    def test_values_parse_to_the_kinds_types(self):
        a = parser(["zero", "precision", "moe_imbalance", "compile", "pp_layers", "reshard_after_forward"]).parse_args(
            ["--zero", "2", "--precision", "bf16-true", "--moe-imbalance", "1.5", "--compile", "--pp-layers", "3,4",
             "--reshard-after-forward", "false"])
        self.assertEqual((a.zero, a.precision, a.moe_imbalance, a.compile, a.pp_layers, a.reshard_after_forward),
                         (2, "bf16-true", 1.5, True, "3,4", "false"))

    def test_bad_values_are_refused_with_shardplans_reasons(self):
        p = parser(["ac", "zero", "seq", "moe_imbalance", "reshard_after_forward"])
        # knob_builders.hpp parse_enum_text / parse_int / parse_double / parse_bool, word for word.
        cases = {("--ac", "bogus"): '--ac: unknown value "bogus"; expected one of: none, selective, full',
                 ("--zero", "7"): "--zero: must be in [0, 3], got 7",
                 ("--seq", "x"): '--seq: expected an integer, got "x"',
                 ("--moe-imbalance", "100"): "--moe-imbalance: must be in [1, 64], got 100",
                 ("--reshard-after-forward", "maybe"): '--reshard-after-forward: expected true or false, got "maybe"'}
        for argv, why in cases.items():
            self.assertEqual(refusal(p, *argv), why)
        if os.access(BIN, os.X_OK):  # the binary says the same
            for argv, why in cases.items():
                r = subprocess.run([BIN, "memory", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                                    *argv], capture_output=True, text=True)
                self.assertEqual((r.returncode, r.stderr), (2, f"shardplan: error: {why}\n"))

    def test_defaults(self):
        p = parser(["zero", "seq", "runtime", "reduce_dtype"], table_defaults=("zero", "runtime"),
                   defaults={"seq": 0})
        a = p.parse_args([])
        self.assertEqual((a.zero, a.seq, a.runtime, a.reduce_dtype), (3, 0, "fsdp2", None))
        # A phrase is not a value to default to.
        with self.assertRaisesRegex(ValueError, "the model's"):
            parser(["seq"], table_defaults=("seq",))
        with self.assertRaisesRegex(ValueError, "not among the knobs added"):
            parser(["seq"], defaults={"zero": 3})
        with self.assertRaisesRegex(ValueError, "not a knob"):
            parser(["no_such_knob"])

    def test_a_tool_narrows_a_knob_to_what_it_runs(self):
        p = parser(["runtime", "zero"], choices={"runtime": ("fsdp2", "fsdp1"), "zero": (2, 3)})
        self.assertEqual(refusal(p, "--runtime", "deepspeed"),
                         "--runtime: deepspeed is not run by this tool; expected one of: fsdp2, fsdp1")
        self.assertEqual(refusal(p, "--runtime", "jax"),
                         '--runtime: unknown value "jax"; expected one of: fsdp2, fsdp1, deepspeed, megatron')
        self.assertEqual(refusal(p, "--zero", "1"), "--zero: 1 is not run by this tool; expected one of: 2, 3")
        with self.assertRaisesRegex(ValueError, "are not values"):
            parser(["runtime"], choices={"runtime": ("fsdp3",)})
        with self.assertRaisesRegex(ValueError, "are not values"):
            parser(["zero"], choices={"zero": (4,)})

    def test_tools_restate_no_plan_knob_by_hand(self):
        flags = {k["flag"] for k in knob_table().values()}
        for rel in ("tools/reference/lane/args.py", "tools/realrun/realrun.py", "tools/reference/moe_tensors.py",
                    "tools/reference/saved_per_block.py", "tools/reference/moe_ep.py"):
            hand = set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', (ROOT / rel).read_text()))
            self.assertTrue(hand)  # the tool's own flags are still there
            self.assertEqual(hand & flags, set(), rel)

    @unittest.skipUnless(os.access(BIN, os.X_OK), "shardplan not built")
    def test_snapshot_is_the_binarys_table(self):
        r = subprocess.run([BIN, "list", "knobs", "--json", "-"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, knob_args.KNOBS_JSON.read_text(),
                         "tools/common/knobs.json is stale: run python3 tools/common/knobs_snapshot.py")


if __name__ == "__main__":
    unittest.main()

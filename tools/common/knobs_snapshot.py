#!/usr/bin/env python3
"""Writes tools/common/knobs.json, the knob table the Python tools build their plan flags from (knob_args.py), from
the binary: `shardplan list knobs --json tools/common/knobs.json`. Run it after changing simulator/plan/knobs*.cpp or
the capability table; tests/planner/test_knob_table.cpp fails while the file differs from the binary's table.

    python3 tools/common/knobs_snapshot.py [--shardplan build/planner/shardplan] [--check]

--check writes nothing and exits 1 when the file is stale."""
import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tools" / "common" / "knobs.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardplan", default=str(ROOT / "build" / "planner" / "shardplan"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the snapshot differs from the binary's table")
    a = ap.parse_args(argv)
    p = subprocess.run([a.shardplan, "list", "knobs", "--json", "-"], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"knobs_snapshot.py: {a.shardplan} list knobs --json - failed ({p.returncode}): {p.stderr.strip()}",
              file=sys.stderr)
        return 2
    if a.check:
        if not SNAPSHOT.is_file() or SNAPSHOT.read_text() != p.stdout:
            print(f"knobs_snapshot.py: {SNAPSHOT.relative_to(ROOT)} is stale; run python3 "
                  "tools/common/knobs_snapshot.py", file=sys.stderr)
            return 1
        return 0
    SNAPSHOT.write_text(p.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Include-direction check (run by tools/test.sh): the top-level folders include each other one way, and inside
simulator/ a room includes only its own headers and the public headers of rooms of a lower rank, as the table
in simulator/README.md says; planner/, tools/ and python/ include only the rooms' public headers; below
simulator/plan/ no code names a runtime (Runtime::k...): it reads the runtime's traits. Prints every violation as
FILE:LINE: reason and exits 1 if there is any."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Which top-level folders each one may include (tests/ may include everything).
TOP = {
    "core": {"core"},
    "topologies": {"core", "topologies"},
    "calibration": {"core", "calibration"},
    "simulator": {"core", "topologies", "simulator"},
    "planner": {"core", "topologies", "calibration", "simulator", "planner"},
    "python": {"core", "topologies", "calibration", "simulator", "planner", "python"},
    "tools": {"core", "topologies", "calibration", "simulator", "planner", "tools"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def rooms():
    """{room: (rank, public header)} from the table in simulator/README.md."""
    table = {}
    row = re.compile(r"^\|\s*(\d+)\s*\|\s*([a-z_]+)\s*\|\s*([a-z_/]+\.hpp)\s*\|")
    with open(os.path.join(ROOT, "simulator", "README.md")) as f:
        for line in f:
            m = row.match(line)
            if m:
                table[m.group(2)] = (int(m.group(1)), m.group(3))
    if not table:
        sys.exit("tools/ci/includes.py: no room table in simulator/README.md")
    return table


def check(files, table):
    errors = []
    for path in files:
        parts = path.split("/")
        top = parts[0]
        if top not in TOP and top != "tests":
            continue
        room = parts[1] if top == "simulator" and len(parts) > 2 else None
        if top == "simulator" and room is not None and room not in table:
            errors.append(f"{path}:1: simulator/{room}/ is not a room of simulator/README.md's table")
            continue
        with open(os.path.join(ROOT, path), errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m or "/" not in m.group(1):
                    continue
                inc = m.group(1)
                target_top = inc.split("/")[0]
                if top != "tests" and target_top in TOP and target_top not in TOP[top]:
                    errors.append(f"{path}:{n}: {top}/ may not include {inc} ({target_top}/ is above it)")
                    continue
                if target_top != "simulator" or top == "tests":
                    continue
                tparts = inc.split("/")
                if len(tparts) < 3 or tparts[1] not in table:
                    errors.append(f"{path}:{n}: {inc} is not in a room of simulator/README.md")
                    continue
                troom = tparts[1]
                rank, public = table[troom]
                if room == troom:
                    continue
                if "/".join(tparts[1:]) != public:
                    errors.append(f"{path}:{n}: {inc} is internal to simulator/{troom}/; include "
                                  f"simulator/{public}")
                elif room is not None and rank >= table[room][0]:
                    errors.append(f"{path}:{n}: simulator/{room}/ (rank {table[room][0]}) may not include "
                                  f"simulator/{troom}/ (rank {rank})")
    return errors


def runtime_names(files):
    """The simulator below plan/ reads a runtime's traits (simulator/plan/runtime.hpp), never its name."""
    errors = []
    for path in files:
        if not path.startswith("simulator/") or path.startswith("simulator/plan/"):
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if "Runtime::k" in line:
                    errors.append(f"{path}:{n}: branches on the runtime's name; add a field to RuntimeTraits "
                                  f"(simulator/plan/runtime.hpp) instead")
    return errors


def main():
    files = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.cpp", "*.hpp", "*.cu"], cwd=ROOT, text=True).split()
    errors = check(files, rooms()) + runtime_names(files)
    for e in errors:
        print(e)
    if errors:
        print(f"includes: {len(errors)} include(s) against the direction of simulator/README.md's table")
        return 1
    print(f"includes: {len(files)} files include one way (simulator/README.md); no runtime name below simulator/plan/")
    return 0


if __name__ == "__main__":
    sys.exit(main())

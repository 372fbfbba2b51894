#!/usr/bin/env python3
"""The reference lane: runs the real PyTorch training step of a shardplan model (FSDP2, FSDP1 or DDP; optionally
torchao float8 or DTensor TP) as rank 0 of a world of N (fake process group, fake tensors: no real memory, no GPU)
and records every allocation and free with its category and phase; writes a shardplan.run/1 record
(measured.peak_allocated_bytes) and optionally the trace.

Usage: run.py --model M --gpus N [PLAN-FLAGS as `shardplan simulate`] -o RECORD.json [--trace TRACE.json]
       run.py --batch CONFIGS.txt --out-dir DIR   (every line "MODEL GPUS FLAGS", one process)
Unsupported plans exit 2 with one line on stderr. See docs/reference-lane.md.
"""
from __future__ import annotations

import sys

from lane.args import parse_args
from lane.batch import run_batch
from lane.spec import PlanError
from lane.step import run


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["--batch"]:
            if len(argv) != 4 or argv[2] != "--out-dir":
                raise PlanError("usage: run.py --batch CONFIGS.txt --out-dir DIR")
            return run_batch(argv[1], argv[3])
        a = parse_args(argv)
        return run(a)
    except PlanError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The reference lane's peak-memory errors per category (runtime, model family, activation checkpointing, FSDP2
prefetch depth, TP degree, pipeline degree and schedule, float8 recipe): the table tools/accuracy.sh appends to docs/accuracy.md's reference-lane section.

Usage: categories.py RECORDS.json VALIDATE.json   (VALIDATE.json: `shardplan validate RECORDS.json --json FILE`)
Standard library only; Markdown on stdout.
"""
import json
import statistics
import sys

FAMILIES = (("llama3", "Llama 3 / 3.1 / 3.2"), ("llama2", "Llama 2"), ("mistral", "Mistral"),
            ("mixtral", "Mixtral (MoE)"), ("qwen2", "Qwen2"), ("mpt", "MPT"))


def family(rec):
    name = rec["model"] if isinstance(rec["model"], str) else rec["model"].get("name", "custom")
    return next((label for prefix, label in FAMILIES if name.startswith(prefix)), name)


def runtime(plan):
    if plan.get("zero") == 0:
        return "DDP"
    return {"fsdp2": "FSDP2", "fsdp1": "FSDP1"}.get(plan.get("runtime", "fsdp2"), plan.get("runtime"))


def main():
    records = json.load(open(sys.argv[1]))["records"]
    rows = json.load(open(sys.argv[2]))["rows"]
    err = {r["id"]: r["rel_error"] for r in rows if r["term"] == "peak_allocated_bytes"}
    axes = (("runtime", lambda r: runtime(r["plan"])), ("model family", family),
            ("activation checkpointing", lambda r: r["plan"].get("ac", "none")),
            ("FSDP2 prefetch", lambda r: (f"{r['plan'].get('prefetch', 1)} unit(s)"
                                          if runtime(r["plan"]) == "FSDP2" else None)),
            ("tensor parallelism", lambda r: f"tp {r['plan'].get('tp', 1)}"),
            ("pipeline parallelism", lambda r: (f"pp {r['plan']['pp']} {r['plan']['pp_schedule']}"
                                                if r["plan"].get("pp", 1) > 1 else "none")),
            ("float8", lambda r: r["plan"].get("fp8", "none") + (" + float8 all-gather"
                                                                 if r["plan"].get("fp8_all_gather") else "")))
    print("### Reference lane by category\n")
    print("Peak allocated memory, shardplan against the reference lane (`tools/reference/categories.py`).\n")
    print("| category | value | configurations | median abs error | worst |")
    print("|---|---|--:|--:|--:|")
    for axis, key in axes:
        groups = {}
        for rec in records:
            k = key(rec)
            if k is not None and rec["id"] in err:
                groups.setdefault(k, []).append(err[rec["id"]])
        for k, errs in sorted(groups.items()):
            worst = max(errs, key=abs)
            print(f"| {axis} | {k} | {len(errs)} | {statistics.median(abs(e) for e in errs) * 100:.1f} % | "
                  f"{worst * 100:+.1f} % |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

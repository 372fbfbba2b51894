#!/usr/bin/env python3
"""Compares shardplan's memory prediction with the reference lane, per configuration and per category.

Usage: compare.py [RECORDS.json] [--traces DIR] [--shardplan BIN]   (defaults: tools/reference/data/...)
For each record it runs `shardplan memory --json -` with the record's plan and prints the error of the peak and
of every category of the breakdown at the peak (the reference's breakdown is read from the trace, or from the
record's notes when the trace is absent). Markdown on stdout.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATS = ("params", "grads", "optimizer", "activations", "gathered_params", "comm_buffers", "other")
FLAGS = {"runtime": "--runtime", "zero": "--zero", "seq": "--seq", "mbs": "--mbs", "grad_accum": "--grad-accum",
         "ac": "--ac", "wrap": "--wrap", "shard_group": "--shard-group", "prefetch": "--prefetch", "precision": "--precision",
         "reduce_dtype": "--reduce-dtype", "loss_dtype": "--loss-dtype", "tp": "--tp", "fp8": "--fp8"}


def reference_breakdown(rec, traces):
    name = rec["id"].removeprefix("ref-")
    trace = traces / f"{name}.json"
    if trace.is_file():
        t = json.loads(trace.read_text())
        return t["breakdown_at_peak"], t["peak_phase"]
    m = re.search(r"breakdown at peak \(([^)]*)\): ([^;]*);", rec.get("notes", ""))
    if not m:
        return None, ""
    return {k: int(v) for k, v in (kv.split("=") for kv in m.group(2).split())}, m.group(1)


def predict(rec, binary):
    model = rec["model"]
    tmp = None
    if isinstance(model, dict):
        tmp = ROOT / "build" / f"compare-{rec['id']}.json"
        tmp.write_text(json.dumps(model))
        model = str(tmp)
    cmd = [binary, "memory", "--model", model, "--cluster", rec["cluster"], "--gpus", str(rec["gpus"]), "--json", "-"]
    p = rec["plan"]
    for key, flag in FLAGS.items():
        if key in p:
            cmd += [flag, str(p[key])]
    if "reshard_after_forward" in p:
        cmd += ["--reshard-after-forward", "true" if p["reshard_after_forward"] else "false"]
    if p.get("fp8_all_gather"):
        cmd.append("--fp8-all-gather")
    if p.get("hold_logits"):
        cmd.append("--hold-logits")
    if p.get("fused_optimizer") is False:
        cmd.append("--foreach-optimizer")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if tmp:
        tmp.unlink()
    try:  # `memory` exits non-zero when the plan does not fit, with the JSON still written
        return json.loads(out.stdout)["memory"]
    except (json.JSONDecodeError, KeyError):
        raise SystemExit(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records", nargs="?", default=str(ROOT / "tools/reference/data/records.json"))
    ap.add_argument("--traces", default=str(ROOT / "tools/reference/data/traces"))
    ap.add_argument("--shardplan", default=str(ROOT / "build/planner/shardplan"))
    a = ap.parse_args()
    doc = json.loads(Path(a.records).read_text())
    records = doc["records"] if isinstance(doc, dict) else doc
    G = 2**30
    print("| record | reference GiB | shardplan GiB | error | reference peak phase | shardplan peak phase |")
    print("|---|---|---|---|---|---|")
    errs, cat_rows = [], []
    for rec in records:
        ref = rec["measured"]["peak_allocated_bytes"]
        mem = predict(rec, a.shardplan)
        pred = mem["peak_bytes"]
        err = pred / ref - 1
        errs.append(err)
        bd, phase = reference_breakdown(rec, Path(a.traces))
        print(f"| {rec['id']} | {ref / G:.2f} | {pred / G:.2f} | {err:+.1%} | {phase} | {mem['peak_phase']} |")
        if bd:
            cat_rows.append((rec["id"], bd, mem["breakdown"]))
    print(f"\nmedian |error| {statistics.median(abs(e) for e in errs):.1%}, worst {max(errs, key=abs):+.1%} "
          f"over {len(errs)} configurations\n")
    print("Breakdown at each one's peak, GiB (reference / shardplan):\n")
    print("| record | " + " | ".join(CATS) + " |")
    print("|---|" + "---|" * len(CATS))
    for rid, bd, sp in cat_rows:
        cells = [f"{bd.get(c, 0) / G:.2f} / {sp.get(c, 0) / G:.2f}" for c in CATS]
        print(f"| {rid} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

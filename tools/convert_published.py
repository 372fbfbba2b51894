#!/usr/bin/env python3
"""Convert the shared published-runs set into shardplan run records.

    tools/convert_published.py SHARED_JSON [SHARED_JSON ...] -o tests/data/runs/published_dev.json

Input: one or more files of the `published_runs_dev.json` layout described in shared/validation/README.md
(published_runs_dev2.json has the same layout); the output holds every record of every file, in input order, and
an id that repeats across the files is an error.
Output: {"schema": "shardplan.runs/1", "records": [shardplan.run/1 ...], "skipped": [{id, reason, details}]}
(docs/formats.md for the record format, docs/validation-mapping.md for every mapping rule used here).

Python 3 standard library only; output is deterministic (input order, sorted keys).
"""

import argparse
import json
import os
import sys

from published.presets import FP8_REASON, param_count
from published.record import convert

# What tests/realrun/test_convert.py reads from this module.
__all__ = ["FP8_REASON", "param_count", "convert", "convert_all", "dumps", "load_inputs", "main"]


def convert_all(data, names=("published_runs_dev.json",)):
    records, skipped = [], []
    for rec in data["records"]:
        try:
            r, s = convert(rec)
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
            # A record whose fields do not have the documented shape: skipped with the converter's complaint, so
            # that one malformed row never stops the rest (and the reason is there to fix the converter).
            rid = rec.get("id") if isinstance(rec, dict) else None
            sys.stderr.write("convert_published: record %r skipped: %s: %s\n" % (rid, type(e).__name__, e))
            r, s = None, {"id": rid, "reason": "record not understood by the converter (%s: %s)"
                          % (type(e).__name__, e), "details": []}
        if r is not None:
            records.append(r)
        else:
            skipped.append(s)
    return {"schema": "shardplan.runs/1", "records": records, "skipped": skipped,
            "source": "converted by tools/convert_published.py from %s (rules: docs/validation-mapping.md)"
                      % " + ".join("shared/validation/" + n for n in names)}


def dumps(doc):
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def load_inputs(paths):
    """The records of every input file, in order; (data, file names). Raises ValueError on a repeated id."""
    recs, names, seen = [], [], {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        names.append(os.path.basename(path))
        for rec in data["records"]:
            rid = rec.get("id") if isinstance(rec, dict) else None
            if rid is not None and rid in seen:
                raise ValueError("%s: record id %r already in %s" % (path, rid, seen[rid]))
            if rid is not None:
                seen[rid] = path
            recs.append(rec)
    return {"records": recs}, names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shared_json", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args(argv)
    try:
        data, names = load_inputs(args.shared_json)
    except ValueError as e:
        sys.stderr.write("convert_published: %s\n" % e)
        return 2
    doc = convert_all(data, names)
    text = dumps(doc)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    sys.stderr.write("converted %d, skipped %d\n" % (len(doc["records"]), len(doc["skipped"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

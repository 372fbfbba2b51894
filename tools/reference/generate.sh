#!/usr/bin/env bash
# Regenerates the committed reference-lane records (tools/reference/data/records.json): runs every configuration of
# tools/reference/configs.txt with tools/reference/run.py --batch (torch imported once per batch, one forked child
# per configuration), JOBS batches in parallel at nice 10, and gathers the records into one shardplan.runs/1 file.
# Per-record files and traces go to the ignored records/ and traces/ next to it; a record already written is kept
# (an interrupted run resumes; delete records/ to start over).
# Usage: bash tools/reference/generate.sh [JOBS]   (105 configurations: ~15 min of CPU)
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${1:-2}
python=$(bash tools/pyenv.sh)
out=tools/reference/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' tools/reference/configs.txt | grep . | awk -v n="$jobs" -v d="$tmp" '{ print > (d "/shard" (NR % n) ".txt") }'
status=0
for shard in "$tmp"/shard*.txt; do
  nice -n 10 "$python" tools/reference/run.py --batch "$shard" --out-dir "$out" 2>&1 | grep -v 'triton not found' &
done
wait || status=$?
"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
records = [json.loads(p.read_text()) for p in sorted((out / "records").glob("*.json"))]
doc = {"schema": "shardplan.runs/1", "records": records,
       "source": "tools/reference/generate.sh (tools/reference/run.py, fake process group, fake tensors)"}
(out / "records.json").write_text(json.dumps(doc, indent=1) + "\n")
print(f"{len(records)} records -> {out / 'records.json'}", file=sys.stderr)
PY
exit $status

#!/usr/bin/env bash
# Regenerates the committed reference-lane records (tools/reference/data/records.json): runs every configuration of
# tools/reference/configs.txt with tools/reference/run.py --batch (torch imported once per batch, one forked child
# per configuration), JOBS batches in parallel at nice 10, and gathers the records into one shardplan.runs/1 file.
# Per-record files and traces go to the ignored records/ and traces/ next to it; a record already written is kept
# (an interrupted run resumes; delete records/ to start over). The committed records.json seeds records/ first, so
# only configurations without a committed record run (new lines of configs.txt); FRESH=1 reruns everything.
# Usage: [FRESH=1] bash tools/reference/generate.sh [JOBS]   (141 configurations from scratch: ~20 min of CPU)
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${1:-2}
python=$(bash tools/pyenv.sh)
out=tools/reference/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${FRESH:-0}" != 1 ] && [ -f "$out/records.json" ]; then
  "$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
(out / "records").mkdir(parents=True, exist_ok=True)
for rec in json.loads((out / "records.json").read_text())["records"]:
    path = out / "records" / (rec["id"].removeprefix("ref-") + ".json")
    if not path.is_file():
        path.write_text(json.dumps(rec, indent=1) + "\n")
PY
fi
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

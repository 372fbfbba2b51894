#!/usr/bin/env bash
# Regenerates the committed reference-lane records (tools/reference/data/records.json): runs tools/reference/run.py
# on each configuration below and gathers the records into one shardplan.runs/1 file; traces go to
# tools/reference/data/traces/ (not committed). Usage: bash tools/reference/generate.sh [JOBS]   (~15 min, 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${1:-2}
python=$(bash tools/pyenv.sh)
out=tools/reference/data
mkdir -p "$out/records" "$out/traces"
configs=(
  "llama3-8b  8   --ac none      --mbs 1 --seq 8192"
  "llama3-8b  8   --ac selective --mbs 1 --seq 8192"
  "llama3-8b  8   --ac full      --mbs 2 --seq 8192"
  "llama3-8b  8   --ac none      --mbs 1 --seq 2048 --grad-accum 2"
  "llama3-8b  8   --ac full      --mbs 1 --seq 4096 --zero 2"
  "llama3-8b  64  --ac none      --mbs 1 --seq 4096"
  "llama3-8b  64  --ac full      --mbs 4 --seq 2048"
  "llama3-8b  512 --ac selective --mbs 2 --seq 4096"
  "llama3-70b 64  --ac none      --mbs 1 --seq 2048"
  "llama3-70b 64  --ac full      --mbs 1 --seq 8192"
  "llama3-70b 512 --ac selective --mbs 1 --seq 4096"
  "llama3-70b 512 --ac full      --mbs 4 --seq 4096"
)
run_one() {
  local model=$1 gpus=$2; shift 2
  local name="$model-g$gpus$(echo "$*" | tr -d ' -' | sed 's/ac/-ac/;s/mbs/-mbs/;s/seq/-s/;s/gradaccum/-ga/;s/zero/-z/')"
  "$python" tools/reference/run.py --model "$model" --gpus "$gpus" "$@" --id "ref-$name" \
    -o "$out/records/$name.json" --trace "$out/traces/$name.json"
}
export -f run_one; export python out
printf '%s\n' "${configs[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
records = [json.loads(p.read_text()) for p in sorted((out / "records").glob("*.json"))]
doc = {"schema": "shardplan.runs/1", "records": records,
       "source": "tools/reference/generate.sh (tools/reference/run.py, fake process group, fake tensors)"}
(out / "records.json").write_text(json.dumps(doc, indent=1) + "\n")
print(f"{len(records)} records -> {out / 'records.json'}", file=sys.stderr)
PY

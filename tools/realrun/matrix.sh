#!/usr/bin/env bash
# One-shot real-run matrix for ONE H200 (world size 1), total budget ~8 minutes.
# Exercises the memory terms: model size, seq, mbs, AC none/selective/full, bf16-mixed vs bf16-true,
# grad accumulation 1 vs 4, FSDP2 vs FSDP1, zero 3 vs 2.  Each run is bounded by `timeout` and by few steps.
# Writes one shardplan.run/1 record per run (+ .details.json) into $OUT, a combined runs file, and a log.
#
#   OUT=/tmp/out bash tools/realrun/matrix.sh          (from the repo root)
#
# Models are the Llama-3 8B shape with fewer blocks (llama3-8b preset, --layers N) so the vocab/logits term is
# real; sizes: L2 ~1.2B (embeddings+head dominate), L4 ~1.7B, L8 ~2.7B, L16 ~4.5B, full L32 8.0B.
set -u
OUT=${OUT:-$(pwd)/realrun-out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
PER_RUN=${PER_RUN:-45}          # seconds per run (model build + 2 warm-up + 4 measured steps)
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-470} ))
LOG="$OUT/matrix.log"
: > "$LOG"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; "$PY" -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda)'; } >> "$LOG" 2>&1

n=0
run() {  # run ID ARGS...
  local id=$1; shift
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then echo "SKIP(budget) $id" | tee -a "$LOG"; return; fi
  n=$((n+1))
  local t0=$(date +%s)
  timeout -k 5 "$PER_RUN" "$PY" "$HERE/realrun.py" --id "h200-$id" --out "$OUT/$id.json" --warmup 2 --steps 4 "$@" \
      > "$OUT/$id.stdout" 2>&1
  local rc=$?
  echo "$(printf '%-38s' "$id") rc=$rc $(( $(date +%s) - t0 ))s $(tail -n 1 "$OUT/$id.stdout" | cut -c1-200)" | tee -a "$LOG"
}

M="--model llama3-8b"
# --- activation checkpointing x seq x mbs (bf16-mixed, FSDP2, zero 3) on the 8-block model -----------------
run L8-s2048-m1-none     $M --layers 8  --seq 2048 --mbs 1 --ac none
run L8-s2048-m1-sel      $M --layers 8  --seq 2048 --mbs 1 --ac selective
run L8-s2048-m1-full     $M --layers 8  --seq 2048 --mbs 1 --ac full
run L8-s4096-m2-none     $M --layers 8  --seq 4096 --mbs 2 --ac none
run L8-s4096-m2-full     $M --layers 8  --seq 4096 --mbs 2 --ac full
run L8-s8192-m1-none     $M --layers 8  --seq 8192 --mbs 1 --ac none
run L8-s8192-m1-sel      $M --layers 8  --seq 8192 --mbs 1 --ac selective
run L8-s8192-m1-full     $M --layers 8  --seq 8192 --mbs 1 --ac full
run L8-s2048-m4-full     $M --layers 8  --seq 2048 --mbs 4 --ac full
# --- model size (persistent state 16 B/param under bf16-mixed) ----------------------------------------------
run L2-s2048-m1-none     $M --layers 2  --seq 2048 --mbs 1 --ac none
run L16-s2048-m1-full    $M --layers 16 --seq 2048 --mbs 1 --ac full
run L32-s4096-m1-full    $M             --seq 4096 --mbs 1 --ac full
# --- precision: bf16-true halves params/grads/optimizer --------------------------------------------------------
run L8-s4096-m1-full-bt  $M --layers 8  --seq 4096 --mbs 1 --ac full --precision bf16-true
run L32-s4096-m1-full-bt $M             --seq 4096 --mbs 1 --ac full --precision bf16-true
# --- gradient accumulation: sync every micro-batch vs no-sync (FSDP2 keeps fp32 unsharded grads) -------------
run L8-s2048-m1-ga4      $M --layers 8  --seq 2048 --mbs 1 --ac full --grad-accum 4
run L8-s2048-m1-ga4-nos  $M --layers 8  --seq 2048 --mbs 1 --ac full --grad-accum 4 --accum-no-sync
# --- runtime / reshard / prefetch -----------------------------------------------------------------------------
run L8-s4096-m1-full-z2  $M --layers 8  --seq 4096 --mbs 1 --ac full --zero 2
run L8-s4096-m1-full-pf2 $M --layers 8  --seq 4096 --mbs 1 --ac full --prefetch 2
run L8-s4096-m1-full-f1  $M --layers 8  --seq 4096 --mbs 1 --ac full --runtime fsdp1
# --- one memory snapshot (kept small) ---------------------------------------------------------------------------
run L4-s2048-m1-sel-snap $M --layers 4  --seq 2048 --mbs 1 --ac selective --snapshot "$OUT/L4-s2048-m1-sel-snap.pickle"

# combine the records that were written
"$PY" - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
recs = []
for p in sorted(glob.glob(os.path.join(out, "*.json"))):
    if p.endswith(".details.json") or os.path.basename(p) == "runs.json":
        continue
    with open(p) as f:
        recs.append(json.load(f))
with open(os.path.join(out, "runs.json"), "w") as f:
    json.dump({"schema": "shardplan.runs/1", "records": recs}, f, indent=1, sort_keys=True)
print("records:", len(recs))
EOF
echo "runs attempted: $n" | tee -a "$LOG"

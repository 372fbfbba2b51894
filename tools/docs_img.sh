#!/usr/bin/env bash
# Regenerates the screenshots in docs/img/ from the HTML reports of the built CLI (headless Chromium).
# usage: tools/docs_img.sh [BUILD_DIR]   (default build; needs `chromium` on PATH)
# The three reports: a pipeline-parallel plan (Llama 3 70B, TP 8 x PP 4, interleaved 1F1B: the whole step drawn
# per pipeline rank), a tensor-parallel plan (Llama 3 8B, TP 2: the exposed TP collectives at their true share),
# and `compare` of three plans of Llama 3 8B on one node.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}/planner/shardplan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" simulate --model llama3-70b --cluster dgx-h100 --gpus 64 --tp 8 --pp 4 --pp-schedule interleaved-1f1b \
  --virtual-stages 2 --seq 8192 --global-batch 256 --html "$tmp/pp.html" >/dev/null
"$bin" simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --runtime fsdp2 --zero 3 --tp 2 --seq 8192 --mbs 1 \
  --grad-accum 4 --ac none --compile --html "$tmp/tp.html" >/dev/null
"$bin" compare --model llama3-8b --cluster dgx-h100 --gpus 8 --global-batch 32 --seq 8192 --html "$tmp/compare.html" \
  -- "ac=full mbs=2" "tp=2 compile" "zero=2 ac=selective compile" >/dev/null
for page in pp tp compare; do
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1800 \
    --screenshot="$root/docs/img/$page.png" "file://$tmp/$page.html" >/dev/null 2>&1
  echo "docs/img/$page.png"
done

#!/usr/bin/env bash
# Regenerates the screenshots in docs/img/ from the HTML reports of the built CLI (headless Chromium).
# usage: tools/docs_img.sh [BUILD_DIR]   (default build; needs `chromium` on PATH)
# The three reports: the default example's plan (README line 1), the recommended plan simulated with its
# memory-against-GPU-timeline chart, and `validate` on the committed development records.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}/planner/shardplan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" plan --model llama3-8b --cluster dgx-h100 --gpus 8 --global-batch 64 --seq 8192 --html "$tmp/plan.html" >/dev/null
"$bin" simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --runtime fsdp2 --zero 3 --tp 2 --seq 8192 --mbs 1 \
  --grad-accum 4 --ac none --compile --html "$tmp/simulate.html" >/dev/null
"$bin" validate "$root/tests/data/runs/published_dev.json" --html "$tmp/validate.html" --quiet >/dev/null
for page in plan simulate validate; do
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1800 \
    --screenshot="$root/docs/img/$page.png" "file://$tmp/$page.html" >/dev/null 2>&1
  echo "docs/img/$page.png"
done

#!/usr/bin/env bash
# Regenerates docs/accuracy.md from the committed run records (uncalibrated predictions): the published runs, then
# the reference lane's records (tools/reference/data/records.json) as their own section, followed by their errors per
# category (runtime, model family, AC mode, FSDP2 prefetch: tools/reference/categories.py, standard-library python3).
set -euo pipefail
cd "$(dirname "$0")/.."
./build/planner/shardplan validate tests/data/runs/published_dev.json --markdown docs/accuracy.md --quiet
section=$(mktemp)
rows=$(mktemp)
trap 'rm -f "$section" "$rows"' EXIT
./build/planner/shardplan validate tools/reference/data/records.json --markdown "$section" \
  --markdown-section "Reference lane: the real PyTorch step, fake process group (tools/reference/)" --quiet
cat "$section" >> docs/accuracy.md
./build/planner/shardplan validate tools/reference/data/records.json --json "$rows" --quiet > /dev/null
python3 tools/reference/categories.py tools/reference/data/records.json "$rows" >> docs/accuracy.md

#!/usr/bin/env bash
# Regenerates docs/accuracy.md from the committed run records (uncalibrated predictions).
set -euo pipefail
cd "$(dirname "$0")/.."
./build/planner/shardplan validate tests/data/runs/published_dev.json --markdown docs/accuracy.md --quiet

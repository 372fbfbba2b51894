#!/usr/bin/env bash
# The whole test suite: install, build, ctest (C++ unit, CLI and report tests), the Python tests of the
# converter and the real-run harness, bounded fuzzing of every parser, and the sanitizer build of the suite.
# Set SHARDPLAN_QUICK=1 to skip fuzzing and sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
python3 -m unittest discover -s tests/realrun -p 'test_*.py' -v 2>&1 | tail -n 5
# --- emitted configs run by the real frameworks (issue 15): DeepSpeedConfig accepts the ds_config, the FSDP2
# script trains 2 steps on the CPU with torchrun (gloo). Needs the project's Python environment (tools/pyenv.sh).
if [[ -z "${SHARDPLAN_PYTHON:-}" && -f tools/pyenv.sh ]]; then SHARDPLAN_PYTHON="$(bash tools/pyenv.sh)"; fi
SHARDPLAN_PYTHON="${SHARDPLAN_PYTHON:-}" SHARDPLAN_BIN="${SHARDPLAN_BIN:-build/planner/shardplan}" \
  "${SHARDPLAN_PYTHON:-python3}" -m unittest discover -s tests/emit -p 'test_*.py' -v
# --- end of the emitted-config tests
if [[ "${SHARDPLAN_QUICK:-0}" != 1 ]]; then
  if [[ -f tools/ci/fuzz.sh ]]; then bash tools/ci/fuzz.sh "${SHARDPLAN_FUZZ_SECONDS:-10}"; fi
  if [[ -f tools/ci/sanitize.sh ]]; then bash tools/ci/sanitize.sh; fi
fi

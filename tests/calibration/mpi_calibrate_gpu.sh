#!/usr/bin/env bash
# GPU-only ctest (tests/calibration/CMakeLists.txt): shardplan-calibrate's NCCL sweep over 2 MPI ranks, one GPU
# each, the unique id bootstrapped over MPI. Exits 77 (ctest: skipped) on a machine with fewer than 2 GPUs.
# usage: mpi_calibrate_gpu.sh CALIBRATE MPIEXEC [MPIEXEC ARGS...]   (the args give the process count)
set -euo pipefail
calibrate=$1
shift
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if (( gpus < 2 )); then
  echo "skipped: ${gpus} GPU(s) here; the MPI NCCL sweep needs one GPU per rank, 2 ranks"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$@" "$calibrate" nccl -o "$dir/profile.json" --max-bytes 1048576 --min-time 0.001 --repetitions 1
# Rank 0 wrote the profile; its NCCL entries are over the 2 MPI ranks.
grep -q '"ranks": 2' "$dir/profile.json" || { echo "no collective over 2 ranks in the profile:"; cat "$dir/profile.json"; exit 1; }
echo "ok: NCCL sweep over 2 MPI ranks"

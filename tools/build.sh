#!/usr/bin/env bash
# Installs the Debian packages the build needs (tools/setup.sh build) and builds the `shardplan` CLI -- or the
# targets named -- into build/ (Release, Ninja, ccache through CMakeLists.txt).
#   bash tools/build.sh [TARGET...]      (default: shardplan; `all` builds the tests and tools too, as
#                                         tools/test.sh does)
# The CUDA calibration suite (shardplan-calibrate) is not built by default: SHARDPLAN_CUDA=ON (or AUTO: when nvcc,
# NCCL and cuBLASLt are found) and SHARDPLAN_MPI=ON for its MPI bootstrap, e.g.
#   SHARDPLAN_CUDA=ON SHARDPLAN_MPI=ON bash tools/build.sh shardplan-calibrate
# (tools/setup.sh mpi installs Open MPI). A value given once stays in build/CMakeCache.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh build
args=(-DCMAKE_BUILD_TYPE=Release)
if [[ -n "${SHARDPLAN_CUDA:-}" ]]; then
  args+=("-DSHARDPLAN_CUDA=$SHARDPLAN_CUDA")
  if [[ "$SHARDPLAN_CUDA" != OFF && -x /usr/local/cuda/bin/nvcc ]] && ! grep -q '^CMAKE_CUDA_COMPILER:' build/CMakeCache.txt 2>/dev/null; then
    args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  fi
fi
[[ -n "${SHARDPLAN_MPI:-}" ]] && args+=("-DSHARDPLAN_MPI=$SHARDPLAN_MPI")
cmake -S . -B build -G Ninja "${args[@]}" >/dev/null
(($#)) || set -- shardplan
cmake --build build -j"$(nproc)" --target "$@"

#!/usr/bin/env bash
# Installs the Debian packages shardplan needs (tools/setup.sh) and builds everything into build/.
# The CUDA calibration suite is built when nvcc is found (SHARDPLAN_CUDA=AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cuda=()
if [[ -x /usr/local/cuda/bin/nvcc ]]; then cuda=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi  # repeated builds
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" "${launcher[@]}" >/dev/null
cmake --build build -j"$(nproc)"

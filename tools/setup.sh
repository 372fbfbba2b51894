#!/usr/bin/env bash
# Installs the Debian 12 packages a task needs (idempotent, non-interactive; as root, or through sudo), and only
# those: installing is most of a fresh machine's first build.
#   bash tools/setup.sh [PROFILE...]     (default: build)
#   build   compiler, CMake, Ninja, ccache, the libraries of the `shardplan` CLI and Catch2 (header-only; the build
#           folder is configured with its tests) -- README line 1
#   python  + python3-venv/-dev: a venv, and the headers the Python module (`pip install .`) builds against
#   test    + what tools/test.sh runs: python (the pinned environment, the module), clang-format, chromium (the
#           HTML reports rendered), zlib (the screenshots decoded)
#   mpi     + Open MPI (shardplan-calibrate's MPI bootstrap and its `mpirun -np 2` test)
#   fuzz    + clang/LLVM (libFuzzer harnesses, tools/ci/fuzz.sh)
# ccache is set up for the builds by tools/build.sh (CCACHE_BASEDIR = the checkout, so a checkout's build trees
# at the same depth -- build/, build-python/ -- share their compilations).
set -euo pipefail
declare -A profile=(
  [build]="build-essential cmake ninja-build ccache libboost-graph-dev nlohmann-json3-dev libfmt-dev libcli11-dev catch2"
  [python]="python3 python3-venv python3-dev"
  [test]="python3 python3-venv python3-dev clang-format chromium zlib1g-dev"
  [mpi]="libopenmpi-dev openmpi-bin"
  [fuzz]="clang llvm"
)
(($#)) || set -- build
pkgs=()
for p in "$@"; do
  [[ -n "${profile[$p]:-}" ]] || { echo "tools/setup.sh: unknown profile '$p' (build, python, test, mpi, fuzz)" >&2; exit 2; }
  read -ra more <<<"${profile[$p]}"
  pkgs+=("${more[@]}")
done
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  start=$(date +%s)
  # A fresh machine may have no package lists yet; otherwise they are refreshed once per run of this script.
  $SUDO apt-get update -qq
  # --force-unsafe-io: dpkg skips its fsync per unpacked file (a power cut mid-install is the only risk).
  $SUDO apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}" \
    >/dev/null
  echo "tools/setup.sh: installed ${#missing[@]} package(s) with their dependencies in $(( $(date +%s) - start )) s:" \
       "${missing[*]}" >&2
fi

#!/usr/bin/env bash
# The test suite (README line 2; .ci/run runs it, then the long stages: bounded fuzzing and the sanitizer build).
#   1. installs what it needs (tools/setup.sh build test, and mpi where the CUDA suite is built);
#   2. starts, in the background, the pinned Python environment (tools/pyenv.sh: torch, torchao, torchtitan,
#      deepspeed from PyPI, cached under ~/.cache/shardplan/) and the Python module's build venv: downloads
#      overlap the C++ build;
#   3. builds everything into build/ (tools/build.sh all), with the CUDA calibration suite and its MPI bootstrap
#      where nvcc is found (always in CI);
#   4. the formatting check (tools/ci/format.sh), the include-direction check (tools/ci/includes.py), the size
#      check (tools/ci/sizes.py: files <= 500 lines, functions <= 120), ctest (C++ unit, CLI, report and
#      calibration tests, the MPI bootstrap under mpirun -np 2);
#   5. the Python tests: converter, tools (system python3); real-run harness, reference lane, emitted configs
#      (pinned environment); the Python module (`pip install .`, reusing build/'s compilations through ccache)
#      against the CLI, byte for byte.
# In CI (CI=true, which .ci/run exports) a tool or environment that is missing fails the run; elsewhere the
# checks that need it are skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
ci=false
[[ "${CI:-}" == true ]] && ci=true
t0=$(date +%s)
stage() { echo "== tools/test.sh: $* (at $(( $(date +%s) - t0 )) s)" >&2; }
fail_or_warn() {  # message: fatal in CI, a warning elsewhere
  if [[ $ci == true ]]; then echo "tools/test.sh: $1" >&2; exit 1; fi
  echo "tools/test.sh: $1 (fatal only in CI, CI=true)" >&2
}

# The CUDA calibration suite (shardplan-calibrate) with its MPI bootstrap: required in CI, built where nvcc is.
cuda=OFF
if [[ $ci == true ]]; then
  cuda=ON
elif [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null; then
  cuda=AUTO
fi
profiles=(build test)
[[ $cuda != OFF ]] && profiles+=(mpi)
stage "installing packages (tools/setup.sh ${profiles[*]})"
bash tools/setup.sh "${profiles[@]}"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# --- Background: the pinned environment, and the module's venv with its build backend (network and unpacking).
bash tools/pyenv.sh >"$logs/pyenv.out" 2>"$logs/pyenv.err" &
pyenv_pid=$!
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
modvenv=${XDG_CACHE_HOME:-$HOME/.cache}/shardplan/pymodule-$pyver
module_venv() {
  [[ -x $modvenv/bin/python ]] || python3 -m venv "$modvenv" || return 1
  # The build backend pinned in the venv; `pip install --no-build-isolation` then uses it, so nanobind's sources
  # keep one path and the build folder (build-python/) and ccache are reused between runs.
  "$modvenv/bin/python" -m pip --disable-pip-version-check --no-input -q install "scikit-build-core==1.1.2" \
    "nanobind==3.1.0"
}
module_venv >"$logs/venv.out" 2>&1 &
venv_pid=$!

# --- C++: build everything, check, test.
mpi=OFF
[[ $cuda != OFF ]] && mpi=ON
stage "building build/ (CUDA suite: $cuda, MPI: $mpi)"
SHARDPLAN_CUDA=$cuda SHARDPLAN_MPI=$mpi bash tools/build.sh all
stage "formatting and include checks"
bash tools/ci/format.sh
python3 tools/ci/includes.py
python3 tools/ci/sizes.py
stage "ctest"
ctest --test-dir build --output-on-failure -j"$(nproc)"
stage "Python tests: converter and tools"
python3 -m unittest discover -s tests/realrun -p 'test_convert.py' 2>&1 | tail -n 4
python3 -m unittest discover -s tests/tools -p 'test_*.py' 2>&1 | tail -n 4

# --- The pinned environment: the real-run harness (torch on the CPU), the reference lane (tests/reference) and
# the emitted configs run by the real frameworks (tests/emit: DeepSpeedConfig accepts the ds_config, the FSDP2
# script trains 2 steps on the CPU with torchrun and gloo).
stage "waiting for the pinned Python environment (tools/pyenv.sh)"
if wait "$pyenv_pid"; then
  SHARDPLAN_PYTHON=$(cat "$logs/pyenv.out")
  grep -E '^pyenv: (creat|torch)' "$logs/pyenv.err" >&2 || true
  export SHARDPLAN_PYTHON SHARDPLAN_BIN="${SHARDPLAN_BIN:-build/planner/shardplan}"
  stage "Python tests in the pinned environment"
  "$SHARDPLAN_PYTHON" -m unittest discover -s tests/realrun -p 'test_realrun_smoke.py' 2>&1 | tail -n 4
  "$SHARDPLAN_PYTHON" -m unittest discover -s tests/reference -p 'test_*.py' -v
  "$SHARDPLAN_PYTHON" -m unittest discover -s tests/emit -p 'test_*.py' -v
else
  tail -n 20 "$logs/pyenv.err" >&2
  fail_or_warn "tools/pyenv.sh failed: cannot create the Python environment; tests/realrun's harness, tests/reference and tests/emit did not run"
fi

# --- The Python module (pyproject.toml, python/): `pip install .` into the cached venv, in build-python/ -- the
# same compile commands as build/ (position-independent everywhere, one depth below the checkout), so ccache
# answers them -- then tests/python compares it with the CLI built above, byte for byte.
python_module() {
  wait "$venv_pid" || { cat "$logs/venv.out" >&2; return 1; }
  local start cxx
  start=$(date +%s)
  # build/'s compiler by the same name: scikit-build-core would otherwise take Python's sysconfig CXX
  # (x86_64-linux-gnu-g++ on Debian), which ccache hashes as another compiler.
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/CMakeCache.txt)
  CXX=$cxx CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$modvenv/bin/python" -m pip --disable-pip-version-check \
    --no-input -q install --no-build-isolation --no-deps . || return 1
  echo "tools/test.sh: pip install . took $(( $(date +%s) - start )) s" >&2
  SHARDPLAN_BIN=$PWD/build/planner/shardplan "$modvenv/bin/python" -m unittest discover -s tests/python \
    -p 'test_*.py' -v
}
stage "the Python module"
python_module || fail_or_warn "the Python module failed"
stage "done"

#!/usr/bin/env bash
# Builds the whole CPU suite with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan and runs ctest;
# any sanitizer report fails the test that triggered it (UBSan does not recover; ASan exits non-zero).
#
# usage: tools/ci/sanitize.sh [ctest args...]   (env JOBS = build and test parallelism, default 2; a build-asan
#        configured with another compiler is reconfigured from scratch)
set -euo pipefail

jobs=${JOBS:-2}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build-asan

start=$(date +%s)
# clang when installed (tools/setup.sh fuzz; .ci/run installs it): it compiles this instrumented build about a
# quarter faster than GCC (measured per file at -O1 with ASan + UBSan), and -gline-tables-only keeps the line
# tables sanitizer reports need. GCC otherwise, with -g1; its flow warnings are unreliable on ASan-instrumented
# code (a false -Wuninitialized inside boost::optional in Boost.Graph), so those two stay warnings there; the
# ordinary build keeps them as errors.
if command -v clang++ >/dev/null; then
  cxx=$(command -v clang++)
  compiler=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only")
else
  cxx=$(command -v g++)
  compiler=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
            "-DCMAKE_CXX_FLAGS=-Wno-error=uninitialized -Wno-error=maybe-uninitialized")
fi
if [[ -f $build/CMakeCache.txt ]] && ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$cxx" "$build/CMakeCache.txt"; then
  rm -rf "$build"  # configured with the other compiler
fi
compiler+=("-DCMAKE_CXX_COMPILER=$cxx")
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${compiler[@]}" \
  -DSHARDPLAN_SANITIZE=ON -DSHARDPLAN_CUDA=OFF -DSHARDPLAN_TESTS=ON -DSHARDPLAN_TOOLS=OFF >/dev/null
ninja -C "$build" -j"$jobs"
built=$(date +%s)
echo "sanitize.sh: built in $(( built - start )) s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
ctest --test-dir "$build" -j"$jobs" --output-on-failure --timeout 600 "$@" || status=$?
echo "sanitize.sh: tests in $(( $(date +%s) - built )) s, total $(( $(date +%s) - start )) s"
exit $status

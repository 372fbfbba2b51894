#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz in build-fuzz (clang, ASan + UBSan + coverage) and runs each one
# for a bounded time from seed corpora; fails on any crash, sanitizer report, unexpected exception or slow input.
#
# usage: tools/ci/fuzz.sh [SECONDS_PER_HARNESS]   (default 25; env JOBS = parallel harnesses, default 2;
#        MIN_EXECS = executions each harness must reach, default 200 per second of fuzzing; FUZZ_TARGETS = subset,
#        space separated). The floor catches a harness that stalls or has become pathologically slow; it is set well
#        below the observed rates (about 1,000-12,000 executions/s per harness with two harnesses sharing two
#        cores under ASan) so that a loaded machine does not fail CI: 10,000 in 10 s was missed by the slowest
#        harness (nccl_tests_log, 9,885) on an otherwise unchanged tree.
# A crash leaves its input in build-fuzz/artifacts/<target>/; keep it as a regression test by copying it to
# tests/fuzz/regressions/<target>/ (replayed by the robustness tests in every ordinary build).
set -euo pipefail

secs=${1:-25}
jobs=${JOBS:-2}
min_execs=${MIN_EXECS:-$(( secs * 200 ))}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build-fuzz
targets=${FUZZ_TARGETS:-"model_spec hf_config graph_json cluster run_records calibration_profile nccl_tests_log user_config"}

start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSHARDPLAN_FUZZ=ON -DSHARDPLAN_TESTS=OFF -DSHARDPLAN_TOOLS=OFF -DSHARDPLAN_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=-O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  >/dev/null
ninja -C "$build" -j"$jobs" shardplan_fuzzers
echo "fuzz.sh: built in $(( $(date +%s) - start )) s"

# Seeds: the repository's own inputs plus hand-written ones per target.
seeds=$build/seeds
rm -rf "$seeds"
for t in $targets; do mkdir -p "$seeds/$t" "$build/corpus/$t" "$build/artifacts/$t"; cp "$root"/tests/fuzz/seeds/"$t"/* "$seeds/$t"/; done
for t in model_spec run_records; do cp "$root"/models/*.json "$seeds/$t"/ 2>/dev/null || true; done
[[ -d $seeds/cluster ]] && cp "$root"/topologies/presets/*.json "$seeds/cluster"/
[[ -d $seeds/run_records ]] && cp "$root"/tests/data/runs/*.json "$seeds/run_records"/
[[ -d $seeds/nccl_tests_log ]] && cp "$root"/tests/data/nccl-tests/*.txt "$root"/tests/data/nccl-tests/*.json "$seeds/nccl_tests_log"/
for t in $targets; do
  if [[ -d $root/tests/fuzz/regressions/$t ]]; then cp "$root"/tests/fuzz/regressions/"$t"/* "$seeds/$t"/ 2>/dev/null || true; fi
done

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_one() {
  local t=$1 log=$build/fuzz_$1.log
  # -timeout=1: an input slower than one second is a failure (a hang); -rss_limit_mb bounds memory blow-ups.
  if "$build/tests/fuzz/fuzz_$t" "$build/corpus/$t" "$seeds/$t" -dict="$root/tests/fuzz/json.dict" \
       -max_total_time="$secs" -timeout=1 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$t/" >"$log" 2>&1; then
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    if (( ${execs:-0} < min_execs )); then
      echo "FAIL $t: only ${execs:-0} executions in ${secs}s (want >= $min_execs)"; return 1
    fi
    echo "ok   $t: $execs executions in ${secs}s, corpus $(ls "$build/corpus/$t" | wc -l) files"
  else
    echo "FAIL $t: see $log; input saved in $build/artifacts/$t/"
    grep -m3 -E 'ERROR|runtime error|fuzz: unexpected|timeout' "$log" || true
    return 1
  fi
}
export -f run_one
export build seeds secs min_execs root

status=0
printf '%s\n' $targets | xargs -P "$jobs" -I{} bash -c 'run_one {}' || status=1
echo "fuzz.sh: total $(( $(date +%s) - start )) s"
exit $status

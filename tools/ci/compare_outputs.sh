#!/usr/bin/env bash
# Byte-for-byte comparison of two shardplan binaries' outputs on a fixed corpus of plans: `memory --json` and
# `simulate --json` (timing fields stripped: wall-clock seconds of the tool itself) for dense and MoE plans
# across the runtimes and mechanisms, and `plan --json --top 5` for four searches. For a refactoring that
# must not change a number (issue 29: free_group without bytes).
# Usage: tools/ci/compare_outputs.sh BEFORE_BIN AFTER_BIN [OUTDIR]; exit 1 on any difference.
set -uo pipefail
before=$1
after=$2
out=${3:-$(mktemp -d)}
mkdir -p "$out"
plans=(
  "--model llama3-8b --gpus 8 --runtime fsdp2 --ac selective --grad-accum 4"
  "--model llama3-8b --gpus 8 --runtime fsdp1 --ac full --grad-accum 2"
  "--model llama3-8b --gpus 16 --runtime fsdp2 --shard-group 8 --grad-accum 2"
  "--model llama3-8b --gpus 16 --runtime deepspeed --zero 3 --hpz-partition 8 --quantized-weights --quantized-gradients"
  "--model llama3-8b --gpus 8 --runtime deepspeed --zero 2 --precision fp16-mixed"
  "--model llama3-8b --gpus 8 --runtime fsdp2 --activation-offload all --ac none"
  "--model llama3-8b --gpus 8 --runtime fsdp2 --lora-rank 16"
  "--model llama3-8b --gpus 8 --runtime fsdp1 --lora-rank 16 --lora-base nf4"
  "--model llama3-70b --gpus 64 --runtime fsdp2 --tp 8 --ac full --grad-accum 8"
  "--model llama3-70b --gpus 64 --runtime megatron --zero 1 --tp 8 --pp 4 --grad-accum 8"
  "--model llama3-70b --gpus 32 --runtime fsdp2 --tp 8 --pp 2 --grad-accum 8 --pp-schedule interleaved-1f1b"
  "--model llama3-70b --gpus 64 --runtime megatron --tp 8 --zero 1 --activation-offload 4 --grad-accum 4"
  "--model llama3-8b --gpus 8 --runtime fsdp2 --hold-logits --foreach-optimizer --grad-accum 3"
  "--model llama3-8b --gpus 8 --runtime deepspeed --zero 0 --precision fp16-mixed"
  "--model llama3-8b --gpus 8 --runtime fsdp2 --optimizer muon --grad-accum 2"
  "--model qwen3-30b-a3b --gpus 16 --runtime fsdp2 --ep 8 --ac full --grad-accum 2"
  "--model deepseek-v3 --gpus 256 --runtime fsdp2 --ep 32 --pp 4 --ac full --grad-accum 8"
)
searches=(
  "--model llama3-70b --cluster dgx-h100 --gpus 2048 --global-batch 2048"
  "--model qwen3-235b-a22b --cluster dgx-h100 --gpus 2048 --global-batch 2048"
  "--model llama3-8b --gpus 64 --global-batch 256"
  "--model qwen3-30b-a3b --gpus 64 --global-batch 256"
)
strip='import json,sys
def s(x):
    if isinstance(x, dict):
        return {k: s(v) for k, v in x.items() if k not in ("seconds", "simulated_per_s", "considered_per_s")}
    if isinstance(x, list):
        return [s(v) for v in x]
    return x
print(json.dumps(s(json.load(sys.stdin)), indent=1, sort_keys=True))'
diffs=0
n=0
run() {  # NAME ARGS...
  local name=$1
  shift
  for side in before after; do
    local bin=$before
    [[ $side == after ]] && bin=$after
    "$bin" "$@" --json - 2>"$out/$name.$side.stderr" | python3 -c "$strip" >"$out/$name.$side.json" 2>/dev/null
    local rc=${PIPESTATUS[0]}
    # The search's progress lines and its wall-clock time are what may differ.
    grep -v '^shardplan: searching:' "$out/$name.$side.stderr" | sed -E 's/ in [0-9.]+ s$/ in N s/' >"$out/$name.$side.err"
    echo "rc=$rc" >>"$out/$name.$side.err"
  done
  n=$((n + 1))
  if ! cmp -s "$out/$name.before.json" "$out/$name.after.json" || ! cmp -s "$out/$name.before.err" "$out/$name.after.err"; then
    echo "DIFF $name: $*"
    diffs=$((diffs + 1))
  else
    echo "same $name ($(wc -c <"$out/$name.after.json") bytes, $(tail -1 "$out/$name.after.err"))"
  fi
}
i=0
for p in "${plans[@]}"; do
  # shellcheck disable=SC2086
  run "memory$i" memory $p
  # shellcheck disable=SC2086
  run "simulate$i" simulate $p
  i=$((i + 1))
done
i=0
for s in "${searches[@]}"; do
  # shellcheck disable=SC2086
  run "plan$i" plan $s --top 5
  i=$((i + 1))
done
echo "$n outputs compared, $diffs differ (files in $out)"
[[ $diffs -eq 0 ]]

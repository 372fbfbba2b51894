#!/usr/bin/env bash
# Regenerates planner/report/margin_stats.json -- the measured error statistics behind planner/report/margin.hpp
# (the OOM-risk margin, the default planner headroom, the throughput tie tolerance) -- from `shardplan validate`
# on the committed records (tests/data/runs/published_dev.json). Builds the CLI first (tools/build.sh).
#   bash tools/margin_stats.sh           (SHARDPLAN_BIN: use that binary instead of building build/)
# The build reads the JSON into a header (cmake/EmbedMarginStats.cmake); the test "planner/report/
# margin_stats.json is what validate gives on the committed records" fails when it is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SHARDPLAN_BIN:-}
if [[ -z "$bin" ]]; then
  bash tools/build.sh shardplan >/dev/null
  bin=build/planner/shardplan
fi
out=planner/report/margin_stats.json
tmp=$(mktemp)
trap 'rm -f "$tmp" "$out.new"' EXIT
"$bin" validate tests/data/runs/published_dev.json --json "$tmp" --quiet >/dev/null
python3 - "$tmp" >"$out.new" <<'PY'
import json, math, sys

v = json.load(open(sys.argv[1]))
terms = {s["term"]: s for s in v["summary"]}  # in-scope records only, as margin.hpp quotes them
reserved, tput = terms["peak_reserved_bytes"], terms["tokens_per_s_per_gpu"]
# The default headroom's rule (planner/report/margin.cpp default_headroom): the largest under-prediction of
# reserved memory, (measured - predicted) / measured = -rel_error, over the in-scope rows, rounded up to a
# whole percent.
under = [(-r["rel_error"], r["id"]) for r in v["rows"]
         if r["term"] == "peak_reserved_bytes" and "out_of_scope" not in r and r["measured"] > 0]
worst, worst_id = max(under)
doc = {
    "schema": "shardplan.margin-stats/1",
    "generated_by": "bash tools/margin_stats.sh (shardplan validate tests/data/runs/published_dev.json); "
                    "do not edit by hand",
    "records": "tests/data/runs/published_dev.json",
    "reserved_memory_error": {"term": reserved["term"], "runs": reserved["n"],
                              "median_abs": reserved["median_abs_error"], "worst_abs": reserved["worst_abs_error"]},
    "throughput_error": {"term": tput["term"], "runs": tput["n"], "median_abs": tput["median_abs_error"],
                         "mape": tput["mape"]},
    "default_headroom": {"largest_under_prediction": max(worst, 0.0), "record": worst_id,
                         "value": math.ceil(100 * max(worst, 0.0) - 1e-9) / 100},
}
print(json.dumps(doc, indent=1))
PY
if cmp -s "$out.new" "$out"; then
  echo "tools/margin_stats.sh: $out is up to date"
else
  mv "$out.new" "$out"
  echo "tools/margin_stats.sh: wrote $out (commit it)"
fi

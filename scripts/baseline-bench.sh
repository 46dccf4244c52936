#!/usr/bin/env bash
# The latency-incidents benchmark of the baseline detectors (docs/baseline.md):
# builds inferwatch, runs `inferwatch detect` over the default set and over
# sets generated with seeds 1-5, and prints score.py's table for each.
#   scripts/baseline-bench.sh [SEEDS...]      (default: 1 2 3 4 5)
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${BENCH:-../shared/bench/latency-incidents}
seeds=${*:-1 2 3 4 5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/build.sh "$work" ./cmd/inferwatch
run() {
  local name=$1 data=$2 start end
  start=$(date +%s%N)
  "$work/inferwatch" detect --dir "$data" --out-dir "$work/out-$name" 2>/dev/null
  end=$(date +%s%N)
  echo "== $name (detect over $(ls "$data"/*_ms.csv | wc -l) series: $(( (end - start) / 1000000 )) ms)"
  python3 "$bench/score.py" "$data" "$work/out-$name"
}
run default "$bench/data"
for s in $seeds; do
  python3 "$bench/generate.py" --seed "$s" --out "$work/seed$s" >/dev/null
  run "seed$s" "$work/seed$s"
done

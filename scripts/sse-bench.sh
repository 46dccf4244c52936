#!/usr/bin/env bash
# What a proxy adds to each server-sent event of a streamed generation
# (issue #12): direct, through inferwatch, and through nginx with
# proxy_buffering off, measured in the same run by BenchmarkSSEEventLag
# (proxy/sse_bench_test.go): 200 events 2 ms apart per generation, the three
# paths interleaved, each event's lag from the server's flush to the
# client's read. Prints the quantiles, what each proxy adds over direct, and
# inferwatch's added delay as a ratio of nginx's (< 1: inferwatch adds less).
#
#   scripts/sse-bench.sh            # 40 generations per path (about 30 s)
#   SSE_BENCH_N=100 scripts/sse-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
n=${SSE_BENCH_N:-40}
command -v nginx >/dev/null || { echo "sse-bench: nginx not found (Debian: apt-get install nginx)" >&2; exit 1; }
out=$(go test -count=1 -run XXX -bench BenchmarkSSEEventLag -benchtime "${n}x" ./proxy)
line=$(grep '^BenchmarkSSEEventLag' <<<"$out") || { echo "$out" >&2; exit 1; }
echo "sse-bench $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$n generations x 200 events per path; lag = client read - server flush, µs"
awk '{
  for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
  printf "%-11s %9s %9s %11s %11s\n", "path", "p50", "p99", "added p50", "added p99"
  split("direct inferwatch nginx", p, " ")
  for (k = 1; k <= 3; k++) {
    n = p[k]
    if (!((n "-p50-µs") in v)) continue
    printf "%-11s %9.1f %9.1f %11s %11s\n", n, v[n "-p50-µs"], v[n "-p99-µs"],
      (k == 1 ? "-" : sprintf("%.1f", v[n "-added-p50-µs"])), (k == 1 ? "-" : sprintf("%.1f", v[n "-added-p99-µs"]))
  }
  if (v["nginx-added-p50-µs"] > 0)
    printf "inferwatch / nginx added: p50 %.2f, p99 %.2f\n", v["inferwatch-added-p50-µs"] / v["nginx-added-p50-µs"], v["inferwatch-added-p99-µs"] / v["nginx-added-p99-µs"]
}' <<<"$line"

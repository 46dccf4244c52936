#!/usr/bin/env bash
# Runs every fuzz target in the module (`func FuzzX` in a _test.go file), one
# after the other, for FUZZ_TIME each, and prints a line per target and a
# summary. The seed corpora already run in every `go test`; this is the
# campaign that looks for new failures. A target that fails leaves its
# input under the package's testdata/fuzz/ (add it to git with the fix: the
# corpus that found a bug is kept) and its output under FUZZ_LOGS.
#   FUZZ_TIME   [60s]  -fuzztime for each target (a duration, or Nx runs)
#   FUZZ_MATCH  []     only targets whose "package FuzzName" matches this
#                      extended regular expression, e.g. 'proxy/|FuzzSSE'
#   FUZZ_LOGS   [a temporary folder]
#   FUZZ_MINIMIZE [10s] -fuzzminimizetime: how long a new input is minimised.
#                      Go's 60 s default stalls a target whose inputs take
#                      milliseconds (FuzzForwarder: real sockets) for a
#                      minute after each new coverage input, executing
#                      nothing new meanwhile
# Exit status: 0 when every target passed, 1 otherwise. A target that ends
# with only "context deadline exceeded" and writes no failing input counts as
# "flaky", not failed: Go 1.26's fuzzing coordinator can report its own
# -fuzztime deadline that way (golang/go#75804, fixed in Go 1.27); it is
# printed, with the log kept.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZ_TIME:-60s}
minimize=${FUZZ_MINIMIZE:-10s}
match=${FUZZ_MATCH:-}
logs=${FUZZ_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/fuzz.XXXXXX")}
mkdir -p "$logs"

# "./pkg FuzzName" for each target, in a stable order.
targets=$(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]+\(' . |
  sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\($#\1 \2#' | sort -u)
if [ -n "$match" ]; then
  targets=$(grep -E -- "$match" <<<"$targets" || true)
fi
[ -n "$targets" ] || { echo "fuzz.sh: no fuzz target matches '$match'" >&2; exit 1; }

failed=0 passed=0 flaky=0
while read -r pkg name; do
  log=$logs/$(tr '/.' '__' <<<"${pkg#./}")-$name.log
  start=$(date +%s)
  # </dev/null: the loop reads its targets from stdin; a test must not.
  if go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$pkg" </dev/null >"$log" 2>&1; then
    status=ok passed=$((passed + 1))
  elif [ "$(grep -vE '^(fuzz: elapsed|--- FAIL: |FAIL|exit status)' "$log" | sed 's/^[[:space:]]*//')" = "context deadline exceeded" ]; then
    # nothing else printed: no failing input (Go says where it wrote one)
    status=flaky flaky=$((flaky + 1))
  else
    status=FAIL failed=$((failed + 1))
  fi
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  printf '%-5s %-28s %-22s %4ss  %s execs\n' "$status" "$pkg" "$name" "$(($(date +%s) - start))" "${execs:-?}"
  if [ "$status" = flaky ]; then
    echo "     context deadline exceeded at -fuzztime, no failing input: golang/go#75804"
  elif [ "$status" = FAIL ]; then
    grep -v '^fuzz: elapsed' "$log" | sed 's/^/     /' | head -20 || true
  fi
done <<<"$targets"

echo "fuzz.sh: $passed passed, $failed failed, $flaky flaky (FUZZ_TIME=$fuzztime; logs in $logs)"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The tests: the README's second command, and what .ci/run runs once it has
# installed the services they start. Every test runs, each package as few
# times as its checks need:
#
#  1. race: every package under the race detector, but the end-to-end suites
#     of the binary and the image (they run the built binary in other
#     processes, where -race would only slow their timed demos down); then
#     the proxy package again with INFERWATCH_DATA_PLANE=frame, so the frame
#     plane's forwarding (16 concurrent soak workers over pooled, multiplexed
#     upstream connections) is raced too;
#  2. plain: those end-to-end suites, and the packages whose tests change
#     under -race (a _test.go file with a race build constraint: the 10^5
#     soaks are 5·10^3 there, load measurements and benchmark replays skip);
#  3. frame: the suites that move bytes (proxy, sidecar, tracing, the
#     end-to-end suite) again, whole, with INFERWATCH_DATA_PLANE=frame: the
#     frame plane becomes the default only once it holds all of them (#9).
#
# -p 1 runs one package at a time: several suites drive real load and
# measure rates, and on 2 cores they must not starve each other.
#   TEST_TIMEOUT [30m]  go test -timeout, per pass
#   TEST_PASSES  [race plain frame]  which passes to run
# Extra arguments go to every `go test` (e.g. -v, -count=1).
set -euo pipefail
cd "$(dirname "$0")/.."

timeout=${TEST_TIMEOUT:-30m}
passes=${TEST_PASSES:-race plain frame}
mod=$(go list -m)
e2e="$mod/cmd/inferwatch $mod/deploy/image"

raceDependent=$(grep -rlE --include='*_test.go' '^//go:build .*race' . |
  xargs -r -n1 dirname | sort -u | sed "s#^\.#$mod#")
unit=$(go list ./... | grep -vxF -f <(tr ' ' '\n' <<<"$e2e"))

run() { # run NAME go test ARGS...: one pass, timed
  local name=$1 t0=$SECONDS
  shift
  echo "--- test pass: $name"
  "$@"
  echo "    ($((SECONDS - t0))s: test pass $name)"
}
pass_race() {
  run race go test -race -p 1 -timeout "$timeout" "$@" $unit
  run race-frame env INFERWATCH_DATA_PLANE=frame go test -race -p 1 -timeout "$timeout" "$@" ./proxy
}
pass_plain() { run plain go test -p 1 -timeout "$timeout" "$@" $e2e $raceDependent; }
pass_frame() {
  run frame env INFERWATCH_DATA_PLANE=frame go test -p 1 -timeout "$timeout" "$@" \
    ./proxy/... ./sidecar/... ./tracing/... ./cmd/inferwatch/...
}

for pass in $passes; do # a misspelt pass fails before any runs
  if ! declare -F "pass_$pass" >/dev/null; then
    echo "test.sh: TEST_PASSES: unknown pass '$pass' ($(declare -F | sed -n 's/^declare -f pass_//p' | paste -sd ' '))" >&2
    exit 2
  fi
done
start=$SECONDS
for pass in $passes; do
  "pass_$pass" "$@"
done
echo "--- test.sh: passes ($passes) done in $((SECONDS - start))s"

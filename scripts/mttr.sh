#!/usr/bin/env bash
# Time from fault start to a correct `inferwatch diagnose` report, per demo
# fault (docs/diagnose.md): runs the end-to-end diagnosis test, which starts
# the demo with each fault, asks `inferwatch diagnose` every second from the
# fault's start until the top cause is the injected one, and prints a table.
#   scripts/mttr.sh [TEST-REGEXP]   (default: every fault of TestE2EDiagnose)
# The test's whole output, with every report it read, is kept in
# out/mttr-<time>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:-TestE2EDiagnose}
mkdir -p out
out=out/mttr-$(date -u +%Y%m%d-%H%M%S).log
status=0
go test -p 1 -count=1 -run "$run" -v ./cmd/inferwatch >"$out" 2>&1 || status=$?
printf '%-28s %s\n' "fault" "seconds to a correct report"
grep -E '^MTTR ' "$out" | sed -E 's/^MTTR fault="([^"]*)" seconds=(.*)$/\1\t\2/' | while IFS=$'\t' read -r f s; do
  printf '%-28s %s\n' "$f" "$s"
done
grep -E '^--- (FAIL|SKIP)|^    --- (FAIL|SKIP)' "$out" || true
if [ "$status" -ne 0 ]; then
  echo "the test failed; its output:" >&2
  tail -60 "$out" >&2
fi
echo "the reports behind these figures: $out"
exit "$status"

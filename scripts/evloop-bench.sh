#!/usr/bin/env bash
# How much of the frame plane's HTTP/1.1 cost is Go's runtime (issue #9):
# the demo model server, then the same HTTP JSON load straight at it,
# through `inferwatch proxy --data-plane frame`, through nginx and through
# the three modes of scripts/evloop, in turn, for ROUNDS rounds. No mode
# measures anything, and all frame messages the same way: `evloop` runs
# one epoll loop on one locked thread over raw sockets (a floor for a Go
# process), `go-conns` a goroutine per connection on Go's netpoller (how Go
# code usually forwards), `uring` one io_uring on one locked thread (sends
# linked to the receives that follow them: no system call per operation).
# iw-frame − go-conns is then the sidecar's own work, go-conns − evloop
# what the goroutine model costs, evloop − uring what a system call per
# operation costs.
#
# Each round measures each target at 1000 calls/s (10 s after a 2 s
# warm-up; user and system CPU apart) and at full load (5 s, 64 in flight).
# Added latency is a target's p50 minus direct's in the same round, so slow
# drifts of the machine cancel; the summary gives the medians over rounds.
#
# Needs Go and nginx. About 110 s a round.
#   EVLOOP_ROUNDS    [3]
#   EVLOOP_PORT_BASE [47200]  ports BASE+1..BASE+12 on 127.0.0.1
#   EVLOOP_BASE_BIN  []       another inferwatch binary (say, built from the
#                             commit before a change), measured as iw-base
#                             in the same rounds: an A/B of the change
#   EVLOOP_BASE_ENV  []       environment for iw-base, e.g. GOMAXPROCS=1; set
#                             alone, iw-base is this checkout's binary under
#                             it: an A/B of a runtime setting
#   EVLOOP_ROTATE    [1]      round r starts at the r-th target; 0: the same
#                             order every round (nginx last), as before
#                             2026-12-06 13:00 UTC
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${EVLOOP_ROUNDS:-3}
base=${EVLOOP_PORT_BASE:-47200}
ms=127.0.0.1:$((base + 1)) ms_grpc=127.0.0.1:$((base + 2))
iw=127.0.0.1:$((base + 3)) iw_grpc=127.0.0.1:$((base + 4)) iw_admin=127.0.0.1:$((base + 5))
ng=127.0.0.1:$((base + 6)) ev=127.0.0.1:$((base + 7)) gc=127.0.0.1:$((base + 8))
ib=127.0.0.1:$((base + 9)) ib_grpc=127.0.0.1:$((base + 10)) ib_admin=127.0.0.1:$((base + 11))
ur=127.0.0.1:$((base + 12))
base_bin=${EVLOOP_BASE_BIN:-}
base_env=${EVLOOP_BASE_ENV:-}
rotate=${EVLOOP_ROTATE:-1}
[[ $rotate =~ ^[01]$ ]] || { echo "evloop-bench: EVLOOP_ROTATE=$rotate: want 0 or 1" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/evloop-bench.XXXXXX")
started=()
trap 'kill ${started[@]+"${started[@]}"} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT

command -v nginx >/dev/null || { echo "evloop-bench: nginx not found (Debian: apt-get install nginx)" >&2; exit 1; }
scripts/build.sh "$tmp" ./cmd/inferwatch
go build -o "$tmp/evloop" ./scripts/evloop
[ -n "$base_env" ] && [ -z "$base_bin" ] && base_bin=$tmp/inferwatch

up() { # ADDR: wait until something accepts there
  for _ in $(seq 100); do
    if (: <>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "evloop-bench: nothing listens on $1" >&2
  exit 1
}

"$tmp/inferwatch" modelserver --http-listen "$ms" --grpc-listen "$ms_grpc" >"$tmp/ms.log" 2>&1 &
started+=($!)
up "$ms"
"$tmp/inferwatch" proxy --data-plane frame --http-listen "$iw" --http-upstream "$ms" \
  --grpc-listen "$iw_grpc" --grpc-upstream "$ms_grpc" --admin-listen "$iw_admin" >"$tmp/iw.log" 2>&1 &
iw_pid=$!
started+=($iw_pid)
up "$iw"
if [ -n "$base_bin" ]; then
  # shellcheck disable=SC2086 # base_env is a list of NAME=VALUE words
  env $base_env "$base_bin" proxy --data-plane frame --http-listen "$ib" --http-upstream "$ms" \
    --grpc-listen "$ib_grpc" --grpc-upstream "$ms_grpc" --admin-listen "$ib_admin" >"$tmp/ib.log" 2>&1 &
  ib_pid=$!
  started+=($ib_pid)
  up "$ib"
fi
"$tmp/evloop" -listen "$ev" -upstream "$ms" >"$tmp/ev.log" 2>&1 &
ev_pid=$!
started+=($ev_pid)
up "$ev"
"$tmp/evloop" -mode goroutines -listen "$gc" -upstream "$ms" >"$tmp/gc.log" 2>&1 &
gc_pid=$!
started+=($gc_pid)
up "$gc"
"$tmp/evloop" -mode uring -listen "$ur" -upstream "$ms" >"$tmp/ur.log" 2>&1 &
ur_pid=$!
started+=($ur_pid)
up "$ur"
# The HTTP half of scripts/bench.sh's nginx (scripts/nginx-conf.sh).
# shellcheck source=scripts/nginx-conf.sh
. scripts/nginx-conf.sh
nginx_conf "$tmp/nginx" "$ng" "$ms"
nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" &
ng_pid=$!
started+=($ng_pid)
up "$ng"
ng_pids=$ng_pid
for _ in $(seq 50); do
  ng_pids="$ng_pid $(pgrep -P "$ng_pid" | tr '\n' ' ')"
  [ "$(wc -w <<<"$ng_pids")" -ge 3 ] && break
  sleep 0.1
done

ticks() { # PID...: "user system" ticks so far, summed
  local u=0 k=0 p a b
  for p in "$@"; do
    read -r a b < <(sed 's/.*) //' "/proc/$p/stat" | awk '{ print $12, $13 }')
    u=$((u + a)) k=$((k + b))
  done
  echo "$u $k"
}
field() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" <<<"$1"; }
load() { # ADDR QPS DURATION INFLIGHT
  "$tmp/inferwatch" load --addr "$1" --protocol http --model mnist-mlp --payload 0 --json-body \
    --qps "$2" --duration "$3" --max-inflight "$4" --format json
}

hz=$(getconf CLK_TCK)
declare -A pidsOf=([direct]="" [iw-frame]=$iw_pid [nginx]=$ng_pids [evloop]=$ev_pid [go-conns]=$gc_pid [uring]=$ur_pid)
declare -A addrOf=([direct]=$ms [iw-frame]=$iw [nginx]=$ng [evloop]=$ev [go-conns]=$gc [uring]=$ur)
targets=(direct iw-frame go-conns evloop uring nginx)
if [ -n "$base_bin" ]; then
  pidsOf[iw-base]=$ib_pid addrOf[iw-base]=$ib
  targets=(direct iw-frame iw-base go-conns evloop uring nginx)
fi
rows=$tmp/rows
echo "evloop-bench  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)  $(nproc) CPUs  loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-9s %8s %8s %8s %9s %9s %10s %11s\n' round target "p50 µs" "p99 µs" "+p50 µs" "user/call" "sys/call" "max call/s" "CPUus/call"
per() { awk -v d="$1" -v hz="$hz" -v n="$2" 'BEGIN { printf "%.0f", d / hz * 1e6 / n }'; } # TICKS CALLS: µs a call
for r in $(seq "$rounds"); do
  # Round r starts at the r-th target, so none is always measured after the
  # same one (EVLOOP_ROTATE=0: the listed order every round).
  order=("${targets[@]}")
  if [ "$rotate" = 1 ]; then
    k=$(((r - 1) % ${#targets[@]}))
    order=("${targets[@]:k}" "${targets[@]:0:k}")
  fi
  declare -A got=()
  for tg in "${order[@]}"; do
    addr=${addrOf[$tg]}
    pids=${pidsOf[$tg]} # direct: none, 0 ticks
    load "$addr" 1000 2s 256 >/dev/null
    # shellcheck disable=SC2086
    read -r u0 k0 < <(ticks $pids)
    out=$(load "$addr" 1000 10s 256)
    # shellcheck disable=SC2086
    read -r u1 k1 < <(ticks $pids)
    ok=$(field "$out" ok)
    p50=$(field "$out" p50_us)
    p99=$(field "$out" p99_us)
    usr=$(per $((u1 - u0)) "$ok") sys=$(per $((k1 - k0)) "$ok")
    # shellcheck disable=SC2086
    read -r u0 k0 < <(ticks $pids)
    mx=$(load "$addr" 20000 5s 64)
    # shellcheck disable=SC2086
    read -r u1 k1 < <(ticks $pids)
    mtp=$(field "$mx" throughput)
    mcpu=$(per $((u1 - u0 + k1 - k0)) "$(field "$mx" ok)")
    if [ "$tg" = direct ]; then usr=- sys=- mcpu=-; fi
    got[$tg]="$p50 $p99 $usr $sys $mtp $mcpu"
  done
  read -r direct_p50 _ < <(echo "${got[direct]}")
  for tg in "${targets[@]}"; do
    read -r p50 p99 usr sys mtp mcpu < <(echo "${got[$tg]}")
    added=-
    if [ "$tg" != direct ]; then added=$((p50 - direct_p50)); fi
    printf '%-6s %-9s %8s %8s %8s %9s %9s %10.0f %11s\n' "$r" "$tg" "$p50" "$p99" "$added" "$usr" "$sys" "$mtp" "$mcpu"
    echo "$tg $added $usr $sys $mtp $mcpu" >>"$rows"
  done
  unset got
done
echo
echo "medians over $rounds rounds (+p50 over the same round's direct; user and system CPU a call at 1000/s; max call/s also relative to nginx's)"
printf '%-9s %8s %9s %9s %10s %8s %11s\n' target "+p50 µs" "user/call" "sys/call" "max call/s" "÷nginx" "CPUus/call"
med() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ng_tp=$(awk '$1 == "nginx" { print $5 }' "$rows" | med)
for tg in "${targets[@]}"; do
  col() { awk -v t="$tg" -v c="$1" '$1 == t { print $c }' "$rows" | med; }
  tp=$(col 5)
  ratio=$(awk -v a="$tp" -v b="$ng_tp" 'BEGIN { printf "%.2f", a / b }')
  if [ "$tg" = direct ]; then
    printf '%-9s %8s %9s %9s %10.0f %8s %11s\n' "$tg" - - - "$tp" "$ratio" -
  else
    printf '%-9s %8s %9s %9s %10.0f %8s %11s\n' "$tg" "$(col 2)" "$(col 3)" "$(col 4)" "$tp" "$ratio" "$(col 6)"
  fi
done

#!/usr/bin/env bash
# What the sidecar costs, measured: the same open-loop load (`inferwatch load`)
# straight at the demo model server, through `inferwatch proxy` on each data
# plane (iw-stdlib: net/http; iw-frame: frame-level HTTP/2, --data-plane
# frame), and through nginx (grpc_pass / proxy_pass) and HAProxy as the
# reference proxies, one target after the other, all on 127.0.0.1. Prints a
# table of p50, p99, throughput, the latency each proxy adds over direct, CPU
# per call, the ratios to nginx and the memory of each; writes the raw
# figures to out/bench-<time>.json and the table to out/bench-<time>.txt.
#
# Needs Go, nginx with the gRPC proxy module (Debian: `nginx`) and HAProxy
# (Debian: `haproxy`). About 8 minutes a round.
#
# A scenario is measured BENCH_ROUNDS times, the targets taking turns in each
# round, and the table gives medians over the rounds (added latency: the
# median of each round's difference to that round's direct run; late and
# failed calls: summed; other%: the worst round). One 10 s window moves an
# added p50 by a few hundred µs from run to run on this kind of machine; the
# rounds' own rows are printed first, so the spread is there to see.
#
# Environment knobs (defaults in brackets):
#   BENCH_PORT_BASE [47100]  ports BASE+1..BASE+39 on 127.0.0.1
#   BENCH_DURATION  [10s]    each fixed-rate measurement
#   BENCH_MAX_DURATION [5s]  each max-throughput measurement
#   BENCH_WARMUP    [2s]     warm-up of each target before each measurement
#   BENCH_SCENARIOS [all]    comma-separated scenario ids to run, e.g. grpc-small-1k
#   BENCH_ROUNDS    [3]      rounds of every scenario
#   BENCH_ROTATE    [1]      round r starts its turns at the r-th target
#                            (wrapping), so no target is always measured
#                            after the same one; 0: every round in the same
#                            order, as runs before 2026-12-06 13:00 UTC
#
# Columns: CPU% is the proxy's own CPU during the measurement (100 = one
# core; nginx: master + workers); CPUus/call is that CPU over the calls
# carried; other% is CPU used by processes that are not part of the
# benchmark (other work on the machine), a disturbance indicator.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BENCH_PORT_BASE:-47100}
dur=${BENCH_DURATION:-10s}
maxdur=${BENCH_MAX_DURATION:-5s}
warm=${BENCH_WARMUP:-2s}
only=${BENCH_SCENARIOS:-}
rounds=${BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench: BENCH_ROUNDS=$rounds is not a positive whole number" >&2; exit 1; }
rotate=${BENCH_ROTATE:-1}
[[ $rotate =~ ^[01]$ ]] || { echo "bench: BENCH_ROTATE=$rotate: want 0 or 1" >&2; exit 1; }

ms_grpc=127.0.0.1:$((base + 1)) ms_http=127.0.0.1:$((base + 2))
iw_grpc=127.0.0.1:$((base + 11)) iw_http=127.0.0.1:$((base + 12)) iw_admin=127.0.0.1:$((base + 19))
iwf_grpc=127.0.0.1:$((base + 13)) iwf_http=127.0.0.1:$((base + 14)) iwf_admin=127.0.0.1:$((base + 18))
ng_grpc=127.0.0.1:$((base + 21)) ng_http=127.0.0.1:$((base + 22))
ha_grpc=127.0.0.1:$((base + 31)) ha_http=127.0.0.1:$((base + 32))

bin=bin/inferwatch
tmp=$(mktemp -d "${TMPDIR:-/tmp}/inferwatch-bench.XXXXXX")
declare -A pids=()  # name -> pid of every process this script started
ng_workers=()
sampler=

die() {
  echo "bench: $*" >&2
  exit 1
}

cleanup() {
  local rc=$? name pid i
  trap - EXIT INT TERM
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
  for name in haproxy nginx iwframe inferwatch modelserver; do
    pid=${pids[$name]:-}
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for name in haproxy nginx iwframe inferwatch modelserver; do
    pid=${pids[$name]:-}
    [ -n "$pid" ] || continue
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in "${ng_workers[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- helpers ---------------------------------------------------------------

log_tail() { echo "--- last lines of $1:"; tail -n 20 "$tmp/$1.log" 2>/dev/null || true; }

# start NAME CMD...: runs CMD in the background, output in $tmp/NAME.log.
start() {
  local name=$1
  shift
  "$@" >"$tmp/$name.log" 2>&1 &
  pids[$name]=$!
}

alive() {
  local name
  for name in "${!pids[@]}"; do
    if ! kill -0 "${pids[$name]}" 2>/dev/null; then
      log_tail "$name" >&2
      die "$name (pid ${pids[$name]}) has exited"
    fi
  done
}

# wait_port NAME HOST:PORT: until the port accepts, for at most 10 s.
wait_port() {
  local name=$1 host=${2%:*} port=${2##*:} i
  for i in $(seq 100); do
    kill -0 "${pids[$name]}" 2>/dev/null || { log_tail "$name" >&2; die "$name exited before listening on $2"; }
    if (: <>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log_tail "$name" >&2
  die "$name does not accept on $2 after 10 s"
}

# sum_status FIELD PID...: sum of a /proc/PID/status field (kB) over PIDs.
sum_status() {
  local f=$1 p v sum=0
  shift
  for p in "$@"; do
    v=$(awk -v f="$f:" '$1 == f { print $2 }' "/proc/$p/status" 2>/dev/null || true)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

# sum_pss PID...: proportional set size (kB): shared pages split among sharers.
sum_pss() {
  local p v sum=0
  for p in "$@"; do
    v=$(awk '$1 == "Pss:" { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || true)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

# cpu_ticks PID...: user+system clock ticks used so far.
cpu_ticks() {
  local p v sum=0
  for p in "$@"; do
    v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }' || true)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

# busy_ticks: CPU ticks the whole machine spent busy so far.
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# own_ticks: CPU ticks of the benchmark's processes: the servers, this shell
# and the load generators it has waited for.
own_ticks() {
  local self
  self=$(sed 's/.*) //' "/proc/$$/stat" | awk '{ print $12 + $13 + $14 + $15 }')
  # shellcheck disable=SC2046
  echo $((self + $(cpu_ticks "${pids[modelserver]}" "${pids[inferwatch]}" "${pids[iwframe]}" "${pids[nginx]}" "${ng_workers[@]}" "${pids[haproxy]}")))
}

children() { # PID: its direct children, from /proc
  local d
  for d in /proc/[0-9]*; do
    if [ "$(sed 's/.*) //' "$d/stat" 2>/dev/null | awk '{ print $2 }')" = "$1" ]; then echo "${d#/proc/}"; fi
  done
}

# jnum JSON KEY: a number from the load generator's one-line JSON.
jnum() {
  local v
  v=$(printf '%s' "$1" | sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p")
  echo "${v:-0}"
}

now_ns() { date +%s%N; }

# --- build and start -------------------------------------------------------

command -v nginx >/dev/null || die "nginx not found (Debian: apt-get install nginx)"
command -v haproxy >/dev/null || die "haproxy not found (Debian: apt-get install haproxy)"
for a in "$ms_grpc" "$ms_http" "$iw_grpc" "$iw_http" "$iw_admin" "$iwf_grpc" "$iwf_http" "$iwf_admin" "$ng_grpc" "$ng_http" "$ha_grpc" "$ha_http"; do
  if (: <>"/dev/tcp/${a%:*}/${a##*:}") 2>/dev/null; then
    die "$a is already taken by another process (set BENCH_PORT_BASE to use other ports)"
  fi
done
echo "bench: building $bin"
scripts/build.sh "$(dirname "$bin")" ./cmd/inferwatch

start modelserver "$bin" modelserver --grpc-listen "$ms_grpc" --http-listen "$ms_http"
wait_port modelserver "$ms_grpc"
wait_port modelserver "$ms_http"

start inferwatch "$bin" proxy --data-plane stdlib \
  --grpc-listen "$iw_grpc" --grpc-upstream "$ms_grpc" \
  --http-listen "$iw_http" --http-upstream "$ms_http" \
  --admin-listen "$iw_admin" --drain-timeout 2s
wait_port inferwatch "$iw_grpc"
wait_port inferwatch "$iw_http"
start iwframe "$bin" proxy --data-plane frame \
  --grpc-listen "$iwf_grpc" --grpc-upstream "$ms_grpc" \
  --http-listen "$iwf_http" --http-upstream "$ms_http" \
  --admin-listen "$iwf_admin" --drain-timeout 2s
wait_port iwframe "$iwf_grpc"
wait_port iwframe "$iwf_http"

# shellcheck source=scripts/nginx-conf.sh
. scripts/nginx-conf.sh
nginx_conf "$tmp/nginx" "$ng_http" "$ms_http" "$ng_grpc" "$ms_grpc"
nginx -t -q -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx-t.log" 2>&1 ||
  { cat "$tmp/nginx-t.log" >&2; die "nginx rejects the generated config (is the gRPC module there? Debian: apt-get install nginx)"; }
start nginx nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf"
wait_port nginx "$ng_grpc"
wait_port nginx "$ng_http"
for i in $(seq 50); do
  mapfile -t ng_workers < <(children "${pids[nginx]}")
  [ "${#ng_workers[@]}" -ge 2 ] && break
  sleep 0.1
done
[ "${#ng_workers[@]}" -ge 1 ] || die "nginx started no worker processes"

mkdir -p "$tmp/haproxy"
cat >"$tmp/haproxy/haproxy.cfg" <<EOF
# Reference proxy: plain forwarding, no logging, upstream keep-alive.
global
  nbthread 2
  maxconn 8000
  tune.h2.initial-window-size 1048576
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend grpc
  bind $ha_grpc proto h2
  default_backend ms_grpc
backend ms_grpc
  server ms $ms_grpc proto h2
frontend http
  bind $ha_http
  default_backend ms_http
backend ms_http
  server ms $ms_http
EOF
haproxy -c -q -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy-c.log" 2>&1 ||
  { cat "$tmp/haproxy-c.log" >&2; die "haproxy rejects the generated config"; }
start_haproxy() {
  start haproxy haproxy -db -f "$tmp/haproxy/haproxy.cfg"
  wait_port haproxy "$ha_grpc"
  wait_port haproxy "$ha_http"
}
start_haproxy
alive

# --- machine ---------------------------------------------------------------

stamp=$(date -u +%Y%m%d-%H%M%S)
mkdir -p out
results=out/bench-$stamp.json
report=out/bench-$stamp.txt
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=false
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then dirty=true; fi
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
nginx_version=$(nginx -v 2>&1 | sed 's/.*nginx\///')
haproxy_version=$(haproxy -v | awk 'NR == 1 { print $3 }')
go_version=$(go env GOVERSION)
clk=$(getconf CLK_TCK)

{
  echo "inferwatch bench  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit   $commit$([ "$dirty" = true ] && echo " (working tree has uncommitted changes)")"
  echo "machine  $(nproc) CPUs ($cpu), $(uname -sr), $(awk '$1 == "MemTotal:" { printf "%d MiB", $2 / 1024 }' /proc/meminfo)"
  echo "loadavg  $(cut -d' ' -f1-3 /proc/loadavg) at start"
  echo "versions $go_version, nginx $nginx_version, HAProxy $haproxy_version"
  echo "method   open-loop inferwatch load, one target at a time; $warm warm-up each;"
  echo "         fixed rate $dur, max throughput $maxdur at 20000/s offered, 64 in flight;"
  echo "         $rounds round(s) of each scenario, targets in turn$([ "$rotate" = 1 ] && echo ", each round starting one target later"); medians over the rounds"
} | tee "$report"

# --- scenarios -------------------------------------------------------------

# id|title|protocol|model|payload|json|qps|duration|max in flight
scenarios=(
  "grpc-small-1k|gRPC echo 8 B @ 1000/s|grpc|echo|0|no|1000|$dur|256"
  "grpc-1mib-50|gRPC echo 1 MiB @ 50/s|grpc|echo|1MiB|no|50|$dur|256"
  "grpc-16mib-5|gRPC echo 16 MiB @ 5/s|grpc|echo|16MiB|no|5|$dur|256"
  "http-json-1k|HTTP v2 JSON mnist-mlp @ 1000/s|http|mnist-mlp|0|yes|1000|$dur|256"
  "http-json-1mib-10|HTTP v2 JSON echo 1 MiB @ 10/s|http|echo|1MiB|yes|10|$dur|256"
  "grpc-small-max|gRPC echo 8 B, max throughput|grpc|echo|0|no|20000|$maxdur|64"
  "http-json-max|HTTP v2 JSON mnist-mlp, max throughput|http|mnist-mlp|0|yes|20000|$maxdur|64"
)
if [ -n "$only" ]; then
  kept=()
  for sc in "${scenarios[@]}"; do
    case ",$only," in *",${sc%%|*},"*) kept+=("$sc") ;; esac
  done
  [ "${#kept[@]}" -gt 0 ] || die "BENCH_SCENARIOS=$only names no scenario"
  scenarios=("${kept[@]}")
fi
targets=(direct iw-stdlib iw-frame nginx haproxy)
proxies=(iw-stdlib iw-frame nginx haproxy)

addr_of() { # TARGET PROTOCOL
  case $1/$2 in
  direct/grpc) echo "$ms_grpc" ;; direct/http) echo "$ms_http" ;;
  iw-stdlib/grpc) echo "$iw_grpc" ;; iw-stdlib/http) echo "$iw_http" ;;
  iw-frame/grpc) echo "$iwf_grpc" ;; iw-frame/http) echo "$iwf_http" ;;
  nginx/grpc) echo "$ng_grpc" ;; nginx/http) echo "$ng_http" ;;
  haproxy/grpc) echo "$ha_grpc" ;; haproxy/http) echo "$ha_http" ;;
  esac
}

proxy_pids() { # TARGET: the processes whose CPU and memory are the proxy's
  case $1 in
  iw-stdlib) echo "${pids[inferwatch]}" ;;
  iw-frame) echo "${pids[iwframe]}" ;;
  nginx) echo "${pids[nginx]} ${ng_workers[*]}" ;;
  haproxy) echo "${pids[haproxy]}" ;;
  esac
}

# run_load ADDR PROTOCOL MODEL PAYLOAD JSON QPS DURATION INFLIGHT: the JSON line.
# A run that has not finished 2 minutes after it started (calls hung in a
# proxy) is killed and fails the benchmark, unless STALL_OK is set: then it
# returns 3 and the caller decides.
run_load() {
  local args=(load --addr "$1" --protocol "$2" --model "$3" --payload "$4" --qps "$6"
    --duration "$7" --max-inflight "$8" --format json) out rc=0
  if [ "$5" = yes ]; then args+=(--json-body); fi
  out=$(timeout --kill-after=5s 120s "$bin" "${args[@]}" 2>"$tmp/load.err") || rc=$?
  if [ "$rc" -ne 0 ]; then
    alive
    echo "$out" >&2
    cat "$tmp/load.err" >&2
    if [ "$rc" -ge 124 ]; then
      if [ -n "${STALL_OK:-}" ]; then return 3; fi
      die "load against $1 ($2 $3 $4) did not finish within 120 s"
    fi
    die "load against $1 ($2 $3 $4) failed"
  fi
  echo "$out"
}

# load TARGET ARGS...: run_load against TARGET. HAProxy 2.6 now and then
# stalls a 1 MiB gRPC run for good (calls never complete), and once
# restarted has refused every stream of the next run (REFUSED_STREAM on
# all 50 16 MiB calls); after either it is restarted and the run retried
# once; a second failure marks its row stalled (no figures) and the run
# goes on. The report says which. Our own targets and nginx get no second
# chance.
stalls=()
load() {
  local tg=$1 out rc=0
  shift
  if [ "$tg" != haproxy ]; then
    run_load "$@"
    return
  fi
  out=$(STALL_OK=1 run_load "$@") || rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 3 ]; then
      echo "bench: haproxy stalled ($2 $3 $4, load killed after 120 s); restarting it and retrying once" >&2
    else
      echo "bench: haproxy failed the run ($2 $3 $4); restarting it and retrying once" >&2
    fi
    kill -KILL "${pids[haproxy]}" 2>/dev/null || true
    wait "${pids[haproxy]}" 2>/dev/null || true
    start_haproxy
    echo "${pids[haproxy]}" >"$tmp/haproxy.pid" # we may be in a subshell: tell the caller
    rc=0
    out=$(STALL_OK=1 run_load "$@") || rc=$?
    if [ "$rc" -ne 0 ]; then
      # A restarted HAProxy has also refused every stream of the retry
      # (REFUSED_STREAM on all 50 16 MiB calls): a reference proxy's
      # failure marks its row, it does not end the benchmark.
      echo "bench: haproxy stalled again or failed the retry; its row is marked stalled" >&2
      kill -KILL "${pids[haproxy]}" 2>/dev/null || true
      wait "${pids[haproxy]}" 2>/dev/null || true
      start_haproxy
      echo "${pids[haproxy]}" >"$tmp/haproxy.pid"
      echo '{"stalled":true,"p50_us":0,"p99_us":0,"throughput":0,"late":0,"failed":0}'
      return 5
    fi
    rc=4
  fi
  echo "$out"
  return "$rc"
}

declare -A res=() cpu_pct=() other_pct=()
declare -A idle_rss=() rss_max=() pss_max=() rss_end=() hwm_1k=() hwm_16m=() hwm_end=()
for tg in "${proxies[@]}"; do
  # shellcheck disable=SC2046
  idle_rss[$tg]=$(sum_status VmRSS $(proxy_pids "$tg"))
done
runs_json=()

for sc in "${scenarios[@]}"; do
  IFS='|' read -r id title proto model payload json qps sdur inflight <<<"$sc"
  for r in $(seq "$rounds"); do
    echo "bench: $title, round $r of $rounds ($(cut -d' ' -f1-3 /proc/loadavg) loadavg)" >&2
    order=("${targets[@]}")
    if [ "$rotate" = 1 ]; then
      k=$(((r - 1) % ${#targets[@]}))
      order=("${targets[@]:k}" "${targets[@]:0:k}")
    fi
    for tg in "${order[@]}"; do
      addr=$(addr_of "$tg" "$proto")
      rc=0
      load "$tg" "$addr" "$proto" "$model" "$payload" "$json" "$qps" "$warm" "$inflight" >/dev/null || rc=$?
      if [ "$rc" -eq 4 ] || [ "$rc" -eq 5 ]; then stalls+=("$title, round $r (warm-up)"); pids[haproxy]=$(cat "$tmp/haproxy.pid"); elif [ "$rc" -ne 0 ]; then exit "$rc"; fi
      alive
      pp=$(proxy_pids "$tg")
      if [ "$id" = grpc-small-1k ] && [ -n "$pp" ]; then
        # shellcheck disable=SC2086
        (while :; do echo "$(sum_status VmRSS $pp) $(sum_pss $pp)"; sleep 0.5; done) >>"$tmp/rss-$tg" &
        sampler=$!
      fi
      load_before=$(cut -d' ' -f1 /proc/loadavg)
      t0=$(now_ns) b0=$(busy_ticks) o0=$(own_ticks)
      c0=0
      # shellcheck disable=SC2086
      if [ -n "$pp" ]; then c0=$(cpu_ticks $pp); fi
      rc=0
      out=$(load "$tg" "$addr" "$proto" "$model" "$payload" "$json" "$qps" "$sdur" "$inflight") || rc=$?
      if [ "$rc" -eq 4 ] || [ "$rc" -eq 5 ]; then stalls+=("$title, round $r"); pids[haproxy]=$(cat "$tmp/haproxy.pid"); elif [ "$rc" -ne 0 ]; then exit "$rc"; fi
      if [ -n "$sampler" ]; then
        kill "$sampler" 2>/dev/null || true
        wait "$sampler" 2>/dev/null || true
        sampler=
        sampled=yes
      else
        sampled=
      fi
      t1=$(now_ns) b1=$(busy_ticks) o1=$(own_ticks)
      other=$(awk -v c="$((b1 - b0 - (o1 - o0)))" -v k="$clk" -v ns="$((t1 - t0))" 'BEGIN { if (c < 0) c = 0; printf "%.0f", 100 * c / k / (ns / 1e9) }')
      pct=null
      # shellcheck disable=SC2086
      if [ -n "$pp" ]; then
        c1=$(cpu_ticks $pp)
        pct=$(awk -v c="$((c1 - c0))" -v k="$clk" -v ns="$((t1 - t0))" 'BEGIN { printf "%.0f", 100 * c / k / (ns / 1e9) }')
      fi
      alive
      if [ -n "$sampled" ]; then
        # The most over every round's samples: the sampler appends.
        rss_max[$tg]=$(awk 'BEGIN { m = 0 } $1 > m { m = $1 } END { print m }' "$tmp/rss-$tg")
        pss_max[$tg]=$(awk 'BEGIN { m = 0 } $2 > m { m = $2 } END { print m }' "$tmp/rss-$tg")
        # shellcheck disable=SC2086
        rss_end[$tg]=$(sum_status VmRSS $pp)
        # shellcheck disable=SC2086
        hwm_1k[$tg]=$(sum_status VmHWM $pp)
      fi
      if [ "$id" = grpc-16mib-5 ] && [ -n "$pp" ]; then
        # shellcheck disable=SC2086
        hwm_16m[$tg]=$(sum_status VmHWM $pp)
      fi
      res[$id/$tg/$r]=$out
      cpu_pct[$id/$tg/$r]=$pct
      other_pct[$id/$tg/$r]=$other
      runs_json+=("{\"scenario\":\"$id\",\"round\":$r,\"target\":\"$tg\",\"addr\":\"$addr\",\"protocol\":\"$proto\",\"model\":\"$model\",\"payload\":\"$payload\",\"json_body\":$([ "$json" = yes ] && echo true || echo false),\"qps\":$qps,\"duration\":\"$sdur\",\"max_inflight\":$inflight,\"loadavg_before\":$load_before,\"proxy_cpu_pct\":$pct,\"other_cpu_pct\":$other,\"load\":$out}")
    done
  done
done
for tg in "${proxies[@]}"; do
  # shellcheck disable=SC2046
  hwm_end[$tg]=$(sum_status VmHWM $(proxy_pids "$tg"))
done

# --- report ----------------------------------------------------------------

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
mibo() { if [ -n "$1" ]; then mib "$1"; else echo -; fi; } # mib, or - when not measured
# cpu_per_call CPU% LOADJSON: the proxy's CPU µs per call carried.
cpu_per_call() {
  if [ "$1" = null ]; then
    echo -
    return
  fi
  awk -v c="$1" -v t="$(jnum "$2" throughput)" 'BEGIN { if (t <= 0) print "-"; else printf "%.0f", c / 100 * 1e6 / t }'
}
# ratio A B: A/B, or n/a when either added nothing measurable (<= 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a <= 0 || b <= 0) print "n/a"; else printf "%.2f", a / b }'; }

# med N...: the median of the numbers given ("-" for none), rounded.
med() {
  printf '%s\n' "$@" | awk '/^-?[0-9.]+$/' | sort -g |
    awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.0f", a[(NR + 1) / 2]; else printf "%.0f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
stalled() { [[ $1 == *'"stalled":true'* ]]; }
num() { if [ "$1" = - ]; then echo 0; else echo "$1"; fi; } # "-" (none) as 0, for ratio

# Per (scenario, target): medians over the rounds that were not stalled.
declare -A m_p50=() m_p99=() m_tp=() m_add50=() m_add99=() m_cpu=() m_cpc=() m_late=() m_failed=() m_other=() m_n=()
for sc in "${scenarios[@]}"; do
  IFS='|' read -r id _ <<<"$sc"
  for tg in "${targets[@]}"; do
    p50s=() p99s=() tps=() a50s=() a99s=() cpus=() cpcs=() late=0 failed=0 other=0 n=0
    for r in $(seq "$rounds"); do
      x=${res[$id/$tg/$r]} d=${res[$id/direct/$r]}
      if stalled "$x"; then continue; fi
      n=$((n + 1))
      p50s+=("$(jnum "$x" p50_us)") p99s+=("$(jnum "$x" p99_us)") tps+=("$(jnum "$x" throughput)")
      late=$((late + $(jnum "$x" late))) failed=$((failed + $(jnum "$x" failed)))
      if [ "${other_pct[$id/$tg/$r]}" -gt "$other" ]; then other=${other_pct[$id/$tg/$r]}; fi
      if [ "$tg" != direct ]; then
        a50s+=($(($(jnum "$x" p50_us) - $(jnum "$d" p50_us)))) a99s+=($(($(jnum "$x" p99_us) - $(jnum "$d" p99_us))))
      fi
      c=${cpu_pct[$id/$tg/$r]}
      if [ "$c" != null ]; then cpus+=("$c") cpcs+=("$(cpu_per_call "$c" "$x")"); fi
    done
    m_n[$id/$tg]=$n
    m_p50[$id/$tg]=$(med "${p50s[@]}") m_p99[$id/$tg]=$(med "${p99s[@]}") m_tp[$id/$tg]=$(med "${tps[@]}")
    m_add50[$id/$tg]=$(med "${a50s[@]}") m_add99[$id/$tg]=$(med "${a99s[@]}")
    m_cpu[$id/$tg]=$(med "${cpus[@]}") m_cpc[$id/$tg]=$(med "${cpcs[@]}")
    m_late[$id/$tg]=$late m_failed[$id/$tg]=$failed m_other[$id/$tg]=$other
  done
done

header() {
  printf '%-38s %-12s %8s %8s %9s %6s %6s %8s %8s %5s %10s %6s\n' \
    scenario "$1" "p50 µs" "p99 µs" "calls/s" late failed "+p50 µs" "+p99 µs" "CPU%" "CPUus/call" "other%"
}
{
  echo
  echo "each round (targets in turn; +p50/+p99 over the same round's direct)"
  header "rd target"
  for sc in "${scenarios[@]}"; do
    IFS='|' read -r id title _ <<<"$sc"
    for r in $(seq "$rounds"); do
      d=${res[$id/direct/$r]}
      for tg in "${targets[@]}"; do
        x=${res[$id/$tg/$r]}
        if stalled "$x"; then
          printf '%-38s %-12s %s\n' "$title" "$r $tg" "stalled (or failed) twice: no figures"
          continue
        fi
        add50=- add99=-
        if [ "$tg" != direct ]; then
          add50=$(($(jnum "$x" p50_us) - $(jnum "$d" p50_us)))
          add99=$(($(jnum "$x" p99_us) - $(jnum "$d" p99_us)))
        fi
        c=${cpu_pct[$id/$tg/$r]}
        printf '%-38s %-12s %8s %8s %9.0f %6s %6s %8s %8s %5s %10s %6s\n' "$title" "$r $tg" \
          "$(jnum "$x" p50_us)" "$(jnum "$x" p99_us)" "$(jnum "$x" throughput)" \
          "$(jnum "$x" late)" "$(jnum "$x" failed)" "$add50" "$add99" "${c/null/-}" "$(cpu_per_call "$c" "$x")" "${other_pct[$id/$tg/$r]}"
      done
    done
  done
  echo
  echo "medians over $rounds round(s) (late, failed: summed; other%: the worst round)"
  header target
  for sc in "${scenarios[@]}"; do
    IFS='|' read -r id title _ <<<"$sc"
    for tg in "${targets[@]}"; do
      k=$id/$tg
      if [ "${m_n[$k]}" -eq 0 ]; then
        printf '%-38s %-12s %s\n' "$title" "$tg" "stalled in every round: no figures"
        continue
      fi
      a50=${m_add50[$k]} a99=${m_add99[$k]}
      if [ "$tg" = direct ]; then a50=- a99=-; fi
      printf '%-38s %-12s %8s %8s %9s %6s %6s %8s %8s %5s %10s %6s\n' "$title" "$tg" \
        "${m_p50[$k]}" "${m_p99[$k]}" "${m_tp[$k]}" "${m_late[$k]}" "${m_failed[$k]}" "$a50" "$a99" "${m_cpu[$k]}" "${m_cpc[$k]}" "${m_other[$k]}"
    done
  done
  echo
  echo "each proxy / nginx, from the medians: added latency over direct (< 1: adds less than nginx), throughput (> 1: carries more),"
  echo "CPU per call (< 1: cheaper); n/a where one of them added nothing measurable"
  printf '%-38s %-10s %10s %10s %11s %9s\n' scenario target "added p50" "added p99" throughput "CPU/call"
  for sc in "${scenarios[@]}"; do
    IFS='|' read -r id title _ <<<"$sc"
    for tg in iw-stdlib iw-frame haproxy; do
      printf '%-38s %-10s %10s %10s %11s %9s\n' "$title" "$tg" \
        "$(ratio "$(num "${m_add50[$id/$tg]}")" "$(num "${m_add50[$id/nginx]}")")" \
        "$(ratio "$(num "${m_add99[$id/$tg]}")" "$(num "${m_add99[$id/nginx]}")")" \
        "$(ratio "$(num "${m_tp[$id/$tg]}")" "$(num "${m_tp[$id/nginx]}")")" \
        "$(ratio "$(num "${m_cpc[$id/$tg]}")" "$(num "${m_cpc[$id/nginx]}")")"
    done
  done
  echo
  echo "memory (MiB; nginx = master + ${#ng_workers[@]} workers summed, its PSS in brackets; - where not measured)"
  printf '  %-10s %9s %18s %10s %15s %16s %10s\n' target "RSS idle" "RSS max 1k/s" "RSS after" "VmHWM after 1k" "VmHWM after 16M" "VmHWM end"
  for tg in "${proxies[@]}"; do
    rm_=$(mibo "${rss_max[$tg]:-}")
    if [ "$tg" = nginx ] && [ -n "${pss_max[$tg]:-}" ]; then rm_="$rm_ ($(mib "${pss_max[$tg]}"))"; fi
    printf '  %-10s %9s %18s %10s %15s %16s %10s\n' "$tg" "$(mib "${idle_rss[$tg]}")" "$rm_" \
      "$(mibo "${rss_end[$tg]:-}")" "$(mibo "${hwm_1k[$tg]:-}")" "$(mibo "${hwm_16m[$tg]:-}")" "$(mib "${hwm_end[$tg]}")"
  done
  for st in "${stalls[@]}"; do
    echo "note     haproxy stalled on $st and was restarted; figures there are from the retry, or none if it stalled again"
  done
  echo "loadavg  $(cut -d' ' -f1-3 /proc/loadavg) at the end"
} | tee -a "$report"

{
  echo "{"
  echo "\"date\":\"$stamp\",\"commit\":\"$commit\",\"dirty\":$dirty,\"rounds\":$rounds,"
  echo "\"machine\":{\"nproc\":$(nproc),\"cpu\":\"${cpu//\"/}\",\"kernel\":\"$(uname -sr)\",\"go\":\"$go_version\",\"nginx\":\"$nginx_version\",\"haproxy\":\"$haproxy_version\"},"
  echo "\"memory_kib\":{"
  for tg in "${proxies[@]}"; do
    sep=,
    if [ "$tg" = "${proxies[-1]}" ]; then sep=; fi
    echo "  \"$tg\":{\"rss_idle\":${idle_rss[$tg]},\"rss_max_grpc_1k\":${rss_max[$tg]:-null},\"pss_max_grpc_1k\":${pss_max[$tg]:-null},\"rss_after_grpc_1k\":${rss_end[$tg]:-null},\"hwm_after_grpc_1k\":${hwm_1k[$tg]:-null},\"hwm_after_grpc_16mib\":${hwm_16m[$tg]:-null},\"hwm_end\":${hwm_end[$tg]}}$sep"
  done
  echo "},"
  echo "\"runs\":["
  for i in "${!runs_json[@]}"; do
    sep=,
    if [ "$i" -eq $((${#runs_json[@]} - 1)) ]; then sep=; fi
    echo "${runs_json[$i]}$sep"
  done
  echo "]}"
} >"$results"
echo
echo "bench: raw results in $results, this table in $report"

#!/usr/bin/env bash
# GPU facts on a real GPU, in one command: runs the NVML sampler (gpu/,
# through gpu/cmd/gpucheck) for GPUCHECK_DURATION while two PyTorch
# programs load the GPU — an "upstream" that listens on a TCP port (found the
# way the sidecar finds it: /proc/net/tcp, then /proc/*/fd) and a bursty
# "neighbour" — and prints what it saw: devices, utilisation, memory,
# clocks, power, throttle reasons, XID/ECC events, every process on the GPU
# with the upstream marked, the overlap-weighted facts of the whole window
# and the inferwatch_gpu_* metrics. Checks at the end (CHECK ...: ok|FAIL)
# set the exit status.
#
# Without an NVIDIA driver it prints "no NVIDIA driver: GPU facts absent"
# and exits 0: the absent path working.
#
# Needs gcc and Go 1.26+ (cgo: go-nvml dlopens libnvidia-ml.so.1), or a
# gpucheck built elsewhere: `go build -o bin/gpucheck ./gpu/cmd/gpucheck`
# (with the module cache at hand) and bin/ copied along, or GPUCHECK_BIN.
# PyTorch with CUDA for the load (python3); without it the GPU is sampled
# idle. About a minute, most of it PyTorch starting.
#
# Environment knobs (defaults in brackets):
#   GPUCHECK_DURATION [10s]   how long the sampler runs under load
#   GPUCHECK_INTERVAL [500ms] sampling interval
#   GPUCHECK_PORT     [47311] the upstream load's listening port (127.0.0.1)
#   GPUCHECK_BIN      []      a prebuilt gpucheck to use instead of building
set -euo pipefail
cd "$(dirname "$0")/.."

dur=${GPUCHECK_DURATION:-10s}
interval=${GPUCHECK_INTERVAL:-500ms}
port=${GPUCHECK_PORT:-47311}
bin=${GPUCHECK_BIN:-}

work=$(mktemp -d)
loads=()
cleanup() {
	for p in "${loads[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# 1. gpucheck: build it, or use a prebuilt one.
if [[ -z $bin ]]; then
	gobin=$(command -v go || true)
	[[ -z $gobin && -x /usr/local/go/bin/go ]] && gobin=/usr/local/go/bin/go
	if [[ -n $gobin ]] && "$gobin" version >/dev/null 2>&1; then
		echo "go: $("$gobin" version)"
		# cgo's deprecation warnings from go-nvml go to the log, shown on failure.
		if CGO_ENABLED=1 "$gobin" build -o "$work/gpucheck" ./gpu/cmd/gpucheck >"$work/build.log" 2>&1; then
			bin=$work/gpucheck
		elif [[ -x bin/gpucheck ]]; then
			echo "go build failed; using the prebuilt bin/gpucheck. Build log tail:"
			tail -n 5 "$work/build.log"
			bin=bin/gpucheck
		else
			echo "gpu-check: building gpucheck failed (needs gcc, and the Go module cache when offline):" >&2
			tail -n 20 "$work/build.log" >&2
			exit 2
		fi
	elif [[ -x bin/gpucheck ]]; then
		echo "go: not installed here; using the prebuilt bin/gpucheck"
		bin=bin/gpucheck
	else
		echo "gpu-check: Go is not installed here ('go version' failed) and there is no prebuilt bin/gpucheck." >&2
		echo "  Install Go 1.26+ and gcc, or build it where Go and the module cache are:" >&2
		echo "    go build -o bin/gpucheck ./gpu/cmd/gpucheck" >&2
		echo "  and bring bin/gpucheck along (or set GPUCHECK_BIN)." >&2
		exit 2
	fi
fi

# 2. The driver, as nvidia-smi sees it.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	echo "nvidia-smi:"
	nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv | sed 's/^/  /'
else
	echo "nvidia-smi: not found or no device answered"
	rc=0
	"$bin" -duration 1s -interval "$interval" || rc=$?
	exit "$rc"
fi

# 3. A CUDA load, when PyTorch can reach the GPU.
load_py='
import os, socket, sys, time
role, port, secs, ready = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
import torch
if role == "upstream":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port))
    l.listen()
n = 8192 if role == "upstream" else 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
torch.cuda.synchronize()
with open(ready, "w") as f:
    f.write(str(os.getpid()))
end = time.time() + secs
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    if role == "neighbour":
        time.sleep(0.02)  # bursty, like a shared GPU neighbour
'
expect=()
secs=$(($(sed -E 's/s$//; s/^([0-9]+).*/\1/' <<<"$dur") + 30))
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "load: torch $(python3 -c 'import torch; print(torch.__version__)'): upstream on 127.0.0.1:$port, a bursty neighbour"
	python3 -c "$load_py" upstream "$port" "$secs" "$work/upstream.ready" >"$work/upstream.log" 2>&1 &
	loads+=($!)
	python3 -c "$load_py" neighbour 0 "$secs" "$work/neighbour.ready" >"$work/neighbour.log" 2>&1 &
	loads+=($!)
	for _ in $(seq 120); do
		[[ -s $work/upstream.ready && -s $work/neighbour.ready ]] && break
		sleep 0.5
	done
	if [[ ! -s $work/upstream.ready || ! -s $work/neighbour.ready ]]; then
		echo "gpu-check: the PyTorch loads did not start within 60 s:" >&2
		tail -n 20 "$work/upstream.log" "$work/neighbour.log" >&2
		exit 1
	fi
	echo "load: upstream pid $(cat "$work/upstream.ready"), neighbour pid $(cat "$work/neighbour.ready")"
	expect=(-port "$port" -expect-upstream -expect-neighbour)
else
	echo "load: PyTorch with CUDA not available here; sampling the GPU idle"
fi

# 4. The sampler, for real.
"$bin" -duration "$dur" -interval "$interval" -require "${expect[@]}"

#!/usr/bin/env bash
# GPU facts on a real GPU, in one command. It loads the GPU with two CUDA
# programs — an "upstream" that listens on a TCP port (found the way the
# sidecar finds it: /proc/net/tcp, then /proc/*/fd) and a bursty
# "neighbour" — and runs gpu/cmd/gpucheck against them: the NVML sampler
# (gpu/) and, as root, the eBPF CUDA probes (bpf/) on the upstream's
# libcudart/libcuda. It prints what they saw: devices, utilisation, memory,
# clocks, power, throttle reasons, XID/ECC events, every process on the GPU
# with the upstream marked, the overlap-weighted facts of the whole window,
# the upstream's kernel launches, copies, synchronisation waits and
# allocations, what the probes cost, and the inferwatch_gpu_*/cuda_*
# metrics. Checks at the end (CHECK ...: ok|FAIL) set the exit status.
#
# The load is PyTorch when python3 can import torch with CUDA, else
# gpu/cudaload: a C program that needs only the driver (libcuda.so.1) and
# JIT-compiles gpu/cudaload/spin.ptx, and which prints its own exact counts
# to hold the probes' against.
#
# Without an NVIDIA driver it prints "no NVIDIA driver: GPU facts absent"
# and exits 0: the absent path working.
#
# Needs gcc and Go 1.26+ (cgo: go-nvml dlopens libnvidia-ml.so.1), or
# binaries built elsewhere and copied along in bin/:
#   go build -o bin/gpucheck ./gpu/cmd/gpucheck
#   gcc -O2 -o bin/cudaload gpu/cudaload/cudaload.c -ldl
# About a minute with PyTorch (most of it PyTorch starting), 20 s without.
#
# Environment knobs (defaults in brackets):
#   GPUCHECK_DURATION [10s]   how long the sampler runs under load
#   GPUCHECK_INTERVAL [500ms] sampling interval
#   GPUCHECK_PORT     [47311] the upstream load's listening port (127.0.0.1)
#   GPUCHECK_BIN      []      a prebuilt gpucheck to use instead of building
#   GPUCHECK_LOAD     [auto]  torch, cudaload or auto (torch when it works)
#   GPUCHECK_BUDGET   [0.03]  the eBPF probes' overhead budget (share of a core)
#   GPUCHECK_FAKE_LIBCUDA []  tests only: run cudaload against this stand-in
#                             libcuda and check the CUDA probes without a GPU
set -euo pipefail
cd "$(dirname "$0")/.."

dur=${GPUCHECK_DURATION:-10s}
interval=${GPUCHECK_INTERVAL:-500ms}
port=${GPUCHECK_PORT:-47311}
bin=${GPUCHECK_BIN:-}
load=${GPUCHECK_LOAD:-auto}
budget=${GPUCHECK_BUDGET:-0.03}

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
fake=false
if [[ -n ${GPUCHECK_FAKE_LIBCUDA:-} ]]; then
	# The tests' rehearsal of this script: cudaload against a stand-in
	# libcuda, CUDA probes only (there is no NVML to check).
	echo "GPUCHECK_FAKE_LIBCUDA=$GPUCHECK_FAKE_LIBCUDA: a stand-in driver; NVML is not checked"
	export CUDALOAD_LIBCUDA=$GPUCHECK_FAKE_LIBCUDA
	fake=true load=cudaload
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	echo "nvidia-smi:"
	nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv | sed 's/^/  /'
else
	echo "nvidia-smi: not found or no device answered"
	rc=0
	"$bin" -duration 1s -interval "$interval" || rc=$?
	exit "$rc"
fi

# 3. A CUDA load: PyTorch if it reaches the GPU, else cudaload.
secs=$(($(sed -E 's/s$//; s/^([0-9]+).*/\1/' <<<"$dur") + 30))
torch_ok=false
if [[ $load != cudaload ]] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	torch_ok=true
fi
if [[ $load == torch && $torch_ok == false ]]; then
	echo "gpu-check: GPUCHECK_LOAD=torch but python3 cannot use torch with CUDA here" >&2
	exit 2
fi
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
    x = torch.ones(4096).cuda()  # a host-to-device copy
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    y = c[0, :4096].float().cpu()  # and back
    if role == "neighbour":
        time.sleep(0.02)  # bursty, like a shared GPU neighbour
'
expect=(-port "$port" -require -expect-upstream -expect-neighbour)
$fake && expect=(-port "$port")
if $torch_ok; then
	echo "load: torch $(python3 -c 'import torch; print(torch.__version__)'): upstream on 127.0.0.1:$port, a bursty neighbour"
	python3 -c "$load_py" upstream "$port" "$secs" "$work/upstream.ready" >"$work/upstream.log" 2>&1 &
	loads+=($!)
	python3 -c "$load_py" neighbour 0 "$secs" "$work/neighbour.ready" >"$work/neighbour.log" 2>&1 &
	loads+=($!)
	cuda_expect=(-expect-cuda)
else
	cl=""
	if command -v gcc >/dev/null 2>&1 && gcc -O2 -Wall -o "$work/cudaload" gpu/cudaload/cudaload.c -ldl 2>"$work/cc.log"; then
		cl=$work/cudaload
	elif [[ -x bin/cudaload ]]; then
		cl=bin/cudaload
	else
		echo "gpu-check: no PyTorch with CUDA, and cudaload can be neither built (gcc) nor found in bin/:" >&2
		cat "$work/cc.log" >&2 2>/dev/null || true
		exit 2
	fi
	echo "load: $cl (driver API, spin.ptx): upstream on 127.0.0.1:$port, a bursty neighbour"
	"$cl" -listen "$port" -secs "$secs" -ready "$work/upstream.ready" -delay-ms 1500 >"$work/upstream.log" 2>&1 &
	loads+=($!)
	"$cl" -secs "$secs" -ready "$work/neighbour.ready" -kernels 5 -pause-ms 20 >"$work/neighbour.log" 2>&1 &
	loads+=($!)
	cuda_expect=(-expect-cuda -expect-copies)
fi
for _ in $(seq 120); do
	[[ -s $work/upstream.ready && -s $work/neighbour.ready ]] && break
	if ! kill -0 "${loads[0]}" 2>/dev/null || ! kill -0 "${loads[1]}" 2>/dev/null; then
		break
	fi
	sleep 0.5
done
if [[ ! -s $work/upstream.ready || ! -s $work/neighbour.ready ]]; then
	echo "gpu-check: the CUDA loads did not start:" >&2
	tail -n 20 "$work/upstream.log" "$work/neighbour.log" >&2
	exit 1
fi
echo "load: upstream pid $(cat "$work/upstream.ready"), neighbour pid $(cat "$work/neighbour.ready")"

# 4. The sampler and, as root, the CUDA probes, for real.
if [[ $(id -u) == 0 ]]; then
	expect+=(-cuda -budget "$budget" "${cuda_expect[@]}")
else
	echo "not root: the eBPF CUDA probes need root; running the NVML sampler alone"
fi
rc=0
"$bin" -duration "$dur" -interval "$interval" "${expect[@]}" || rc=$?
echo "upstream load said:"
sed 's/^/  /' "$work/upstream.log" | tail -n 5
exit "$rc"

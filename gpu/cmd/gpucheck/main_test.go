package main

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/gpu/pids"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

// TestWithoutGPU runs the sampler where there is no NVIDIA driver (this
// machine, CI): the absent path says so, and fails only when required.
func TestWithoutGPU(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("an NVIDIA device is here: scripts/gpu-check.sh covers this machine")
	}
	for _, tc := range []struct {
		name     string
		require  bool
		wantCode int
		want     []string
	}{
		{"absent is fine", false, 0, []string{"GPU facts absent", "metrics ("}},
		{"absent but required", true, 1, []string{"GPU facts absent", "CHECK NVML available: FAIL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			res := run(context.Background(), config{duration: time.Second, interval: 100 * time.Millisecond, require: tc.require}, &out)
			if res.code != tc.wantCode || res.gpuOK {
				t.Fatalf("code %d gpuOK %v, want code %d without GPU facts\n%s", res.code, res.gpuOK, tc.wantCode, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestCUDAProbesOnCudaload runs the GPU check's CUDA half against
// gpu/cudaload, the program scripts/gpu-check.sh loads a GPU with when
// PyTorch is absent, driven here by the stand-in libcuda of package bpf:
// the upstream is found by its port, libcuda is probed when the program
// opens it, and with a budget that never duty-cycles, the probes report
// exactly what the program says it did.
func TestCUDAProbesOnCudaload(t *testing.T) {
	lib, prog := buildStandIns(t)

	_, portStr, _ := strings.Cut(testenv.FreeAddr(t), ":")
	port, _ := strconv.Atoi(portStr)
	const iterations, kernels = 30, 7
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(prog, "-ptx", "../../cudaload/spin.ptx", "-listen", portStr, "-ready", ready,
		"-delay-ms", "2500", "-iterations", strconv.Itoa(iterations), "-kernels", strconv.Itoa(kernels), "-secs", "8")
	cmd.Env = append(os.Environ(), "CUDALOAD_LIBCUDA="+lib)
	var progBuf bytes.Buffer
	progOut := &syncWriter{w: &progBuf}
	cmd.Stdout, cmd.Stderr = progOut, progOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(ready); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cudaload not ready after 5 s:\n%s", progOut.String())
		}
	}

	var out bytes.Buffer
	res := run(context.Background(), config{
		duration: 5 * time.Second, interval: 500 * time.Millisecond, spec: pids.Spec{Port: port},
		cuda: true, budget: 1, expectCUDA: true, expectCopies: true,
	}, &out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cudaload: %v\n%s", err, progOut.String())
	}
	if t.Failed() || res.code != 0 {
		t.Fatalf("gpucheck exit %d\n%s", res.code, out.String())
	}
	truth := doneLine(t, progOut.String())
	c := res.cuda.CUDA
	if c == nil {
		t.Fatalf("no CUDA facts\n%s", out.String())
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"launches", c.Launches, truth["launches"]},
		{"copies", c.Copies, truth["iterations"] * 2},
		{"h2d bytes", c.H2DBytes, truth["h2d_bytes"]},
		{"d2h bytes", c.D2HBytes, truth["d2h_bytes"]},
		{"syncs", float64(c.Syncs), truth["syncs"]},
		{"allocs", c.Allocs, truth["allocs"]},
		{"alloc bytes", c.AllocBytes, truth["h2d_bytes"]},
		{"free bytes", c.FreeBytes, truth["h2d_bytes"]},
		{"outstanding", float64(c.Outstanding), 0},
	} {
		if math.Abs(f.got-f.want) > 1e-6*max(1, f.want) {
			t.Errorf("%s: probes saw %v, cudaload did %v", f.name, f.got, f.want)
		}
	}
	if truth["launches"] != iterations*kernels {
		t.Errorf("cudaload made %v launches, want %d", truth["launches"], iterations*kernels)
	}
	// The stand-in's cuCtxSynchronize sleeps 3 ms.
	if lo := time.Duration(truth["syncs"]) * 3 * time.Millisecond; c.SyncWait < lo || c.SyncWait > 3*lo {
		t.Errorf("sync wait %v, want %v..%v", c.SyncWait, lo, 3*lo)
	}
	for _, w := range []string{"CHECK kernel launches seen: ok", "CHECK copies seen: ok", "CHECK CUDA libraries probed: ok", "driver " + lib} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("gpucheck:\n%s\ncudaload:\n%s", out.String(), progOut.String())
	}
}

// doneLine parses cudaload's closing line: "cudaload: done: iterations N
// launches N ...".
func doneLine(t *testing.T, out string) map[string]float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "cudaload: done: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		m := map[string]float64{}
		for i := 0; i+1 < len(f) && f[i] != "in"; i += 2 {
			v, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil {
				t.Fatalf("cudaload's done line %q: %v", sc.Text(), err)
			}
			m[f[i]] = v
		}
		return m
	}
	t.Fatalf("no done line from cudaload:\n%s", out)
	return nil
}

// TestScriptRehearsal runs scripts/gpu-check.sh as a GPU machine would,
// but against the stand-in libcuda: it builds gpucheck and cudaload, starts
// the upstream and neighbour loads, finds the upstream by its port and
// checks the CUDA probes. It keeps the script from rotting between the
// rare days a GPU is lent.
func TestScriptRehearsal(t *testing.T) {
	lib, _ := buildStandIns(t)
	bash := testenv.RequireBinary(t, "bash")
	_, port, _ := strings.Cut(testenv.FreeAddr(t), ":")
	cmd := exec.Command(bash, "../../../scripts/gpu-check.sh")
	cmd.Env = append(os.Environ(), "GPUCHECK_FAKE_LIBCUDA="+lib, "GPUCHECK_DURATION=3s", "GPUCHECK_PORT="+port)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-check.sh: %v\n%s", err, out)
	}
	for _, w := range []string{
		"load: upstream pid",
		"CHECK eBPF probes loaded: ok",
		"CHECK CUDA libraries probed: ok",
		"CHECK kernel launches seen: ok",
		"CHECK synchronisation waits seen: ok",
		"CHECK copies seen: ok",
		"CHECK allocations seen: ok",
	} {
		if !strings.Contains(string(out), w) {
			t.Errorf("gpu-check.sh output lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("gpu-check.sh:\n%s", out)
	}
}

// buildStandIns builds the stand-in libcuda of package bpf's tests and
// cudaload, ending the test where eBPF cannot load (skipped locally,
// failed under CI).
func buildStandIns(t *testing.T) (lib, prog string) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		testenv.Unavailable(t, "the BPF objects are built for x86-64 only")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "loading eBPF needs root")
	}
	gcc := testenv.RequireBinary(t, "gcc")
	dir := t.TempDir()
	lib, prog = filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "cudaload")
	for _, args := range [][]string{
		// As package bpf builds it: no folded functions, no tail calls.
		{"-O1", "-fno-ipa-icf", "-fno-optimize-sibling-calls", "-shared", "-fPIC", "-o", lib, "-Wl,-soname,libcuda.so.1", "../../../bpf/testdata/fakecuda.c"},
		{"-O2", "-Wall", "-Werror", "-o", prog, "../../cudaload/cudaload.c", "-ldl"},
	} {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return lib, prog
}

// String returns what was written so far, when w is a bytes.Buffer.
func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.(*bytes.Buffer).String()
}

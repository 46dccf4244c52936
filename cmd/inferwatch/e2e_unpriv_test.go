package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

// TestE2EUnprivilegedProxyStillMeasures runs the sidecar binary as nobody:
// it cannot load eBPF, and must say so in one line and otherwise proxy and
// measure as usual (issue 5: "without root the sidecar still proxies and
// measures; BPF features report themselves disabled").
func TestE2EUnprivilegedProxyStillMeasures(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root to start a process as nobody")
	}
	_, msGRPC, _ := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0")

	// nobody must be able to reach and run the binary.
	dir, err := os.MkdirTemp("", "inferwatch-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "inferwatch")
	src, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}

	grpcAddr, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "proxy", "--grpc-listen", grpcAddr, "--grpc-upstream", msGRPC, "--admin-listen", admin)
	cmd.Stdout, cmd.Stderr = io.Discard, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start as nobody: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("proxy log:\n%s", logs.String())
		}
	})
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + admin + path)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unprivileged proxy never became ready")
		}
		time.Sleep(50 * time.Millisecond)
	}

	inferGRPC(t, grpcAddr, 5)
	// A scrape is not a snapshot: it can write the phase histograms
	// (sorted first) before a record being observed reaches them and
	// requests_total after, so wait for both.
	var ss exposition.Page
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, text := get("/metrics")
		ss = parseMetrics(t, text)
		reqs, _ := ss.Sum("inferwatch_requests_total", map[string]string{"model": "mnist-mlp"})
		ups, _ := ss.Sum("inferwatch_phase_duration_seconds_count", map[string]string{"model": "mnist-mlp", "phase": "upstream"})
		if (reqs >= 5 && ups >= 5) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, _ := ss.Sum("inferwatch_requests_total", map[string]string{"model": "mnist-mlp", "code": "OK"}); v != 5 {
		t.Errorf("inferwatch_requests_total{model=mnist-mlp,code=OK} = %v, want 5", v)
	}
	if v, ok := ss.Sum("inferwatch_phase_duration_seconds_count", map[string]string{"model": "mnist-mlp", "phase": "upstream"}); !ok || v != 5 {
		t.Errorf("upstream phase observed %v times, want 5", v)
	}
	if v, ok := ss.Sum("inferwatch_bpf_enabled", nil); !ok || v != 0 {
		t.Errorf("inferwatch_bpf_enabled = %v (present %v), want 0", v, ok)
	}
	if n := strings.Count(logs.String(), "eBPF probes disabled"); n != 1 {
		t.Errorf("%d log lines say the eBPF probes are disabled, want exactly one", n)
	}
}

package bpf

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a helper process instead of running the
// tests (see TestMain).
const helperEnv = "INFERWATCH_BPF_TEST_HELPER"

// helperReport is what the unprivileged helper prints.
type helperReport struct {
	UID      int      `json:"uid"`
	Enabled  bool     `json:"enabled"`
	OOM      bool     `json:"oom"`
	Reasons  []string `json:"reasons"`
	Cgroup   bool     `json:"cgroup"`
	Pressure bool     `json:"pressure"`
}

func runHelper(mode string) int {
	if mode != "unprivileged" {
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	self := os.Getpid()
	p, err := Start(context.Background(), Options{
		PIDs:   func() ([]int, error) { return []int{self}, nil },
		Sample: 100 * time.Millisecond,
		Rescan: 100 * time.Millisecond,
		Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	from := time.Now()
	time.Sleep(350 * time.Millisecond)
	f := p.Window(from, time.Now())
	r := helperReport{UID: os.Getuid(), Enabled: p.Enabled(), OOM: p.WatchesOOM(), Reasons: p.Reasons(), Cgroup: f.Cgroup != nil, Pressure: f.Pressure != nil}
	if err := p.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// TestUnprivilegedDisabled runs the probes as nobody: one log line says
// they are disabled and why, the rest (cgroup and pressure facts) works,
// and the process exits cleanly.
func TestUnprivilegedDisabled(t *testing.T) {
	requireRoot(t) // to become nobody
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bpf-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bpf.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), helperEnv+"=unprivileged")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper as nobody: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var r helperReport
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("helper output %q: %v", stdout.String(), err)
	}
	t.Logf("helper: %+v", r)
	t.Logf("helper log: %s", stderr.String())
	if r.UID != 65534 || r.Enabled || r.OOM {
		t.Errorf("as uid %d the probes are enabled=%v (OOM watched %v), want uid 65534 and disabled", r.UID, r.Enabled, r.OOM)
	}
	if len(r.Reasons) == 0 || !strings.Contains(strings.Join(r.Reasons, " "), "no privilege") {
		t.Errorf("reasons %q do not name the missing privilege", r.Reasons)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "bpf: eBPF probes disabled") {
		t.Errorf("want exactly one log line saying the probes are disabled, got %d:\n%s", len(lines), stderr.String())
	}
	if !r.Cgroup {
		t.Error("no cgroup facts without eBPF; they need none")
	}
}

package bpf

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/cgroup"
)

// memoryCgroup creates a cgroup limited to 16 MiB without swap and returns
// the file a process writes its PID to in order to join it. It takes cgroup
// v2 where the unified hierarchy has the memory controller, else the v1
// memory hierarchy (hybrid hosts bind the controller there, and a
// controller lives in one hierarchy only).
func memoryCgroup(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("inferwatch-bpf-oom-%d", os.Getpid())
	var why []string
	for _, m := range cgroup.ParseMountinfo(b) {
		if !m.V2 {
			continue
		}
		ctl, err := os.ReadFile(filepath.Join(m.Point, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(ctl)), "memory") {
			why = append(why, fmt.Sprintf("cgroup v2 at %s offers no memory controller (controllers: %q)", m.Point, strings.TrimSpace(string(ctl))))
			continue
		}
		// The controller must be enabled for children; a no-op when it is.
		_ = os.WriteFile(filepath.Join(m.Point, "cgroup.subtree_control"), []byte("+memory"), 0)
		dir := filepath.Join(m.Point, name)
		if err := mkCgroup(t, dir, map[string]string{"memory.max": "16M", "memory.swap.max": "0"}); err != nil {
			why = append(why, err.Error())
			continue
		}
		t.Logf("cgroup v2 %s", dir)
		return filepath.Join(dir, "cgroup.procs")
	}
	for _, m := range cgroup.ParseMountinfo(b) {
		if m.V2 || !slices.Contains(m.Controllers, "memory") {
			continue
		}
		dir := filepath.Join(m.Point, name)
		files := map[string]string{"memory.limit_in_bytes": "16M"}
		if _, err := os.Stat(filepath.Join(m.Point, "memory.memsw.limit_in_bytes")); err == nil {
			files["memory.memsw.limit_in_bytes"] = "16M" // after the memory limit: it may not be below it
		}
		if err := mkCgroup(t, dir, files, "memory.limit_in_bytes"); err != nil {
			why = append(why, err.Error())
			continue
		}
		t.Logf("cgroup v1 %s (%s)", dir, strings.Join(why, "; "))
		return filepath.Join(dir, "cgroup.procs")
	}
	t.Fatalf("no memory cgroup can be made: %s", strings.Join(why, "; "))
	return ""
}

// mkCgroup makes dir and writes files into it, those named in first first.
func mkCgroup(t *testing.T, dir string, files map[string]string, first ...string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	t.Cleanup(func() {
		// The killed process may take a moment to leave.
		for range 50 {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("cgroup %s left behind", dir)
	})
	names := slices.Clone(first)
	for _, k := range slices.Sorted(maps.Keys(files)) {
		if !slices.Contains(first, k) {
			names = append(names, k)
		}
	}
	for _, k := range names {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(files[k]), 0); err != nil {
			return fmt.Errorf("set %s: %w", filepath.Join(dir, k), err)
		}
	}
	return nil
}

// TestOOMKillReported: a process in a 16 MiB cgroup allocates until the
// OOM killer takes it; oom:mark_victim must report it, as the upstream's.
func TestOOMKillReported(t *testing.T) {
	requireRoot(t)
	procs := memoryCgroup(t)
	var up pidHolder
	p := startProbes(t, Options{PIDs: up.get})
	if !p.WatchesOOM() {
		t.Fatalf("the OOM tracepoint is not attached: %v", p.Reasons())
	}

	from := time.Now()
	pr := startProg(t, "-", "oom", procs)
	up.set(pr.PID())
	pr.Expect("joined", 5*time.Second)
	waitFor(t, 3*time.Second, "the allocator followed", func() bool {
		_, ok := targetStatus(p, pr.PID())
		return ok
	})
	pr.Send("go")
	exited, err := pr.Wait(10 * time.Second)
	if !exited {
		t.Fatal("the allocator was not killed within 10s")
	}
	t.Logf("allocator ended: %v", err)
	var kill *OOMKill
	waitFor(t, 3*time.Second, "the OOM kill reported", func() bool {
		for _, k := range p.Window(from, time.Now()).OOMKills {
			if k.PID == pr.PID() {
				kill = &k
				return true
			}
		}
		return false
	})
	t.Logf("OOM kill: %+v", *kill)
	if kill.Comm != "cudaprog" || !kill.Upstream {
		t.Errorf("OOM kill %+v: want comm cudaprog, upstream", *kill)
	}
}

package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestProcessMemoryLimitHost makes a parent cgroup limited to 32 MiB and
// an unlimited child on this machine's memory hierarchy (v2 where it has
// the controller, else v1), puts a process in the child, and reads its
// limit as the sidecar reads the upstream's. Needs root (CI runs it so).
func TestProcessMemoryLimitHost(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run this as root")
		}
		t.Skip("needs root to make cgroups")
	}
	mounts, err := SelfMounts()
	if err != nil {
		t.Fatal(err)
	}
	parent, limitFile, procs := memoryParent(t, mounts)
	const limit = 32 << 20
	child := filepath.Join(parent, "child")
	mkdir(t, child)
	write(t, filepath.Join(parent, limitFile), strconv.Itoa(limit))
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	write(t, filepath.Join(child, procs), strconv.Itoa(cmd.Process.Pid))

	got, from, err := ProcessMemoryLimit(cmd.Process.Pid, mounts)
	if err != nil || got != limit || from != filepath.Join(parent, limitFile) {
		t.Fatalf("ProcessMemoryLimit = %d from %q, %v; want %d from the parent's %s", got, from, err, limit, limitFile)
	}
	dir, err := ProcessDir(cmd.Process.Pid, mounts, "memory")
	if err != nil || dir != child {
		t.Fatalf("ProcessDir = %q, %v; want %q", dir, err, child)
	}
}

// memoryParent makes a cgroup on the hierarchy with the memory controller
// and returns it, its limit file's name and its process list's name.
func memoryParent(t *testing.T, mounts []Mount) (dir, limitFile, procs string) {
	name := fmt.Sprintf("inferwatch-cgroup-test-%d", os.Getpid())
	for _, m := range mounts {
		if !m.V2 {
			continue
		}
		ctl, err := os.ReadFile(filepath.Join(m.Point, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(ctl)), "memory") {
			continue
		}
		_ = os.WriteFile(filepath.Join(m.Point, "cgroup.subtree_control"), []byte("+memory"), 0)
		dir = filepath.Join(m.Point, name)
		mkdir(t, dir)
		write(t, filepath.Join(dir, "cgroup.subtree_control"), "+memory")
		return dir, "memory.max", "cgroup.procs"
	}
	for _, m := range mounts {
		if !m.V2 && slices.Contains(m.Controllers, "memory") {
			dir = filepath.Join(m.Point, name)
			mkdir(t, dir)
			return dir, "memory.limit_in_bytes", "cgroup.procs"
		}
	}
	t.Fatal("no cgroup hierarchy with the memory controller is mounted")
	return "", "", ""
}

// mkdir makes a cgroup and removes it (children first) when the test ends.
func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
}

func write(t *testing.T, p, v string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(v), 0); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}

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

// TestNodeTreeInANamespaceHost is TestNodeTreeInANamespace on the kernel:
// a "sidecar" process in its own cgroup namespace, rooted at its container
// cgroup, sees the host's hierarchies mounted above that root (mountinfo
// Root "/../..", as a node's /sys/fs/cgroup mounted into a pod does) and
// must find a sibling container's cgroup ("/../server") and memory limit
// there. Both the unified hierarchy and v1's memory one are checked where
// mounted. Needs root (CI runs it so).
func TestNodeTreeInANamespaceHost(t *testing.T) {
	if os.Getenv(nsHelperEnv) != "" {
		return // the helper's half runs in nsHelper, from TestMain
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run this as root")
		}
		t.Skip("needs root to make cgroups and a cgroup namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed:", err)
	}
	mounts, err := SelfMounts()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("inferwatch-ns-test-%d", os.Getpid())
	type hier struct {
		mount         Mount
		pod, ctr, srv string
	}
	var hs []hier
	for _, m := range mounts {
		if m.Root != "/" || !(m.V2 || slices.Contains(m.Controllers, "memory")) {
			continue
		}
		pod := filepath.Join(m.Point, name, "pod")
		mkdir(t, filepath.Dir(pod))
		mkdir(t, pod)
		h := hier{mount: m, pod: pod, ctr: filepath.Join(pod, "sidecar"), srv: filepath.Join(pod, "server")}
		mkdir(t, h.ctr)
		mkdir(t, h.srv)
		hs = append(hs, h)
	}
	var v2, mem *hier
	for i := range hs {
		if hs[i].mount.V2 {
			v2 = &hs[i]
		} else {
			mem = &hs[i]
		}
	}
	if v2 == nil && mem == nil {
		t.Fatal("neither a unified hierarchy nor v1's memory one is mounted at its root")
	}
	const limit = 48 << 20
	limitFile := "memory.limit_in_bytes"
	if mem == nil {
		limitFile = "memory.max"
	}
	var memHier *hier
	if mem != nil {
		memHier = mem
	} else if ctl, err := os.ReadFile(filepath.Join(v2.mount.Point, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(ctl)), "memory") {
		for _, d := range []string{v2.mount.Point, filepath.Dir(v2.pod), v2.pod} {
			_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory"), 0)
		}
		memHier = v2
	}
	if memHier != nil {
		write(t, filepath.Join(memHier.srv, limitFile), strconv.Itoa(limit))
	}

	server := exec.Command("sleep", "60")
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	for _, h := range hs {
		write(t, filepath.Join(h.srv, "cgroup.procs"), strconv.Itoa(server.Process.Pid))
	}

	// The sidecar joins its container's cgroups, then unshares a cgroup
	// namespace there: its root is the container, as under runc.
	var join strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&join, "echo $$ > %s/cgroup.procs && ", h.ctr)
	}
	cmd := exec.Command("sh", "-c", join.String()+`exec unshare --cgroup "$0" -test.run='^TestNodeTreeInANamespaceHost$'`, os.Args[0])
	cmd.Env = append(os.Environ(), nsHelperEnv+"="+strconv.Itoa(server.Process.Pid))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the helper in a cgroup namespace: %v\n%s", err, out)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			got[k] = v
		}
	}
	t.Logf("the helper saw:\n%s", out)
	for _, k := range []string{"self.v2", "self.memory"} {
		if v, ok := got[k]; ok && v != "/" {
			t.Fatalf("the helper's own cgroup %s %q: not at its namespace's root", k, v)
		}
	}
	if v2 != nil {
		if want := "/../.."; !strings.HasPrefix(got["root.v2"], want) {
			t.Errorf("the unified mount's Root in the namespace %q, want a tree above it (%s...)", got["root.v2"], want)
		}
		if got["dir.v2"] != v2.srv {
			t.Errorf("the server's unified cgroup from the namespace: %q, want %q", got["dir.v2"], v2.srv)
		}
	}
	if mem != nil && got["dir.memory"] != mem.srv {
		t.Errorf("the server's memory cgroup from the namespace: %q, want %q", got["dir.memory"], mem.srv)
	}
	if memHier != nil && got["limit"] != fmt.Sprintf("%d from %s", limit, filepath.Join(memHier.srv, limitFile)) {
		t.Errorf("the server's memory limit from the namespace: %q, want %d from %s", got["limit"], limit, filepath.Join(memHier.srv, limitFile))
	}
}

// nsHelperEnv, set to the server's PID, makes the test binary the sidecar
// half of TestNodeTreeInANamespaceHost: it prints what it resolves.
const nsHelperEnv = "INFERWATCH_CGROUP_NS_HELPER"

func TestMain(m *testing.M) {
	if pid := os.Getenv(nsHelperEnv); pid != "" {
		os.Exit(nsHelper(pid))
	}
	os.Exit(m.Run())
}

func nsHelper(pidText string) int {
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		fmt.Println("error=", err)
		return 1
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	m := ParseProcCgroup(self)
	if m.HasV2 {
		fmt.Printf("self.v2=%s\n", m.V2)
	}
	if p, ok := m.ByCtrl["memory"]; ok {
		fmt.Printf("self.memory=%s\n", p)
	}
	mounts, err := SelfMounts()
	if err != nil {
		fmt.Println("error=", err)
		return 1
	}
	for _, m := range mounts {
		if m.V2 {
			fmt.Printf("root.v2=%s\n", m.Root)
		}
	}
	if d, err := ProcessDir(pid, mounts, ""); err == nil {
		fmt.Printf("dir.v2=%s\n", d)
	} else {
		fmt.Printf("dir.v2=error: %v\n", err)
	}
	if d, err := ProcessDir(pid, mounts, "memory"); err == nil {
		fmt.Printf("dir.memory=%s\n", d)
	} else {
		fmt.Printf("dir.memory=error: %v\n", err)
	}
	if n, from, err := ProcessMemoryLimit(pid, mounts); err == nil {
		fmt.Printf("limit=%d from %s\n", n, from)
	} else {
		fmt.Printf("limit=error: %v\n", err)
	}
	return 0
}

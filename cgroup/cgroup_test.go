package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	mi := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /kube\040pods /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
broken line
`
	got := ParseMountinfo([]byte(mi))
	if len(got) != 3 {
		t.Fatalf("mounts %+v", got)
	}
	if got[0].Point != "/sys/fs/cgroup/cpu,cpuacct" || got[0].V2 || strings.Join(got[0].Controllers, ",") != "rw,cpu,cpuacct" {
		t.Errorf("cpu mount %+v", got[0])
	}
	if got[1].Root != "/kube pods" {
		t.Errorf("escaped root %q", got[1].Root)
	}
	if !got[2].V2 || got[2].Point != "/sys/fs/cgroup/unified" {
		t.Errorf("unified mount %+v", got[2])
	}
}

func TestDir(t *testing.T) {
	hybrid := []Mount{
		{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Controllers: []string{"rw", "cpu", "cpuacct"}},
		{Point: "/sys/fs/cgroup/memory", Root: "/", Controllers: []string{"rw", "memory"}},
		{Point: "/sys/fs/cgroup/unified", Root: "/", V2: true},
	}
	unified := []Mount{{Point: "/sys/fs/cgroup", Root: "/", V2: true}}
	sub := []Mount{{Point: "/sys/fs/cgroup", Root: "/kubepods/pod1", V2: true}}
	tests := []struct {
		name       string
		mounts     []Mount
		proc, ctrl string
		want       string
		err        error
	}{
		{"hybrid cpu in v1", hybrid, "4:memory:/pod/a\n2:cpu,cpuacct:/pod/a\n0::/pod/a\n", "cpu", "/sys/fs/cgroup/cpu,cpuacct/pod/a", nil},
		{"hybrid memory in v1", hybrid, "4:memory:/pod/m\n0::/pod/a\n", "memory", "/sys/fs/cgroup/memory/pod/m", nil},
		{"hybrid, unified asked", hybrid, "4:memory:/pod/m\n0::/pod/a\n", "", "/sys/fs/cgroup/unified/pod/a", nil},
		{"v1 joint controllers", []Mount{{Point: "/sys/fs/cgroup/cpu,memory", Root: "/", Controllers: []string{"rw", "cpu", "memory"}}}, "3:cpu,memory:/x\n", "memory", "/sys/fs/cgroup/cpu,memory/x", nil},
		{"v1 sub-tree (runc without a namespace)", []Mount{{Point: "/sys/fs/cgroup/memory", Root: "/docker/abc", Controllers: []string{"memory"}}}, "4:memory:/docker/abc\n", "memory", "/sys/fs/cgroup/memory", nil},
		{"controller not in v1: unified", hybrid, "0::/pod/a\n", "pids", "/sys/fs/cgroup/unified/pod/a", nil},
		{"v2", unified, "0::/kubepods/pod1/c1\n", "cpu", "/sys/fs/cgroup/kubepods/pod1/c1", nil},
		{"sub-tree mount", sub, "0::/kubepods/pod1/c2\n", "memory", "/sys/fs/cgroup/c2", nil},
		{"sub-tree root itself", sub, "0::/kubepods/pod1\n", "memory", "/sys/fs/cgroup", nil},
		{"outside the sub-tree", sub, "0::/other\n", "cpu", "", ErrOutside},
		{"a prefix is not a parent", sub, "0::/kubepods/pod10\n", "cpu", "", ErrOutside},
		{"another namespace", unified, "0::/../x\n", "cpu", "", ErrOutside},
		{"no v2 mount", hybrid[:2], "0::/a\n", "", "", ErrNotMounted},
		{"v1 only, no line", hybrid[:2], "4:memory:/a\n", "", "", ErrNotMounted},
		{"nothing", nil, "", "memory", "", ErrNotMounted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcCgroup([]byte(tc.proc)).Dir(tc.mounts, tc.ctrl)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Dir = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// tree writes files (path → body) under a fresh directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // under the mount point(s): v2 at "", v1 memory at "memory/"
		v1    bool              // mount a v1 memory hierarchy at memory/ beside v2 at unified/
		proc  string
		want  int64
		from  string // the file that set it
		err   bool
	}{
		{name: "v2 container", files: map[string]string{"kubepods/pod1/c1/memory.max": "268435456\n"},
			proc: "0::/kubepods/pod1/c1\n", want: 268435456, from: "kubepods/pod1/c1/memory.max"},
		{name: "v2 pod's limit binds", files: map[string]string{"kubepods/pod1/memory.max": "134217728\n", "kubepods/pod1/c1/memory.max": "max\n"},
			proc: "0::/kubepods/pod1/c1\n", want: 134217728, from: "kubepods/pod1/memory.max"},
		{name: "v2 the smaller of two", files: map[string]string{"kubepods/pod1/memory.max": "536870912\n", "kubepods/pod1/c1/memory.max": "268435456\n"},
			proc: "0::/kubepods/pod1/c1\n", want: 268435456, from: "kubepods/pod1/c1/memory.max"},
		{name: "v2, own cgroup namespace", files: map[string]string{"memory.max": "536870912\n"}, proc: "0::/\n", want: 536870912, from: "memory.max"},
		{name: "v2 unlimited", files: map[string]string{"memory.max": "max\n", "a/memory.max": "max\n"}, proc: "0::/a\n"},
		{name: "v2 without the memory controller", files: map[string]string{"a/cgroup.procs": ""}, proc: "0::/a\n", err: true},
		{name: "v1 on a hybrid host", v1: true, files: map[string]string{"memory/kubepods/c1/memory.limit_in_bytes": "268435456\n", "unified/kubepods/c1/cgroup.procs": ""},
			proc: "4:memory:/kubepods/c1\n0::/kubepods/c1\n", want: 268435456, from: "memory/kubepods/c1/memory.limit_in_bytes"},
		{name: "v1 unlimited", v1: true, files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"},
			proc: "4:memory:/\n0::/\n"},
		{name: "garbage", files: map[string]string{"memory.max": "lots\n"}, proc: "0::/\n", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			mounts := []Mount{{Point: root, Root: "/", V2: true}}
			if tc.v1 {
				mounts = []Mount{{Point: filepath.Join(root, "memory"), Root: "/", Controllers: []string{"memory"}}, {Point: filepath.Join(root, "unified"), Root: "/", V2: true}}
			}
			got, from, err := ParseProcCgroup([]byte(tc.proc)).MemoryLimit(mounts)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			want := ""
			if tc.from != "" {
				want = filepath.Join(root, tc.from)
			}
			if got != tc.want || from != want {
				t.Errorf("got %d from %q, want %d from %q", got, from, tc.want, want)
			}
		})
	}
}

func TestSelfMemoryLimit(t *testing.T) {
	// runc's private view on a hybrid host: the v1 memory hierarchy is the
	// container's own cgroup at its mount point, and /proc/self/cgroup
	// does not list it.
	root := tree(t, map[string]string{"memory/memory.limit_in_bytes": "268435456\n", "unified/cgroup.procs": ""})
	mounts := []Mount{{Point: filepath.Join(root, "memory"), Root: "/", Controllers: []string{"memory"}}, {Point: filepath.Join(root, "unified"), Root: "/", V2: true}}
	got, from, err := SelfMemoryLimit([]byte("0::/libpod_parent/libpod-1\n"), mounts)
	if err != nil || got != 268435456 || from != filepath.Join(root, "memory/memory.limit_in_bytes") {
		t.Fatalf("got %d from %q, %v", got, from, err)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:   "/a b",
		`/plain`:    "/plain",
		`/x\134y`:   `/x\y`,
		`/trail\04`: `/trail\04`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNodeTreeInANamespace: a container with a cgroup namespace that has
// the node's hierarchy mounted too (Root "/../../..") finds another
// container's cgroup ("/../ctrB") there, anchored at its own.
func TestNodeTreeInANamespace(t *testing.T) {
	pid := 4242
	for _, tc := range []struct {
		name, self string // this process's cgroup in its namespace
	}{{"at the namespace root", "/"}, {"below it", "/sub"}} {
		t.Run(tc.name, func(t *testing.T) {
			own := "kubepods/pod1/ctrA"
			if tc.self != "/" {
				own += tc.self
			}
			node := tree(t, map[string]string{
				own + "/cgroup.procs":             "1\n4242\n",
				"kubepods/pod1/ctrB/cgroup.procs": "77\n",
				"kubepods/pod1/ctrB/memory.max":   "268435456\n",
				"kubepods/pod1/memory.max":        "536870912\n",
				"kubepods/pod2/ctrC/cgroup.procs": "4243\n",
				"kubepods/pod2/ctrC/memory.max":   "max\n",
			})
			ownMount := Mount{Point: filepath.Join(node, "..", "own-view"), Root: "/", V2: true}
			mounts := []Mount{ownMount, {Point: node, Root: "/../../..", V2: true}}
			anchor(mounts, ParseProcCgroup([]byte("0::"+tc.self+"\n")), pid)
			if want := filepath.Join(node, "kubepods/pod1/ctrA"); mounts[1].NSRoot != want || mounts[0].NSRoot != "" {
				t.Fatalf("NSRoot %q (own view %q), want %q", mounts[1].NSRoot, mounts[0].NSRoot, want)
			}
			d, err := ParseProcCgroup([]byte("0::/../ctrB\n")).Dir(mounts, "cpu")
			if err != nil || d != filepath.Join(node, "kubepods/pod1/ctrB") {
				t.Fatalf("another container: %q, %v", d, err)
			}
			n, from, err := ParseProcCgroup([]byte("0::/../ctrB\n")).MemoryLimit(mounts)
			if err != nil || n != 268435456 || from != filepath.Join(node, "kubepods/pod1/ctrB/memory.max") {
				t.Fatalf("its limit %d from %q, %v", n, from, err)
			}
			if d, err := ParseProcCgroup([]byte("0::/\n")).Dir(mounts, "cpu"); err != nil || d != ownMount.Point {
				t.Fatalf("own cgroup: %q, %v; want the own view first", d, err)
			}
			if _, err := ParseProcCgroup([]byte("0::/../../../../x\n")).Dir(mounts, "cpu"); !errors.Is(err, ErrOutside) {
				t.Fatalf("above the node's tree: %v", err)
			}
		})
	}
	// Not found: no anchor, and another container's cgroup stays out.
	node := tree(t, map[string]string{"kubepods/pod1/ctrB/cgroup.procs": "77\n"})
	mounts := []Mount{{Point: node, Root: "/../../..", V2: true}}
	anchor(mounts, ParseProcCgroup([]byte("0::/\n")), pid)
	if _, err := ParseProcCgroup([]byte("0::/../ctrB\n")).Dir(mounts, "cpu"); mounts[0].NSRoot != "" || !errors.Is(err, ErrOutside) {
		t.Fatalf("unanchored: NSRoot %q, %v", mounts[0].NSRoot, err)
	}
}

// TestSelfMountsCached: a second call answers the same, and what a caller
// does with its slice does not reach the next caller.
func TestSelfMountsCached(t *testing.T) {
	a, err := SelfMounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 {
		t.Fatal("no cgroup mounts in /proc/self/mountinfo")
	}
	want := a[0]
	a[0].Point = "/changed"
	b, err := SelfMounts()
	if err != nil || len(b) != len(a) || b[0].Point != want.Point {
		t.Fatalf("second call %+v, %v; want %d mounts, the first at %s", b, err, len(a), want.Point)
	}
}

package pids

import (
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func listenPort(t *testing.T, network, addr string) int {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

func TestListeningPIDsFindsThisProcess(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"},
	} {
		t.Run(tc.network, func(t *testing.T) {
			port := listenPort(t, tc.network, tc.addr)
			got, err := ListeningPIDs(port)
			if err != nil {
				t.Fatalf("ListeningPIDs(%d): %v", port, err)
			}
			if !slices.Contains(got, os.Getpid()) {
				t.Fatalf("ListeningPIDs(%d) = %v, want it to contain this test's PID %d", port, got, os.Getpid())
			}
		})
	}
}

func TestListeningPIDsNothingListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if got, err := ListeningPIDs(port); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ListeningPIDs(%d) after close = %v, %v; want ErrNotFound", port, got, err)
	}
	if _, err := ListeningPIDs(70000); err == nil {
		t.Fatal("port 70000 accepted")
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

func TestListeningPIDsParsesProc(t *testing.T) {
	proc := t.TempDir()
	// Port 8000 = 0x1F40. Inode 555 listens; 556 is an accepted connection
	// on the same port (state 01) held by another process; 557 listens on
	// another port.
	write(t, filepath.Join(proc, "net/tcp"), tcpHeader+
		"   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0\n"+
		"   1: 0100007F:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 556 1 0000000000000000 20 4 30 10 -1\n"+
		"   2: 00000000:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 557 1 0000000000000000 100 0 0 10 0\n")
	// The IPv6 socket of the same server (dual listeners, as Triton has).
	write(t, filepath.Join(proc, "net/tcp6"), tcpHeader+
		"   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 600 1 0000000000000000 100 0 0 10 0\n")
	symlink(t, "/dev/null", filepath.Join(proc, "100/fd/0"))
	symlink(t, "socket:[555]", filepath.Join(proc, "100/fd/7"))
	symlink(t, "socket:[556]", filepath.Join(proc, "200/fd/3"))
	symlink(t, "socket:[557]", filepath.Join(proc, "300/fd/3"))
	symlink(t, "socket:[600]", filepath.Join(proc, "20/fd/9"))
	write(t, filepath.Join(proc, "self/cgroup"), "0::/\n") // not a PID directory

	got, err := listeningPIDs(proc, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{20, 100}; !slices.Equal(got, want) {
		t.Fatalf("listeningPIDs(8000) = %v, want %v", got, want)
	}
	if _, err := listeningPIDs(proc, 9000); !errors.Is(err, ErrNotFound) {
		t.Fatalf("port 9000: err %v, want ErrNotFound", err)
	}

	os.Remove(filepath.Join(proc, "net/tcp6")) // a kernel without IPv6
	if got, err := listeningPIDs(proc, 8000); err != nil || !slices.Equal(got, []int{100}) {
		t.Fatalf("without tcp6: %v, %v; want [100]", got, err)
	}
}

func TestCgroupPIDsOfThisProcess(t *testing.T) {
	got, err := CgroupPIDs(os.Getpid())
	if err != nil {
		if strings.Contains(err.Error(), "no cgroup v2") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if !slices.Contains(got, os.Getpid()) {
		t.Fatalf("CgroupPIDs(self) = %v, want it to contain %d", got, os.Getpid())
	}
}

// fakeCgroups builds a proc tree whose PID 42 lives in /kubepods/pod1/ctrA,
// beside ctrB, with the unified hierarchy mounted from mountRoot.
func fakeCgroups(t *testing.T, mountRoot string) (proc string) {
	t.Helper()
	dir := t.TempDir()
	proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cg space")
	esc := strings.ReplaceAll(cg, " ", `\040`)
	write(t, filepath.Join(proc, "self/mountinfo"),
		"25 1 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"+
			"41 31 0:38 "+mountRoot+" "+esc+" rw,relatime shared:9 - cgroup2 cgroup2 rw\n")
	write(t, filepath.Join(proc, "42/cgroup"), "4:memory:/x\n0::/kubepods/pod1/ctrA\n")
	write(t, filepath.Join(proc, "7/cgroup"), "0::/elsewhere\n")
	base := cg
	if mountRoot == "/" {
		base = filepath.Join(cg, "kubepods")
	}
	write(t, filepath.Join(base, "pod1/cgroup.procs"), "")
	write(t, filepath.Join(base, "pod1/ctrA/cgroup.procs"), "43\n42\n")
	write(t, filepath.Join(base, "pod1/ctrB/cgroup.procs"), "50\n")
	write(t, filepath.Join(base, "pod2/cgroup.procs"), "60\n")
	return proc
}

func TestCgroupPIDsParsesTree(t *testing.T) {
	for _, root := range []string{"/", "/kubepods"} {
		t.Run("mountroot="+root, func(t *testing.T) {
			proc := fakeCgroups(t, root)
			dir, err := cgroupDir(proc, 42)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cgroupProcs(filepath.Dir(dir)) // the pod: both containers
			if err != nil {
				t.Fatal(err)
			}
			if want := []int{42, 43, 50}; !slices.Equal(got, want) {
				t.Fatalf("pod cgroup PIDs = %v, want %v", got, want)
			}
			if got, _ := cgroupProcs(dir); !slices.Equal(got, []int{42, 43}) {
				t.Fatalf("container cgroup PIDs = %v, want [42 43]", got)
			}
			if root != "/" {
				if _, err := cgroupDir(proc, 7); err == nil {
					t.Fatal("a cgroup outside the mounted subtree was accepted")
				}
			}
		})
	}
}

func TestCgroupErrors(t *testing.T) {
	proc := t.TempDir()
	write(t, filepath.Join(proc, "self/mountinfo"), "25 1 0:23 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
	write(t, filepath.Join(proc, "1/cgroup"), "0::/a\n")
	if _, err := cgroupDir(proc, 1); err == nil || !strings.Contains(err.Error(), "no cgroup v2") {
		t.Fatalf("v1-only host: err %v", err)
	}
	if _, err := cgroupDir(proc, 2); err == nil {
		t.Fatal("missing cgroup file accepted")
	}
	write(t, filepath.Join(proc, "9/cgroup"), "4:memory:/x\n")
	if _, err := cgroupDir(proc, 9); err == nil || !strings.Contains(err.Error(), "no cgroup v2") {
		t.Fatalf("cgroup file without 0:: accepted: %v", err)
	}
}

func TestSpecResolve(t *testing.T) {
	port := listenPort(t, "tcp4", "127.0.0.1:0")
	got, err := Spec{PIDs: []int{1 << 30, os.Getpid()}, Port: port}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{os.Getpid(), 1 << 30}; !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v, want %v (sorted, deduplicated)", got, want)
	}
	// A failing source still returns the others' PIDs.
	got, err = Spec{PIDs: []int{5}, Port: 1}.Resolve()
	if err == nil || !slices.Equal(got, []int{5}) {
		t.Fatalf("Resolve with a dead port = %v, %v; want [5] and an error", got, err)
	}
	if !(Spec{}).IsZero() || (Spec{Port: 80}).IsZero() {
		t.Fatal("IsZero wrong")
	}
}

// TestSockDiagMatchesProcNet checks that sock_diag finds the same listening
// inodes as /proc/net/tcp and tcp6, for IPv4 and IPv6 listeners, and none
// for a port nobody listens on.
func TestSockDiagMatchesProcNet(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"},
	} {
		t.Run(tc.network, func(t *testing.T) {
			port := listenPort(t, tc.network, tc.addr)
			diag, files := map[uint64]bool{}, map[uint64]bool{}
			if err := listenInodesDiag(port, diag); err != nil {
				t.Fatalf("sock_diag: %v", err)
			}
			for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
				if err := listenInodes(f, port, files); err != nil {
					t.Fatal(err)
				}
			}
			if len(diag) != 1 || !maps.Equal(diag, files) {
				t.Fatalf("port %d: sock_diag %v, /proc/net %v", port, diag, files)
			}
		})
	}
	free := listenPort(t, "tcp4", "127.0.0.1:0")
	// listenPort's listener closes at cleanup; a fresh reserved-and-closed
	// port listens nowhere.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unused := l.Addr().(*net.TCPAddr).Port
	l.Close()
	none := map[uint64]bool{}
	if err := listenInodesDiag(unused, none); err != nil || len(none) != 0 {
		t.Fatalf("port %d (nobody listens; %d does): %v, %v", unused, free, none, err)
	}
}

// TestListeningPIDsOwnerCache: while the listening sockets stay the same,
// the last owners are rechecked instead of every process scanned; an owner
// that lets go of the socket, a new socket, or the rescan interval brings a
// full scan back.
func TestListeningPIDsOwnerCache(t *testing.T) {
	proc := t.TempDir()
	write(t, filepath.Join(proc, "net/tcp"), tcpHeader+
		"   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0\n")
	symlink(t, "socket:[555]", filepath.Join(proc, "100/fd/7"))
	if got, err := listeningPIDs(proc, 8000); err != nil || !slices.Equal(got, []int{100}) {
		t.Fatalf("first scan: %v, %v; want [100]", got, err)
	}

	// A second holder appears: the cache, whose owner still holds the
	// socket, answers without seeing it ...
	symlink(t, "socket:[555]", filepath.Join(proc, "150/fd/3"))
	if got, _ := listeningPIDs(proc, 8000); !slices.Equal(got, []int{100}) {
		t.Fatalf("cached: %v, want [100] (no full scan)", got)
	}
	// ... until the interval is up.
	owners.mu.Lock()
	owners.scanned = owners.scanned.Add(-ownerRescan)
	owners.mu.Unlock()
	if got, _ := listeningPIDs(proc, 8000); !slices.Equal(got, []int{100, 150}) {
		t.Fatalf("after the rescan interval: %v, want [100 150]", got)
	}

	// The cached owner exits: a full scan finds who holds the socket now.
	os.RemoveAll(filepath.Join(proc, "100"))
	if got, _ := listeningPIDs(proc, 8000); !slices.Equal(got, []int{150}) {
		t.Fatalf("after the owner left: %v, want [150]", got)
	}

	// A restarted server listens on a new socket: the cache does not match.
	write(t, filepath.Join(proc, "net/tcp"), tcpHeader+
		"   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0\n")
	symlink(t, "socket:[777]", filepath.Join(proc, "300/fd/4"))
	if got, _ := listeningPIDs(proc, 8000); !slices.Equal(got, []int{300}) {
		t.Fatalf("after a new socket: %v, want [300]", got)
	}
}

// Package pids finds the processes behind an upstream, so that the GPU
// sampler can tell the upstream's own GPU work from a neighbour's: from an
// explicit list, from the socket listening on the upstream's port, or from
// the cgroup (the container or pod) such a process lives in.
//
// It reads Linux's /proc, the cgroup v2 hierarchy and the kernel's
// sock_diag netlink interface (listening sockets) and nothing else; PIDs
// are as this process's PID namespace sees them.
package pids

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/cgroup"
)

// ErrNotFound says that nothing matched: no socket listening on the port,
// or no process holding it.
var ErrNotFound = errors.New("not found")

// Spec says how to find the upstream's PIDs. The sources add up.
type Spec struct {
	PIDs   []int // explicit PIDs
	Port   int   // TCP port the upstream listens on, in this network namespace; 0: none
	Cgroup bool  // widen every PID found to all PIDs of its cgroup v2 subtree
	// SocketUser finds Port's upstream by the listening socket's user when
	// no readable process holds the socket (SocketUserPIDs): for a pod
	// sharing its PID namespace with a server running as another user.
	SocketUser bool
}

// IsZero reports whether s names no source at all.
func (s Spec) IsZero() bool { return len(s.PIDs) == 0 && s.Port == 0 }

// Resolve returns the PIDs s describes, sorted and without duplicates. A
// source that fails does not hide the others: what was found is returned
// together with the joined errors.
func (s Spec) Resolve() ([]int, error) {
	found := slices.Clone(s.PIDs)
	var errs []error
	if s.Port != 0 {
		p, err := ListeningPIDs(s.Port)
		if err != nil && s.SocketUser && errors.Is(err, ErrNotFound) {
			var uerr error
			if p, uerr = SocketUserPIDs(s.Port); uerr == nil {
				err = nil
			} else {
				err = errors.Join(err, uerr)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		found = append(found, p...)
	}
	if s.Cgroup {
		seeds := slices.Clone(found)
		done := make(map[string]bool) // cgroup directories already read
		for _, pid := range seeds {
			dir, err := cgroupDir(procRoot, pid)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if done[dir] {
				continue
			}
			done[dir] = true
			p, err := cgroupProcs(dir)
			if err != nil {
				errs = append(errs, fmt.Errorf("PIDs of the cgroup of PID %d: %w", pid, err))
			}
			found = append(found, p...)
		}
	}
	slices.Sort(found)
	return slices.Compact(found), errors.Join(errs...)
}

// procRoot is where procfs is mounted; tests point the internal functions
// at a fake tree instead.
const procRoot = "/proc"

// ListeningPIDs returns the PIDs of the processes that hold a TCP socket
// listening on port (IPv4 or IPv6), sorted. Only this network namespace is
// seen (/proc/net is the reader's), and only processes whose file
// descriptors this process may read (root, or the same user).
func ListeningPIDs(port int) ([]int, error) {
	return listeningPIDs(procRoot, port)
}

func listeningPIDs(proc string, port int) ([]int, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("listening PIDs: port %d out of range", port)
	}
	inodes := make(map[uint64]bool)
	// sock_diag first on the real /proc (it is cheap), the tables as files
	// where it is not there (a kernel without inet_diag) and in tests.
	if proc != procRoot || listenInodesDiag(port, inodes) != nil {
		clear(inodes)
		var readErrs []error
		for _, f := range []string{"net/tcp", "net/tcp6"} {
			err := listenInodes(filepath.Join(proc, f), port, inodes)
			// tcp6 is missing on a kernel without IPv6; only both missing is fatal.
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("listening PIDs for port %d: %w", port, err)
			}
			if err != nil {
				readErrs = append(readErrs, err)
			}
		}
		if len(readErrs) == 2 {
			return nil, fmt.Errorf("listening PIDs for port %d: %w", port, errors.Join(readErrs...))
		}
	}
	if len(inodes) == 0 {
		return nil, fmt.Errorf("listening PIDs: no TCP socket listening on port %d: %w", port, ErrNotFound)
	}
	if pids, ok := owners.lookup(proc, inodes, time.Now()); ok {
		return pids, nil
	}
	pids, denied, err := socketOwners(proc, inodes)
	if err == nil && len(pids) > 0 {
		owners.store(proc, inodes, pids, time.Now())
	}
	if err != nil {
		return nil, fmt.Errorf("listening PIDs for port %d: %w", port, err)
	}
	if len(pids) == 0 {
		if denied > 0 {
			return nil, fmt.Errorf("listening PIDs: a socket listens on port %d but no readable process holds it (%d processes' descriptors not readable: run as root or as the upstream's user): %w", port, denied, ErrNotFound)
		}
		return nil, fmt.Errorf("listening PIDs: a socket listens on port %d but no process holds it: %w", port, ErrNotFound)
	}
	return pids, nil
}

// tcpListen is the kernel's TCP_LISTEN state as /proc/net/tcp prints it.
const tcpListen = "0A"

// listenInodes adds to inodes the socket inodes of the table at path (the
// format of /proc/net/tcp and tcp6) that listen on port.
func listenInodes(path string, port int, inodes map[uint64]bool) error {
	return listeners(path, port, func(fields []string) {
		if ino, err := strconv.ParseUint(fields[9], 10, 64); err == nil && ino != 0 {
			inodes[ino] = true
		}
	})
}

// listeners calls each with the fields of every line of the table at path
// (the format of /proc/net/tcp and tcp6) that listens on port: sl
// local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode.
func listeners(path string, port int, each func(fields []string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			each(fields)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// ownerRescan bounds how long a cached owner answer is trusted without a
// full scan: a pre-forking server's new workers share its listening socket
// and show up at the next full scan.
const ownerRescan = 30 * time.Second

// ownerCache remembers the last owners found for a set of listening
// sockets. A full scan reads every descriptor of every process (here 770
// readlinks a second, 2 % of a core, for a once-a-second caller); while the
// socket set is the same, checking that the known owners still hold it
// costs a few.
type ownerCache struct {
	mu      sync.Mutex
	proc    string
	inodes  map[uint64]bool
	pids    []int
	scanned time.Time
}

var owners ownerCache

func (c *ownerCache) lookup(proc string, inodes map[uint64]bool, now time.Time) ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != proc || !maps.Equal(c.inodes, inodes) || now.Sub(c.scanned) >= ownerRescan {
		return nil, false
	}
	for _, pid := range c.pids {
		if !holdsSocket(proc, pid, inodes) {
			return nil, false
		}
	}
	return slices.Clone(c.pids), true
}

func (c *ownerCache) store(proc string, inodes map[uint64]bool, pids []int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proc, c.inodes, c.pids, c.scanned = proc, maps.Clone(inodes), slices.Clone(pids), now
}

// holdsSocket reports whether pid has a descriptor on one of inodes.
func holdsSocket(proc string, pid int, inodes map[uint64]bool) bool {
	fdDir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if inodes[socketInode(filepath.Join(fdDir, fd.Name()))] {
			return true
		}
	}
	return false
}

// socketInode returns the inode of the socket a descriptor link names, 0
// for anything else.
func socketInode(link string) uint64 {
	target, err := os.Readlink(link)
	if err != nil {
		return 0
	}
	rest, ok := strings.CutPrefix(target, "socket:[")
	if !ok {
		return 0
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	if err != nil {
		return 0
	}
	return ino
}

// socketOwners scans proc/*/fd for links to "socket:[inode]" and returns the
// PIDs holding any of inodes, sorted, and how many processes' descriptors
// could not be read for lack of permission.
func socketOwners(proc string, inodes map[uint64]bool) (pids []int, denied int, err error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", proc, err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			// A process that exited meanwhile is simply gone.
			if errors.Is(err, fs.ErrPermission) {
				denied++
			}
			continue
		}
		for _, fd := range fds {
			if inodes[socketInode(filepath.Join(fdDir, fd.Name()))] {
				pids = append(pids, pid)
				break
			}
		}
	}
	slices.Sort(pids) // ReadDir sorts by name, not number
	return pids, denied, nil
}

// CgroupPIDs returns every PID in the cgroup v2 of pid and in the cgroups
// below it, sorted: for a process of a container, the container's processes.
// The unified (v2) hierarchy is found through /proc/self/mountinfo, so a
// hybrid host that mounts it at /sys/fs/cgroup/unified works too.
func CgroupPIDs(pid int) ([]int, error) {
	dir, err := cgroupDir(procRoot, pid)
	if err != nil {
		return nil, err
	}
	p, err := cgroupProcs(dir)
	if err != nil {
		return nil, fmt.Errorf("PIDs of the cgroup of PID %d: %w", pid, err)
	}
	return p, nil
}

// cgroupDir returns the directory of pid's cgroup v2, as the mounts of
// proc's self see it.
func cgroupDir(proc string, pid int) (string, error) {
	var mounts []cgroup.Mount
	if proc == procRoot {
		// The real one also anchors a node's tree mounted in a container.
		m, err := cgroup.SelfMounts()
		if err != nil {
			return "", fmt.Errorf("cgroup of PID %d: %w", pid, err)
		}
		mounts = m
	} else {
		mi, err := os.ReadFile(filepath.Join(proc, "self", "mountinfo"))
		if err != nil {
			return "", fmt.Errorf("cgroup of PID %d: %w", pid, err)
		}
		mounts = cgroup.ParseMountinfo(mi)
	}
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", fmt.Errorf("cgroup of PID %d: %w", pid, err)
	}
	d, err := cgroup.ParseProcCgroup(b).Dir(mounts, "")
	if err != nil {
		return "", fmt.Errorf("cgroup of PID %d: %w", pid, err)
	}
	return d, nil
}

// maxCgroupDirs bounds the walk below a cgroup: a pod has a handful of
// containers, and a runaway tree must not stall the sampler.
const maxCgroupDirs = 1024

// cgroupProcs reads cgroup.procs of dir and of every cgroup below it: in
// cgroup v2 processes live in the leaves, so a pod's cgroup lists none of
// its own.
func cgroupProcs(dir string) ([]int, error) {
	var pids []int
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a cgroup removed during the walk
		}
		if !d.IsDir() {
			return nil
		}
		if n++; n > maxCgroupDirs {
			return fs.SkipAll
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			if path == dir {
				return err
			}
			return nil
		}
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

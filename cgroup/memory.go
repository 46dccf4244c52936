package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// unlimitedV1 is where cgroup v1 reports no limit: the largest page-aligned
// int64, 9223372036854771712; anything this large is no limit.
const unlimitedV1 = 1 << 62

// MemoryLimit returns the memory limit the process is under, in bytes: the
// smallest memory.max (v2) or memory.limit_in_bytes (v1) of its cgroup and
// of each ancestor up to the mount's root, since a parent's (a Kubernetes
// pod's) limit binds its children too. It is 0 when none is set; file is
// the file that set it. An error says that none could be read.
func (m Membership) MemoryLimit(mounts []Mount) (limit int64, file string, err error) {
	dir, mt, err := m.dir(mounts, "memory")
	if err != nil {
		return 0, "", fmt.Errorf("memory limit: %w", err)
	}
	return limitUpTo(dir, mt)
}

// limitUpTo reads the limit files from dir up to its mount point.
func limitUpTo(dir string, mt Mount) (limit int64, file string, err error) {
	name := "memory.limit_in_bytes"
	if mt.V2 {
		name = "memory.max"
	}
	read := false
	var errs []error
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, name)
		n, ok, rerr := readLimit(p)
		switch {
		case rerr != nil:
			errs = append(errs, rerr)
		default:
			read = true
			if ok && (limit == 0 || n < limit) {
				limit, file = n, p
			}
		}
		if d == mt.Point || !strings.HasPrefix(d, mt.Point) || d == filepath.Dir(d) {
			break
		}
	}
	if !read {
		return 0, "", fmt.Errorf("memory limit: %w", errors.Join(errs...))
	}
	return limit, file, nil
}

// readLimit reads one limit file; ok is false for "max" (v2) or v1's
// unlimited value.
func readLimit(p string) (n int64, ok bool, err error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false, err
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", p, err)
	}
	return n, n > 0 && n < unlimitedV1, nil
}

// ProcessMemoryLimit is MemoryLimit for a process of this PID namespace.
func ProcessMemoryLimit(pid int, mounts []Mount) (int64, string, error) {
	m, err := processMembership(pid)
	if err != nil {
		return 0, "", fmt.Errorf("memory limit of PID %d: %w", pid, err)
	}
	n, f, err := m.MemoryLimit(mounts)
	if err != nil {
		return 0, "", fmt.Errorf("memory limit of PID %d: %w", pid, err)
	}
	return n, f, nil
}

// SelfMemoryLimit is this process's own limit (self being its
// /proc/self/cgroup). Where that names no hierarchy that holds a limit, a
// mounted v1 memory hierarchy is read at its mount point: a container
// runtime that gives the container a private view of the tree (runc on a
// hybrid host) mounts the container's own cgroup there and may not list it.
func SelfMemoryLimit(self []byte, mounts []Mount) (int64, string, error) {
	n, f, err := ParseProcCgroup(self).MemoryLimit(mounts)
	if err == nil && f != "" {
		return n, f, nil
	}
	for _, mt := range mounts {
		if !mt.V2 && slices.Contains(mt.Controllers, "memory") {
			if n2, f2, err2 := limitUpTo(mt.Point, mt); err2 == nil {
				return n2, f2, nil
			}
		}
	}
	return n, f, err
}

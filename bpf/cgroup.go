package bpf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuStat is what cpu.stat says about CFS throttling.
type cpuStat struct {
	periods, throttled uint64 // nr_periods, nr_throttled
	throttledTime      time.Duration
}

// parseCPUStat reads cgroup v2's throttled_usec or v1's throttled_time
// (nanoseconds). ok is false when the file says nothing of throttling (a
// v2 cgroup without the cpu controller).
func parseCPUStat(b []byte) (s cpuStat, ok bool) {
	for line := range bytes.Lines(b) {
		k, v, found := strings.Cut(strings.TrimSpace(string(line)), " ")
		if !found {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			s.periods = n
		case "nr_throttled":
			s.throttled, ok = n, true
		case "throttled_usec":
			s.throttledTime = time.Duration(n) * time.Microsecond
		case "throttled_time":
			s.throttledTime = time.Duration(n)
		}
	}
	return s, ok
}

// cgMount is a cgroup hierarchy mounted in this mount namespace.
type cgMount struct {
	point, root string
	v2          bool
	controllers []string // v1: the controllers bound to it
}

// parseMountinfo picks the cgroup mounts out of /proc/self/mountinfo.
func parseMountinfo(b []byte) []cgMount {
	var out []cgMount
	for line := range bytes.Lines(b) {
		pre, post, ok := strings.Cut(strings.TrimSpace(string(line)), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			out = append(out, cgMount{point: unescapeMount(f[4]), root: unescapeMount(f[3]), v2: true})
		case "cgroup":
			out = append(out, cgMount{point: unescapeMount(f[4]), root: unescapeMount(f[3]), controllers: strings.Split(g[2], ",")})
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cpuStatPath finds the cpu.stat of the cgroup a process is in, in the
// hierarchy that has the cpu controller: v1's cpu hierarchy when there is
// one (hybrid hosts bind the controller there, and the v2 file then says
// nothing of throttling), else the unified one.
func cpuStatPath(procCgroup []byte, mounts []cgMount) (string, error) {
	var v1, v2 string
	var haveV1, haveV2 bool
	for line := range bytes.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, haveV2 = parts[2], true
		} else if slices.Contains(strings.Split(parts[1], ","), "cpu") {
			v1, haveV1 = parts[2], true
		}
	}
	for _, m := range mounts {
		if haveV1 && !m.v2 && slices.Contains(m.controllers, "cpu") {
			return joinCgroup(m, v1)
		}
	}
	if haveV2 {
		for _, m := range mounts {
			if m.v2 {
				return joinCgroup(m, v2)
			}
		}
	}
	return "", errors.New("no cgroup hierarchy with the cpu controller is mounted for it")
}

// joinCgroup maps a /proc/PID/cgroup path onto a mount whose root may be a
// sub-tree (cgroup namespaces, bind mounts into containers).
func joinCgroup(m cgMount, p string) (string, error) {
	// Another cgroup namespace's cgroup shows as a path up from ours.
	if p == "/.." || strings.HasPrefix(p, "/../") {
		return "", fmt.Errorf("cgroup %s is outside this cgroup namespace", p)
	}
	rel := path.Clean(p)
	if m.root != "/" {
		r, ok := strings.CutPrefix(rel, m.root)
		if !ok || (r != "" && r[0] != '/') {
			return "", fmt.Errorf("cgroup %s is outside the mounted sub-tree %s", p, m.root)
		}
		rel = r
	}
	return filepath.Join(m.point, rel, "cpu.stat"), nil
}

// cgroupReader follows the throttling of the upstream's cgroups.
type cgroupReader struct {
	mounts []cgMount
	paths  []string           // cpu.stat files of the upstream's cgroups
	prev   map[string]cpuStat // last reading per file
}

// setPIDs finds the cgroups of the upstream's processes.
func (c *cgroupReader) setPIDs(pids []int) {
	if c.mounts == nil {
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
			c.mounts = parseMountinfo(b)
		}
	}
	var paths []string
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue
		}
		if p, err := cpuStatPath(b, c.mounts); err == nil && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	c.paths = paths
}

// sample returns the throttling since the last call, summed over the
// upstream's cgroups; ok is false when none says anything of throttling.
// A cgroup seen for the first time contributes from the next call on.
func (c *cgroupReader) sample() (d cpuStat, ok bool) {
	next := make(map[string]cpuStat, len(c.paths))
	for _, p := range c.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s, found := parseCPUStat(b)
		if !found {
			continue
		}
		ok = true
		next[p] = s
		if old, seen := c.prev[p]; seen && s.throttledTime >= old.throttledTime {
			d.periods += s.periods - old.periods
			d.throttled += s.throttled - old.throttled
			d.throttledTime += s.throttledTime - old.throttledTime
		}
	}
	c.prev = next
	return d, ok
}

// Pressure resources, the index of psiReader's arrays.
const (
	psiCPU = iota
	psiMemory
	psiIO
	nPSI
)

var psiNames = [nPSI]string{"cpu", "memory", "io"}

// psiTotals is one /proc/pressure file: total stall time with some and
// with all (full) non-idle tasks stalled.
type psiTotals struct{ some, full time.Duration }

func parsePSI(b []byte) (t psiTotals, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		for _, kv := range f[1:] {
			v, found := strings.CutPrefix(kv, "total=")
			if !found {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch f[0] {
			case "some":
				t.some, ok = time.Duration(n)*time.Microsecond, true
			case "full":
				t.full = time.Duration(n) * time.Microsecond
			}
		}
	}
	return t, ok
}

// psiReader follows /proc/pressure; a kernel without PSI (or booted with
// psi=0) has no files, or files that fail to read, and reports nothing.
type psiReader struct {
	prev [nPSI]psiTotals
	seen [nPSI]bool
}

func (r *psiReader) sample() (d [nPSI]psiTotals, ok [nPSI]bool) {
	for i, name := range psiNames {
		b, err := os.ReadFile("/proc/pressure/" + name)
		if err != nil {
			r.seen[i] = false
			continue
		}
		t, found := parsePSI(b)
		if !found {
			r.seen[i] = false
			continue
		}
		if r.seen[i] {
			d[i] = psiTotals{t.some - r.prev[i].some, t.full - r.prev[i].full}
			ok[i] = true
		}
		r.prev[i], r.seen[i] = t, true
	}
	return d, ok
}

package bpf

import (
	"bufio"
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/cgroup"
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

// cgroupReader follows the throttling of the upstream's cgroups.
type cgroupReader struct {
	mounts []cgroup.Mount
	paths  []string           // cpu.stat files of the upstream's cgroups
	prev   map[string]cpuStat // last reading per file
}

// setPIDs finds the cgroups of the upstream's processes. The error says
// why none was found for any of them (a container's view of the cgroup
// tree leaves other containers' cgroups out).
func (c *cgroupReader) setPIDs(pids []int) error {
	if c.mounts == nil {
		c.mounts, _ = cgroup.SelfMounts()
	}
	var paths []string
	var first error
	for _, pid := range pids {
		d, err := cgroup.ProcessDir(pid, c.mounts, "cpu")
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if p := filepath.Join(d, "cpu.stat"); !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	c.paths = paths
	if len(paths) == 0 && first != nil {
		return first
	}
	return nil
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
		// Any counter going back means the cgroup was recreated (the
		// upstream restarted under the same path): that sample adds
		// nothing rather than a wrapped difference. A cgroup never
		// throttled keeps throttledTime at 0, so it alone cannot tell.
		if old, seen := c.prev[p]; seen && s.periods >= old.periods && s.throttled >= old.throttled && s.throttledTime >= old.throttledTime {
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

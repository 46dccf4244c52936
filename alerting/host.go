package alerting

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxHostText bounds the host_facts annotation. Its figures are a fixed set,
// so it stays far below; the bound is for Alertmanager's sake regardless.
const maxHostText = 512

// hostText renders a snapshot's host facts for the host_facts annotation,
// previous window → current window, rates per second of the covered span:
//
//	runqueue 12ms/s→140ms/s, offcpu 1.9s/s→2.1s/s, throttled 0→80ms/s, oom kills 0→0 (upstream 0→0); absent: cuda, gpu
//
// Empty when the engine has no host source. It carries figures only: no
// process names, nothing from a payload.
func hostText(s *Snapshot) string {
	if s == nil || (s.Current.Host == nil && s.Previous.Host == nil) {
		return ""
	}
	prev, cur := s.Previous.Host, s.Current.Host
	var parts, absent []string
	pair := func(name string, p, c *float64, f func(float64) string) string {
		return name + " " + side(p, f) + "→" + side(c, f)
	}
	// rates maps a present group to the per-second rates of its totals.
	rates := func(h *HostBreakdown, coverage float64, totals ...float64) []*float64 {
		out := make([]*float64, len(totals))
		if h != nil {
			for i, t := range totals {
				out[i] = rate(t, h.Seconds, coverage)
			}
		}
		return out
	}

	if p, c := prev.sched(), cur.sched(); p != nil || c != nil {
		pr, cr := make([]*float64, 2), make([]*float64, 2)
		if p != nil {
			pr = rates(prev, p.Coverage, p.RunqueueDelay, p.OffCPU)
		}
		if c != nil {
			cr = rates(cur, c.Coverage, c.RunqueueDelay, c.OffCPU)
		}
		parts = append(parts, pair("runqueue", pr[0], cr[0], perSecond), pair("offcpu", pr[1], cr[1], perSecond))
	} else {
		absent = append(absent, "sched")
	}
	if p, c := prev.cgroup(), cur.cgroup(); p != nil || c != nil {
		pr, cr := make([]*float64, 1), make([]*float64, 1)
		if p != nil {
			pr = rates(prev, p.Coverage, p.Throttled)
		}
		if c != nil {
			cr = rates(cur, c.Coverage, c.Throttled)
		}
		parts = append(parts, pair("throttled", pr[0], cr[0], perSecond))
	} else {
		absent = append(absent, "cgroup")
	}
	if p, c := prev.cuda(), cur.cuda(); p != nil || c != nil {
		pr, cr := make([]*float64, 3), make([]*float64, 3)
		if p != nil {
			pr = rates(prev, p.Coverage, p.Launches, p.CopyBytes, p.SyncWait)
		}
		if c != nil {
			cr = rates(cur, c.Coverage, c.Launches, c.CopyBytes, c.SyncWait)
		}
		parts = append(parts,
			pair("launches", pr[0], cr[0], func(v float64) string { return count(v) + "/s" }),
			pair("copies", pr[1], cr[1], func(v float64) string { return bytesText(v) + "/s" }),
			pair("sync", pr[2], cr[2], perSecond))
	} else {
		absent = append(absent, "cuda")
	}
	if p, c := prev.gpu(), cur.gpu(); p != nil || c != nil {
		if p.devices() == 0 && c.devices() == 0 {
			parts = append(parts, "gpu: upstream on no device")
		} else {
			var pu, cu, pn, cn, pm, cm *float64
			if p != nil {
				pu, pn, pm = p.Util, p.NeighbourUtil, u64(p.MemoryUsed)
			}
			if c != nil {
				cu, cn, cm = c.Util, c.NeighbourUtil, u64(c.MemoryUsed)
			}
			parts = append(parts, pair("gpu", pu, cu, percent), pair("neighbours", pn, cn, percent), pair("gpu mem", pm, cm, bytesText))
		}
	} else {
		absent = append(absent, "gpu")
	}
	if p, c := prev.oom(), cur.oom(); p != nil || c != nil {
		all := func(o *HostOOM) *float64 {
			if o == nil {
				return nil
			}
			v := float64(o.Upstream + o.Other)
			return &v
		}
		up := func(o *HostOOM) *float64 {
			if o == nil {
				return nil
			}
			v := float64(o.Upstream)
			return &v
		}
		parts = append(parts, pair("oom kills", all(p), all(c), count)+" ("+pair("upstream", up(p), up(c), count)+")")
	} else {
		absent = append(absent, "oom")
	}

	out := strings.Join(parts, ", ")
	if len(absent) > 0 {
		if out != "" {
			out += "; "
		}
		out += "absent: " + strings.Join(absent, ", ")
	}
	return truncateUTF8(out, maxHostText)
}

// The groups of a breakdown that may be nil, nil-safe.

func (h *HostBreakdown) sched() *HostSched {
	if h == nil {
		return nil
	}
	return h.Sched
}

func (h *HostBreakdown) cgroup() *HostCgroup {
	if h == nil {
		return nil
	}
	return h.Cgroup
}

func (h *HostBreakdown) cuda() *HostCUDA {
	if h == nil {
		return nil
	}
	return h.CUDA
}

func (h *HostBreakdown) gpu() *HostGPU {
	if h == nil {
		return nil
	}
	return h.GPU
}

func (h *HostBreakdown) oom() *HostOOM {
	if h == nil {
		return nil
	}
	return h.OOM
}

func (g *HostGPU) devices() int {
	if g == nil {
		return 0
	}
	return g.Devices
}

func u64(v *uint64) *float64 {
	if v == nil {
		return nil
	}
	f := float64(*v)
	return &f
}

// rate is total per second of the covered part of a span of seconds; nil
// when nothing of it was covered.
func rate(total, seconds, coverage float64) *float64 {
	if seconds*coverage <= 0 {
		return nil
	}
	v := total / (seconds * coverage)
	return &v
}

func side(v *float64, f func(float64) string) string {
	if v == nil {
		return "n/a"
	}
	return f(*v)
}

// perSecond renders seconds per second as a duration per second.
func perSecond(s float64) string {
	if s == 0 {
		return "0"
	}
	return seconds(s) + "/s"
}

// seconds renders a duration in seconds to three significant digits.
func seconds(s float64) string {
	switch a := max(s, -s); {
	case a >= 1:
		return short(s) + "s"
	case a >= 1e-3:
		return short(s*1e3) + "ms"
	case a >= 1e-6:
		return short(s*1e6) + "µs"
	}
	return short(s*1e9) + "ns"
}

func percent(v float64) string { return strconv.FormatFloat(100*v, 'f', 0, 64) + "%" }

// count renders a count with a k or M suffix.
func count(v float64) string {
	switch a := max(v, -v); {
	case a >= 1e6:
		return short(v/1e6) + "M"
	case a >= 1e3:
		return short(v/1e3) + "k"
	}
	return short(v)
}

// bytesText renders bytes in binary units.
func bytesText(v float64) string {
	for _, u := range []struct {
		size float64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if max(v, -v) >= u.size {
			return short(v/u.size) + u.name
		}
	}
	return short(v) + "B"
}

// short renders v to three significant digits, without trailing zeros.
func short(v float64) string {
	prec := 2
	switch a := max(v, -v); {
	case a >= 100:
		prec = 0
	case a >= 10:
		prec = 1
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

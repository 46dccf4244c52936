package gpu

import (
	"cmp"
	"slices"
	"time"
)

// Facts are the GPU facts of one time window. The zero value (no devices)
// means absent: no NVML, or no sample overlaps the window.
type Facts struct {
	Devices []DeviceFacts `json:"devices,omitempty"`
}

// Present reports whether any device contributed.
func (f Facts) Present() bool { return len(f.Devices) > 0 }

// Stat summarises one reading over a window: Mean is overlap-weighted, Min
// and Max are over the samples that overlap it.
type Stat struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// DeviceFacts are one device's facts over a window. Pointers are nil and
// slices empty when nothing was read.
type DeviceFacts struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name,omitempty"`

	Samples int `json:"samples"` // samples overlapping the window
	// Coverage is the fraction of the window the samples cover (0..1]:
	// below 1 when the window reaches past the newest sample (see Settled)
	// or back beyond the ring, or when a tick was skipped.
	Coverage float64 `json:"coverage"`

	SMUtil        *Stat   `json:"sm_util,omitempty"`
	MemUtil       *Stat   `json:"memory_util,omitempty"`
	MemoryUsedMax *uint64 `json:"memory_used_max_bytes,omitempty"`
	MemoryTotal   *uint64 `json:"memory_total_bytes,omitempty"`
	SMClockHz     *Stat   `json:"sm_clock_hz,omitempty"`
	MemClockHz    *Stat   `json:"memory_clock_hz,omitempty"`
	PowerWatts    *Stat   `json:"power_watts,omitempty"`
	TemperatureC  *Stat   `json:"temperature_celsius,omitempty"`

	ThrottleReasons []string `json:"throttle_reasons,omitempty"` // every reason set in any overlapping sample
	XIDs            []uint64 `json:"xids,omitempty"`             // distinct XIDs delivered, ascending
	ECCSingle       int      `json:"ecc_single,omitempty"`
	ECCDouble       int      `json:"ecc_double,omitempty"`

	// Upstream sums the upstream's processes on this device; Neighbours
	// everyone else's. Nil when no such process had a context on the
	// device during the window; present with zero utilisation when one
	// did but was idle.
	Upstream   *GroupUsage `json:"upstream,omitempty"`
	Neighbours *GroupUsage `json:"neighbours,omitempty"`
	// Processes lists every upstream process and the busiest others (at
	// most Options.TopProcesses of them), busiest first within each.
	Processes []ProcessUsage `json:"processes,omitempty"`
}

// GroupUsage is a set of processes' use of a device over a window. Per
// sample the processes' figures are summed; the sums are then
// overlap-weighted like any reading. A sample where the per-process
// utilisation was read counts with 0 for a group that had no process in it.
type GroupUsage struct {
	PIDs          []int   `json:"pids"`
	SMUtil        *Stat   `json:"sm_util,omitempty"`
	MemUtil       *Stat   `json:"memory_util,omitempty"`
	MemoryUsedMax *uint64 `json:"memory_used_max_bytes,omitempty"`
}

// ProcessUsage is one process's use of a device over the samples of the
// window in which it appeared.
type ProcessUsage struct {
	PID           int     `json:"pid"`
	Upstream      bool    `json:"upstream"`
	SMUtil        *Stat   `json:"sm_util,omitempty"`
	MemUtil       *Stat   `json:"memory_util,omitempty"`
	MemoryUsedMax *uint64 `json:"memory_used_max_bytes,omitempty"`
}

// acc accumulates an overlap-weighted mean and the extremes of a reading.
type acc struct {
	sumW, sumWV float64
	min, max    float64
	n           int
}

func (a *acc) add(v float64, w time.Duration) {
	if a.n == 0 || v < a.min {
		a.min = v
	}
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.n++
	a.sumW += float64(w)
	a.sumWV += float64(w) * v
}

func (a *acc) addPtr(v *float64, w time.Duration) {
	if v != nil {
		a.add(*v, w)
	}
}

// stat returns the summary, allocated from al; nil when nothing was added.
func (a *acc) stat(al *alloc) *Stat {
	if a.n == 0 {
		return nil
	}
	st := al.stat()
	*st = Stat{Mean: a.sumWV / a.sumW, Min: a.min, Max: a.max}
	return st
}

// maxU64 keeps the largest of the values offered; absent until one is.
type maxU64 struct {
	v  uint64
	ok bool
}

func (m *maxU64) add(v uint64) {
	if !m.ok || v > m.v {
		m.v, m.ok = v, true
	}
}

func (m *maxU64) ptr(al *alloc) *uint64 {
	if !m.ok {
		return nil
	}
	v := al.u64()
	*v = m.v
	return v
}

// alloc hands out the pointers of one device's facts from two backing
// arrays, sized up front so they never move: two allocations per device
// instead of one per reading, which matters at one join per call.
type alloc struct {
	stats []Stat
	u64s  []uint64
}

func newAlloc(stats, u64s int) *alloc {
	return &alloc{stats: make([]Stat, 0, stats), u64s: make([]uint64, 0, u64s)}
}

func (al *alloc) stat() *Stat {
	if len(al.stats) == cap(al.stats) {
		return new(Stat) // never when sized right; safe regardless
	}
	al.stats = al.stats[:len(al.stats)+1]
	return &al.stats[len(al.stats)-1]
}

func (al *alloc) u64() *uint64 {
	if len(al.u64s) == cap(al.u64s) {
		return new(uint64)
	}
	al.u64s = al.u64s[:len(al.u64s)+1]
	return &al.u64s[len(al.u64s)-1]
}

// groupAcc accumulates a group of processes. Slices, not maps: a device
// has a handful of processes, and Window runs once per call.
type groupAcc struct {
	pids    []int
	sm, mem acc
	memory  maxU64
}

func (g *groupAcc) usage(al *alloc) *GroupUsage {
	if len(g.pids) == 0 {
		return nil
	}
	slices.Sort(g.pids)
	return &GroupUsage{PIDs: g.pids, SMUtil: g.sm.stat(al), MemUtil: g.mem.stat(al), MemoryUsedMax: g.memory.ptr(al)}
}

type procAcc struct {
	pid      int
	upstream bool
	sm, mem  acc
	memory   maxU64
}

// join computes one device's facts over [from, to] (to > from); ok is false
// when no sample overlaps.
func join(info DeviceInfo, r *ring, from, to time.Time, topK int) (DeviceFacts, bool) {
	f := DeviceFacts{Index: info.Index, UUID: info.UUID, Name: info.Name}
	var (
		sm, memU, smClk, memClk, power, temp acc
		used, total                          maxU64
		covered                              time.Duration
		throttle                             uint64
		xids                                 []uint64
		groups                               [2]groupAcc // [0] neighbours, [1] upstream
		procs                                []procAcc
	)
	for i := r.firstEndingAfter(from); i < r.n; i++ {
		s := r.at(i)
		if !s.Start.Before(to) {
			break
		}
		w := overlap(s, from, to)
		if w <= 0 {
			continue
		}
		f.Samples++
		covered += w
		sm.addPtr(s.SMUtil, w)
		memU.addPtr(s.MemUtil, w)
		smClk.addPtr(s.SMClockHz, w)
		memClk.addPtr(s.MemClockHz, w)
		power.addPtr(s.PowerWatts, w)
		temp.addPtr(s.TemperatureC, w)
		if s.MemoryUsed != nil {
			used.add(*s.MemoryUsed)
		}
		if s.MemoryTotal != nil {
			total.add(*s.MemoryTotal)
		}
		if s.Throttle != nil {
			throttle |= *s.Throttle
		}
		xids = append(xids, s.XIDs...)
		f.ECCSingle += s.ECCSingle
		f.ECCDouble += s.ECCDouble

		var smSum, memSum [2]float64
		var memory [2]uint64
		var memoryOK [2]bool
		for i := range s.Processes {
			p := &s.Processes[i]
			g := 0
			if p.Upstream {
				g = 1
			}
			if !slices.Contains(groups[g].pids, p.PID) {
				groups[g].pids = append(groups[g].pids, p.PID)
			}
			if p.SMUtil != nil {
				smSum[g] += *p.SMUtil
			}
			if p.MemUtil != nil {
				memSum[g] += *p.MemUtil
			}
			if p.MemoryUsed != nil {
				memory[g] += *p.MemoryUsed
				memoryOK[g] = true
			}
			k := slices.IndexFunc(procs, func(pa procAcc) bool { return pa.pid == p.PID })
			if k < 0 {
				if procs == nil {
					procs = make([]procAcc, 0, len(s.Processes)+2)
				}
				procs = append(procs, procAcc{pid: p.PID})
				k = len(procs) - 1
			}
			pa := &procs[k]
			pa.upstream = p.Upstream
			pa.sm.addPtr(p.SMUtil, w)
			pa.mem.addPtr(p.MemUtil, w)
			if p.MemoryUsed != nil {
				pa.memory.add(*p.MemoryUsed)
			}
		}
		for g := range groups {
			if s.ProcUtilOK {
				groups[g].sm.add(smSum[g], w)
				groups[g].mem.add(memSum[g], w)
			}
			if memoryOK[g] {
				groups[g].memory.add(memory[g])
			}
		}
	}
	if f.Samples == 0 {
		return f, false
	}
	f.Coverage = float64(covered) / float64(to.Sub(from))
	// 6 device stats, 2 per group and 2 per process; likewise 2 + 1 + 1.
	al := newAlloc(6+4+2*len(procs), 4+len(procs))
	f.SMUtil, f.MemUtil = sm.stat(al), memU.stat(al)
	f.SMClockHz, f.MemClockHz = smClk.stat(al), memClk.stat(al)
	f.PowerWatts, f.TemperatureC = power.stat(al), temp.stat(al)
	f.MemoryUsedMax, f.MemoryTotal = used.ptr(al), total.ptr(al)
	if throttle != 0 {
		f.ThrottleReasons = ReasonNames(throttle)
	}
	if len(xids) > 0 {
		slices.Sort(xids)
		f.XIDs = slices.Compact(xids)
	}
	f.Neighbours, f.Upstream = groups[0].usage(al), groups[1].usage(al)
	f.Processes = topProcesses(procs, topK, al)
	return f, true
}

// topProcesses returns every upstream process and the topK busiest others,
// upstream first, each part by mean SM utilisation (unknown last), then
// memory, then PID.
func topProcesses(procs []procAcc, topK int, al *alloc) []ProcessUsage {
	if len(procs) == 0 {
		return nil
	}
	all := make([]ProcessUsage, 0, len(procs))
	for i := range procs {
		pa := &procs[i]
		all = append(all, ProcessUsage{PID: pa.pid, Upstream: pa.upstream, SMUtil: pa.sm.stat(al), MemUtil: pa.mem.stat(al), MemoryUsedMax: pa.memory.ptr(al)})
	}
	slices.SortFunc(all, compareUsage)
	out := all[:0]
	others := 0
	for _, p := range all {
		if !p.Upstream {
			if others == topK {
				continue
			}
			others++
		}
		out = append(out, p)
	}
	return out
}

func compareUsage(a, b ProcessUsage) int {
	if a.Upstream != b.Upstream {
		if a.Upstream {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(meanOr(b.SMUtil), meanOr(a.SMUtil)); c != 0 {
		return c
	}
	if c := cmp.Compare(valOr(b.MemoryUsedMax), valOr(a.MemoryUsedMax)); c != 0 {
		return c
	}
	return cmp.Compare(a.PID, b.PID)
}

func meanOr(s *Stat) float64 {
	if s == nil {
		return -1
	}
	return s.Mean
}

func valOr(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

package baseline

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is one memory reading (bytes) at a time.
type Sample struct {
	T time.Time
	V float64
}

// LeakOptions tune EstimateLeak. Zero fields take the defaults shown.
type LeakOptions struct {
	// MinRise is the smallest rise over the samples' span, relative to the
	// first fitted value, that can be a leak: 0.1.
	MinRise float64
	// MinRiseBytes is the smallest absolute rise that can be a leak: a
	// small process warming up (a heap growing to its working set) rises by
	// a large share of little. 0: no absolute floor.
	MinRiseBytes float64
	// MinConcordance is the share of sample pairs that must rise for the
	// trend to count (a Kendall-style sign test): 0.75.
	MinConcordance float64
	// Horizon: a leak is suspected only if the limit is projected within
	// it: 7 days.
	Horizon time.Duration
	// MaxPairs bounds the work: samples are thinned to at most this many
	// points before the O(n²) slope estimate: 300.
	MaxPairs int
	// FromZero says the samples count from an arbitrary zero (device memory
	// allocated since the probes attached), so a rise relative to the first
	// value means nothing: only MinRiseBytes makes a rise material.
	FromZero bool
}

func (o LeakOptions) withDefaults() LeakOptions {
	if o.MinRise == 0 {
		o.MinRise = 0.1
	}
	if o.MinConcordance == 0 {
		o.MinConcordance = 0.75
	}
	if o.Horizon == 0 {
		o.Horizon = 7 * day
	}
	if o.MaxPairs == 0 {
		o.MaxPairs = 300
	}
	return o
}

// Leak is the verdict of EstimateLeak.
type Leak struct {
	Slope       float64       // bytes per second (Theil–Sen)
	Current     float64       // the trend's value at the last sample
	Limit       float64       // what the memory is projected against; 0: none
	Concordance float64       // share of rising pairs among pairs that differ
	TimeToLimit time.Duration // projected; 0 when not rising or no limit
	Exhaustion  time.Time     // the last sample's time + TimeToLimit
	Suspected   bool
}

// EstimateLeak fits a robust trend to memory samples (in time order) and
// projects when it reaches limit (bytes; 0: no projection). A leak is
// suspected when most pairs rise, the rise is material and the limit is in
// reach within the horizon (or, without a limit, the rise alone).
func EstimateLeak(samples []Sample, limit float64, o LeakOptions) (Leak, error) {
	o = o.withDefaults()
	if len(samples) < 5 {
		return Leak{}, fmt.Errorf("baseline: leak: %d samples, need 5", len(samples))
	}
	s := samples
	if len(s) > o.MaxPairs {
		s = make([]Sample, 0, o.MaxPairs)
		step := float64(len(samples)-1) / float64(o.MaxPairs-1)
		for i := range o.MaxPairs {
			s = append(s, samples[int(math.Round(float64(i)*step))])
		}
	}
	t0 := s[0].T
	x := func(i int) float64 { return s[i].T.Sub(t0).Seconds() }
	slopes := make([]float64, 0, len(s)*(len(s)-1)/2)
	up, down := 0, 0
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			dx := x(j) - x(i)
			if dx <= 0 {
				continue
			}
			dv := s[j].V - s[i].V
			slopes = append(slopes, dv/dx)
			switch {
			case dv > 0:
				up++
			case dv < 0:
				down++
			}
		}
	}
	if len(slopes) == 0 {
		return Leak{}, errors.New("baseline: leak: samples span no time")
	}
	l := Leak{Slope: medianInPlace(slopes), Limit: limit}
	if up+down > 0 {
		l.Concordance = float64(up) / float64(up+down)
	}
	res := make([]float64, len(s))
	for i := range s {
		res[i] = s[i].V - l.Slope*x(i)
	}
	icpt := medianInPlace(res)
	span := x(len(s) - 1)
	l.Current = icpt + l.Slope*span
	rise := l.Slope * span
	material := rise >= o.MinRiseBytes && (o.FromZero && rise > 0 || icpt > 0 && rise >= o.MinRise*icpt)
	rising := l.Slope > 0 && l.Concordance >= o.MinConcordance && material
	if limit > 0 && l.Slope > 0 {
		left := max(0, limit-l.Current)
		l.TimeToLimit = time.Duration(min(left/l.Slope, 100*365*86400) * float64(time.Second))
		l.Exhaustion = samples[len(samples)-1].T.Add(l.TimeToLimit)
	}
	l.Suspected = rising && (limit <= 0 || l.TimeToLimit <= o.Horizon)
	return l, nil
}

// ReadRSS returns a process's resident set size in bytes, from
// /proc/PID/status (VmRSS).
func ReadRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("baseline: rss: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, fmt.Errorf("baseline: rss: %q: %w", line, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("baseline: rss: no VmRSS in /proc/%d/status", pid)
}

// MemTotal returns the machine's memory in bytes (/proc/meminfo): what a
// process under no cgroup limit may use.
func MemTotal() (float64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("baseline: memory total: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
					return kb * 1024, nil
				}
			}
		}
	}
	return 0, errors.New("baseline: memory total: no MemTotal in /proc/meminfo")
}

// LeakWatch keeps a bounded ring of memory samples of one process and
// estimates its leak on demand.
type LeakWatch struct {
	Max     int // samples kept: 1440 when 0
	samples []Sample
}

// Add appends a sample, dropping the oldest past Max.
func (w *LeakWatch) Add(s Sample) {
	m := w.Max
	if m <= 0 {
		m = 1440
	}
	w.samples = append(w.samples, s)
	if len(w.samples) > m {
		w.samples = slices.Delete(w.samples, 0, len(w.samples)-m)
	}
}

// Estimate runs EstimateLeak over the samples kept.
func (w *LeakWatch) Estimate(limit float64, o LeakOptions) (Leak, error) {
	return EstimateLeak(w.samples, limit, o)
}

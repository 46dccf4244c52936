package gpu

import (
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

func sec(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Second))) }

// craftedSampler holds one device with samples covering (0,1s] and (1s,2s]
// after t0, values chosen so that every weighted mean below is exact in
// binary floating point.
func craftedSampler(t *testing.T) *Sampler {
	t.Helper()
	col := &fakeCollector{devs: []DeviceInfo{{Index: 0, UUID: "GPU-a", Name: "Fake"}}}
	s := newSampler(mustOptions(t, Options{TopProcesses: 1}), col, "", newFakeClock())
	s.rings[0].push(Sample{
		Start: sec(0), End: sec(1),
		SMUtil: f64(0.25), MemUtil: nil, MemoryUsed: u64(1000), MemoryTotal: u64(8000),
		SMClockHz: f64(1.5e9), Throttle: u64(0x4), XIDs: []uint64{79},
		ProcUtilOK: true,
		Processes: []Process{
			{PID: 10, Upstream: true, SMUtil: f64(0.25), MemUtil: f64(0.5), MemoryUsed: u64(600)},
		},
	})
	s.rings[0].push(Sample{
		Start: sec(1), End: sec(2),
		SMUtil: f64(0.75), MemUtil: f64(0.5), MemoryUsed: u64(3000), MemoryTotal: u64(8000),
		SMClockHz: f64(1e9), Throttle: u64(0x1 | 0x40), XIDs: []uint64{13, 79}, ECCDouble: 1,
		ProcUtilOK: true,
		Processes: []Process{
			{PID: 10, Upstream: true, SMUtil: f64(0.5), MemUtil: f64(0), MemoryUsed: u64(600)},
			{PID: 20, SMUtil: f64(0.25), MemUtil: f64(0.25), MemoryUsed: u64(2000)},
			{PID: 30, SMUtil: f64(0), MemUtil: f64(0), MemoryUsed: u64(100)},
		},
	})
	return s
}

func TestWindowOverlapWeighted(t *testing.T) {
	s := craftedSampler(t)
	for _, tc := range []struct {
		name     string
		from, to time.Time
		samples  int
		coverage float64
		sm       *Stat
		memUtil  *Stat
		usedMax  uint64
	}{
		// Half of each sample: plain mean.
		{"straddle half-half", sec(0.5), sec(1.5), 2, 1, &Stat{0.5, 0.25, 0.75}, &Stat{0.5, 0.5, 0.5}, 3000},
		// Weights 0.75 s and 0.25 s: 0.25·0.75 + 0.75·0.25 = 0.375.
		{"straddle 3:1", sec(0.25), sec(1.25), 2, 1, &Stat{0.375, 0.25, 0.75}, &Stat{0.5, 0.5, 0.5}, 3000},
		// Inside one sample: that sample's value, whatever the length.
		{"inside one", sec(0.2), sec(0.3), 1, 1, &Stat{0.25, 0.25, 0.25}, nil, 1000},
		// Starting exactly at a sample's end: that sample has no overlap.
		{"boundary excluded", sec(1), sec(1.5), 1, 1, &Stat{0.75, 0.75, 0.75}, &Stat{0.5, 0.5, 0.5}, 3000},
		// Reaching 1 s past the newest sample: a third covered.
		{"past the newest", sec(1.5), sec(3), 1, 1.0 / 3, &Stat{0.75, 0.75, 0.75}, &Stat{0.5, 0.5, 0.5}, 3000},
		// An empty window is the instant.
		{"instant", sec(1.5), sec(1.5), 1, 1, &Stat{0.75, 0.75, 0.75}, &Stat{0.5, 0.5, 0.5}, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := s.Window(tc.from, tc.to)
			if len(f.Devices) != 1 {
				t.Fatalf("devices = %d, want 1", len(f.Devices))
			}
			d := f.Devices[0]
			if d.Samples != tc.samples || d.Coverage != tc.coverage {
				t.Errorf("samples %d coverage %v, want %d %v", d.Samples, d.Coverage, tc.samples, tc.coverage)
			}
			if !eqStat(d.SMUtil, tc.sm) {
				t.Errorf("SMUtil = %+v, want %+v", d.SMUtil, tc.sm)
			}
			// Sample 1 did not read memory utilisation: the mean is
			// over the samples that did, not diluted by a zero.
			if !eqStat(d.MemUtil, tc.memUtil) {
				t.Errorf("MemUtil = %+v, want %+v", d.MemUtil, tc.memUtil)
			}
			if d.MemoryUsedMax == nil || *d.MemoryUsedMax != tc.usedMax {
				t.Errorf("MemoryUsedMax = %v, want %d", d.MemoryUsedMax, tc.usedMax)
			}
			if d.PowerWatts != nil || d.TemperatureC != nil {
				t.Errorf("unread readings present: power %v temperature %v", d.PowerWatts, d.TemperatureC)
			}
		})
	}

	if f := s.Window(sec(-5), sec(-1)); f.Present() {
		t.Errorf("window before the ring: %+v, want absent", f)
	}
	if f := s.Window(sec(2), sec(3)); f.Present() {
		t.Errorf("window after the newest sample: %+v, want absent", f)
	}
}

func eqStat(a, b *Stat) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func TestWindowEventsAndProcesses(t *testing.T) {
	s := craftedSampler(t)
	d := s.Window(sec(0), sec(2)).Devices[0]
	if want := []string{"gpu_idle", "sw_power_cap", "hw_thermal_slowdown"}; !slices.Equal(d.ThrottleReasons, want) {
		t.Errorf("ThrottleReasons = %v, want %v", d.ThrottleReasons, want)
	}
	if want := []uint64{13, 79}; !slices.Equal(d.XIDs, want) {
		t.Errorf("XIDs = %v, want %v", d.XIDs, want)
	}
	if d.ECCDouble != 1 || d.ECCSingle != 0 {
		t.Errorf("ECC = %d/%d, want 0/1", d.ECCSingle, d.ECCDouble)
	}
	if *d.SMClockHz != (Stat{1.25e9, 1e9, 1.5e9}) {
		t.Errorf("SMClockHz = %+v", *d.SMClockHz)
	}

	// Upstream PID 10: 0.25 then 0.5 over equal weights.
	up := d.Upstream
	if up == nil || !slices.Equal(up.PIDs, []int{10}) || !eqStat(up.SMUtil, &Stat{0.375, 0.25, 0.5}) || *up.MemoryUsedMax != 600 {
		t.Fatalf("Upstream = %+v", up)
	}
	// Neighbours: absent from sample 1, which read per-process utilisation,
	// so they count 0 there; 0.25 + 0 in sample 2.
	nb := d.Neighbours
	if nb == nil || !slices.Equal(nb.PIDs, []int{20, 30}) || !eqStat(nb.SMUtil, &Stat{0.125, 0, 0.25}) || *nb.MemoryUsedMax != 2100 {
		t.Fatalf("Neighbours = %+v (SM %+v)", nb, nb.SMUtil)
	}
	// TopProcesses 1: the upstream process and the busiest neighbour.
	if len(d.Processes) != 2 || d.Processes[0].PID != 10 || !d.Processes[0].Upstream || d.Processes[1].PID != 20 {
		t.Fatalf("Processes = %+v", d.Processes)
	}
	if p := d.Processes[1]; !eqStat(p.SMUtil, &Stat{0.25, 0.25, 0.25}) || *p.MemoryUsedMax != 2000 {
		t.Errorf("neighbour 20 over the samples it appeared in = %+v", p)
	}

	// Only sample 1: no neighbour had a context, so none is reported.
	if d := s.Window(sec(0), sec(1)).Devices[0]; d.Neighbours != nil || d.Upstream == nil {
		t.Errorf("first second: upstream %+v neighbours %+v; want upstream only", d.Upstream, d.Neighbours)
	}
}

func TestFactsJSONAbsentNotZero(t *testing.T) {
	b, _ := json.Marshal(Facts{})
	if string(b) != "{}" {
		t.Errorf("absent facts = %s, want {}", b)
	}
	b, _ = json.Marshal(DeviceFacts{Index: 0, UUID: "GPU-a", Samples: 1, Coverage: 1, SMUtil: &Stat{}})
	if want := `{"index":0,"uuid":"GPU-a","samples":1,"coverage":1,"sm_util":{"mean":0,"min":0,"max":0}}`; string(b) != want {
		t.Errorf("device facts = %s\nwant %s", b, want)
	}
}

func TestForCall(t *testing.T) {
	s := craftedSampler(t)
	c := &record.Call{Start: sec(0.25), End: time.Second}
	if got, want := s.ForCall(c), s.Window(sec(0.25), sec(1.25)); got.Devices[0].SMUtil.Mean != want.Devices[0].SMUtil.Mean || got.Devices[0].SMUtil.Mean != 0.375 {
		t.Errorf("ForCall = %+v, want %+v", got.Devices[0].SMUtil, want.Devices[0].SMUtil)
	}
	// A call that never completed ends at the last point it reached.
	c = &record.Call{Start: sec(0.25), FirstByte: time.Second, RequestEnd: time.Millisecond}
	if got := s.ForCall(c); got.Devices[0].SMUtil.Mean != 0.375 {
		t.Errorf("ForCall of an unfinished call = %+v", got.Devices[0].SMUtil)
	}
}

func TestSettled(t *testing.T) {
	s := craftedSampler(t)
	if !s.Settled(sec(2)) || s.Settled(sec(2.001)) {
		t.Error("Settled wrong around the newest sample's end")
	}
	var unavailable *Sampler
	if !unavailable.Settled(sec(5)) {
		t.Error("a nil sampler never settles")
	}
}

func TestReasonNames(t *testing.T) {
	if got := ReasonNames(0); got != nil {
		t.Errorf("ReasonNames(0) = %v", got)
	}
	if got, want := ReasonNames(0x8|0x400|0x10000), []string{"hw_slowdown", "reliability", "other"}; !slices.Equal(got, want) {
		t.Errorf("ReasonNames = %v, want %v", got, want)
	}
	if n := len(ThrottleReasons()); n != 12 {
		t.Errorf("ThrottleReasons has %d names", n)
	}
}

// BenchmarkWindow is the per-call cost of a join: eight devices with a full
// ten-minute ring at 1 Hz, four processes each, and a 50 ms call.
func BenchmarkWindow(b *testing.B) {
	devs := make([]DeviceInfo, 8)
	for i := range devs {
		devs[i] = DeviceInfo{Index: i, UUID: "GPU-x"}
	}
	o, _ := Options{Logger: slog.New(slog.DiscardHandler)}.withDefaults()
	s := newSampler(o, &fakeCollector{devs: devs}, "", newFakeClock())
	for _, r := range s.rings {
		for i := range 600 {
			procs := []Process{
				{PID: 1, Upstream: true, SMUtil: f64(0.5), MemUtil: f64(0.1), MemoryUsed: u64(1 << 30)},
				{PID: 2, SMUtil: f64(0.2), MemUtil: f64(0.1), MemoryUsed: u64(1 << 30)},
				{PID: 3, SMUtil: f64(0.1), MemUtil: f64(0.1), MemoryUsed: u64(1 << 30)},
				{PID: 4, SMUtil: f64(0), MemUtil: f64(0), MemoryUsed: u64(1 << 30)},
			}
			r.push(Sample{Start: sec(float64(i)), End: sec(float64(i + 1)), SMUtil: f64(0.5), MemUtil: f64(0.2),
				MemoryUsed: u64(1 << 30), MemoryTotal: u64(8 << 30), SMClockHz: f64(1e9), MemClockHz: f64(1e9),
				PowerWatts: f64(300), TemperatureC: f64(50), Throttle: u64(1), ProcUtilOK: true, Processes: procs})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Window(sec(300.98), sec(301.03))
	}
}

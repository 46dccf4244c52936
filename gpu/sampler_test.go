package gpu

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/gpu/pids"
)

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Options
		wantErr string
		check   func(Options) bool
	}{
		{"defaults", Options{}, "", func(o Options) bool {
			return o.Interval == time.Second && o.Retention == 10*time.Minute && o.PIDRefresh == 10*time.Second && o.TopProcesses == 5 && o.Logger != nil && o.ringCapacity() == 601
		}},
		{"fastest", Options{Interval: 100 * time.Millisecond, Retention: time.Second}, "", func(o Options) bool { return o.ringCapacity() == 11 }},
		{"ring capped", Options{Interval: 100 * time.Millisecond, Retention: 1000 * time.Hour}, "", func(o Options) bool { return o.ringCapacity() == maxRingSamples }},
		{"too fast", Options{Interval: 50 * time.Millisecond}, "below the minimum 100ms", nil},
		{"negative retention", Options{Retention: -time.Second}, "negative retention", nil},
		{"negative refresh", Options{PIDRefresh: -time.Second}, "negative PID refresh", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.o.withDefaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if _, err := Start(t.Context(), tc.o); err == nil {
					t.Fatal("Start accepted the options")
				}
				return
			}
			if err != nil || !tc.check(o) {
				t.Fatalf("withDefaults = %+v, %v", o, err)
			}
		})
	}
}

func TestSamplerHonoursInterval(t *testing.T) {
	clk := newFakeClock()
	col := &fakeCollector{devs: []DeviceInfo{{Index: 0, UUID: "GPU-a"}}}
	s := newSampler(mustOptions(t, Options{Interval: 250 * time.Millisecond}), col, "", clk)
	sampled := make(chan struct{}, 1)
	s.afterSample = func() { sampled <- struct{}{} }
	s.begin(t.Context())
	<-sampled // the first sample is taken at once

	const ticks = 4
	for i := 1; i <= ticks; i++ {
		now := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		clk.set(now)
		clk.tick <- now
		<-sampled
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(clk.interval, []time.Duration{250 * time.Millisecond}) || !clk.stopped {
		t.Fatalf("ticker asked for %v, stopped %v; want one 250ms ticker, stopped", clk.interval, clk.stopped)
	}
	if !col.closed {
		t.Fatal("collector not closed")
	}
	if len(col.calls) != ticks+1 {
		t.Fatalf("%d collections, want %d", len(col.calls), ticks+1)
	}
	r := s.rings[0]
	for i := range r.n {
		smp := r.at(i)
		wantEnd := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		if !smp.End.Equal(wantEnd) || !smp.Start.Equal(wantEnd.Add(-250*time.Millisecond)) {
			t.Errorf("sample %d covers (%v, %v], want (%v, %v]", i, smp.Start, smp.End, wantEnd.Add(-250*time.Millisecond), wantEnd)
		}
	}
	if st := s.Stats(); st.Ticks != ticks+1 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestSamplerStallLeavesGap(t *testing.T) {
	clk := newFakeClock()
	s := newSampler(mustOptions(t, Options{}), &fakeCollector{devs: []DeviceInfo{{UUID: "GPU-a"}}}, "", clk)
	s.sampleOnce()
	clk.set(sec(1.1)) // a late tick still joins up
	s.sampleOnce()
	clk.set(sec(5)) // a stall: the reading describes only the last second
	s.sampleOnce()
	r := s.rings[0]
	if got := r.at(1).Start; !got.Equal(sec(0)) {
		t.Errorf("late tick starts at %v, want the previous end", got)
	}
	if got := r.at(2).Start; !got.Equal(sec(4)) {
		t.Errorf("after a stall starts at %v, want %v", got, sec(4))
	}
	if d := s.Window(sec(1.1), sec(5)).Devices[0]; d.Samples != 1 || d.Coverage != float64(time.Second)/float64(3900*time.Millisecond) {
		t.Errorf("gap not left uncovered: %+v", d)
	}
}

func TestRingBound(t *testing.T) {
	clk := newFakeClock()
	o := mustOptions(t, Options{Interval: 100 * time.Millisecond, Retention: time.Second})
	s := newSampler(o, &fakeCollector{devs: []DeviceInfo{{UUID: "GPU-a"}}}, "", clk)
	const taken = 25
	for i := range taken {
		clk.set(t0.Add(time.Duration(i) * 100 * time.Millisecond))
		s.sampleOnce()
	}
	r := s.rings[0]
	if r.n != 11 || len(r.buf) != 11 {
		t.Fatalf("ring holds %d of capacity %d, want 11 of 11", r.n, len(r.buf))
	}
	if oldest, want := r.at(0).End, t0.Add((taken-11)*100*time.Millisecond); !oldest.Equal(want) {
		t.Fatalf("oldest sample ends %v, want %v", oldest, want)
	}
	for i := 1; i < r.n; i++ {
		if !r.at(i).Start.Equal(r.at(i - 1).End) {
			t.Fatalf("samples %d and %d not contiguous", i-1, i)
		}
	}
	// Evicted time is absent; the last second is there in full.
	if f := s.Window(t0, t0.Add(time.Second)); f.Present() {
		t.Errorf("evicted window present: %+v", f)
	}
	last := r.last().End
	if d := s.Window(last.Add(-time.Second), last).Devices[0]; d.Samples != 10 || d.Coverage != 1 {
		t.Errorf("last second: %d samples, coverage %v; want 10, 1", d.Samples, d.Coverage)
	}
}

func TestPIDRefresh(t *testing.T) {
	clk := newFakeClock()
	lb := &logBuffer{}
	col := &fakeCollector{devs: []DeviceInfo{{UUID: "GPU-a"}}}
	s := newSampler(mustOptions(t, Options{Upstream: pids.Spec{Port: 8000}, Logger: testLogger(lb)}), col, "", clk)
	calls := 0
	answers := []struct {
		pids []int
		err  error
	}{
		{nil, errors.New("nothing on port 8000")},
		{nil, errors.New("nothing on port 8000")},
		{[]int{7, 9}, nil},
	}
	s.resolve = func() ([]int, error) {
		a := answers[min(calls, len(answers)-1)]
		calls++
		return a.pids, a.err
	}
	for i := range 25 {
		clk.set(sec(float64(i)))
		s.sampleOnce()
	}
	if calls != 3 {
		t.Errorf("resolved %d times in 25 s with a 10 s refresh, want 3", calls)
	}
	if got := s.UpstreamPIDs(); !slices.Equal(got, []int{7, 9}) {
		t.Errorf("UpstreamPIDs = %v", got)
	}
	var warn, recovered int
	for _, l := range lb.lines() {
		warn += strings.Count(l, "finding the upstream's PIDs failed")
		recovered += strings.Count(l, "upstream PIDs found again")
	}
	if warn != 1 || recovered != 1 {
		t.Errorf("logged %d failures and %d recoveries, want 1 and 1:\n%s", warn, recovered, strings.Join(lb.lines(), "\n"))
	}
}

func TestNilSamplerIsAbsent(t *testing.T) {
	var s *Sampler
	if s.Available() || s.Window(t0, sec(1)).Present() || s.Latest() != nil || s.Devices() != nil || s.UpstreamPIDs() != nil || s.Close() != nil || s.Interval() != 0 || s.Reason() == "" {
		t.Fatal("a nil Sampler reports something")
	}
}

func TestMetricsFollowReadings(t *testing.T) {
	clk := newFakeClock()
	set := metrics.NewSet()
	col := &fakeCollector{devs: []DeviceInfo{{Index: 0, UUID: "GPU-a"}}}
	s := newSampler(mustOptions(t, Options{Set: set, TopProcesses: 2, Upstream: pids.Spec{PIDs: []int{5}}}), col, "", clk)
	procs := []Process{
		{PID: 1, SMUtil: f64(0.1), MemoryUsed: u64(10)},
		{PID: 2, SMUtil: f64(0.3), MemoryUsed: u64(10)},
		{PID: 3, SMUtil: f64(0.2), MemoryUsed: u64(10)},
		{PID: 5, SMUtil: f64(0.05), MemoryUsed: u64(10)},
	}
	col.next = [][]Sample{
		{{SMUtil: f64(0.5), PowerWatts: f64(300), Throttle: u64(0x4), Processes: procs, ProcUtilOK: true}},
		{{SMUtil: f64(0.5)}}, // power gone, processes gone
	}
	s.sampleOnce()
	for _, want := range []string{
		`inferwatch_gpu_available 1`,
		`inferwatch_gpu_utilization_ratio{gpu="0",uuid="GPU-a",kind="sm"} 0.5`,
		`inferwatch_gpu_power_watts{gpu="0",uuid="GPU-a"} 300`,
		`inferwatch_gpu_throttle_reasons{gpu="0",uuid="GPU-a",reason="sw_power_cap"} 1`,
		`inferwatch_gpu_throttle_reasons{gpu="0",uuid="GPU-a",reason="gpu_idle"} 0`,
		// Top 2: the upstream process first, then the busiest other.
		`inferwatch_gpu_process_utilization_ratio{gpu="0",pid="5",upstream="true",kind="sm"} 0.05`,
		`inferwatch_gpu_process_utilization_ratio{gpu="0",pid="2",upstream="false",kind="sm"} 0.3`,
		`inferwatch_gpu_process_memory_bytes{gpu="0",pid="2",upstream="false"} 10`,
		// Groups are not capped: 0.1 + 0.3 + 0.2.
		`inferwatch_gpu_group_utilization_ratio{gpu="0",uuid="GPU-a",upstream="false",kind="sm"} 0.6`,
		`inferwatch_gpu_group_utilization_ratio{gpu="0",uuid="GPU-a",upstream="true",kind="sm"} 0.05`,
	} {
		if !hasSeries(set, want) {
			t.Errorf("missing %s in\n%s", want, strings.Join(series(set), "\n"))
		}
	}
	if got := seriesWithPrefix(set, "inferwatch_gpu_process_utilization_ratio{"); len(got) != 2 {
		t.Errorf("process series beyond the top 2: %v", got)
	}
	if got := seriesWithPrefix(set, "inferwatch_gpu_memory_used_bytes"); got != nil {
		t.Errorf("unread memory exported: %v", got)
	}

	clk.set(sec(1))
	s.sampleOnce()
	for _, gone := range []string{"inferwatch_gpu_power_watts", "inferwatch_gpu_throttle_reasons", "inferwatch_gpu_process_", "inferwatch_gpu_group_"} {
		if got := seriesWithPrefix(set, gone); got != nil {
			t.Errorf("stale series after the reading went: %v", got)
		}
	}
	if !hasSeries(set, `inferwatch_gpu_utilization_ratio{gpu="0",uuid="GPU-a",kind="sm"} 0.5`) {
		t.Error("live series dropped")
	}
	for name := range help {
		if !strings.HasPrefix(name, "inferwatch_gpu_") {
			t.Errorf("help for %s", name)
		}
	}
	for _, l := range series(set) {
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		if _, ok := MetricHelp()[name]; !ok {
			t.Errorf("no help text for %s", name)
		}
	}
}

func TestStartWithoutDriverHere(t *testing.T) {
	lb := &logBuffer{}
	set := metrics.NewSet()
	s, err := Start(context.Background(), Options{Set: set, Logger: testLogger(lb)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Available() {
		t.Skipf("this machine has an NVIDIA device (%v); the absent path is tested with the mock", s.Devices())
	}
	lines := lb.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "gpu: NVML unavailable (") || !strings.Contains(lines[0], "GPU facts disabled") {
		t.Fatalf("log = %q, want one line saying NVML is unavailable", lines)
	}
	if got := series(set); !slices.Equal(got, []string{"inferwatch_gpu_available 0"}) {
		t.Fatalf("metrics = %v, want only inferwatch_gpu_available 0", got)
	}
	if s.Window(time.Now().Add(-time.Second), time.Now()).Present() || s.Reason() == "" {
		t.Fatal("facts present without NVML")
	}
}

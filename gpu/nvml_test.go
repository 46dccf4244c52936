//go:build cgo

package gpu

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/gpu/pids"
)

// fakeDev is what one mocked device answers; fail overrides a reading's
// return code (keys are the call label names of nvml.go).
type fakeDev struct {
	mu       sync.Mutex
	uuid     string
	util     nvml.Utilization
	mem      nvml.Memory
	smMHz    uint32
	memMHz   uint32
	powerMW  uint32
	tempC    uint32
	reasons  uint64
	procUtil []nvml.ProcessUtilizationSample
	compute  []nvml.ProcessInfo
	graphics []nvml.ProcessInfo
	events   uint64 // supported event types
	fail     map[string]nvml.Return
	procTS   []uint64 // lastSeenTimeStamp of each GetProcessUtilization call
}

func (f *fakeDev) ret(call string) nvml.Return {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.fail[call]; ok {
		return r
	}
	return nvml.SUCCESS
}

func (f *fakeDev) setFail(call string, r nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]nvml.Return{}
	}
	if r == nvml.SUCCESS {
		delete(f.fail, call)
		return
	}
	f.fail[call] = r
}

// failAll makes every reading answer r (GPU_IS_LOST, say).
func (f *fakeDev) failAll(r nvml.Return) {
	for _, c := range []string{callUtil, callMemory, callSMClock, callMemClock, callPower, callTemp, callThrottle, callProcUtil, callCompute, callGraphics} {
		f.setFail(c, r)
	}
}

func (f *fakeDev) device() *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return f.uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return f.mem, f.ret(callMemory)
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return f.util, f.ret(callUtil) },
		GetClockInfoFunc: func(ct nvml.ClockType) (uint32, nvml.Return) {
			if ct == nvml.CLOCK_SM {
				return f.smMHz, f.ret(callSMClock)
			}
			return f.memMHz, f.ret(callMemClock)
		},
		GetPowerUsageFunc:                func() (uint32, nvml.Return) { return f.powerMW, f.ret(callPower) },
		GetTemperatureFunc:               func(nvml.TemperatureSensors) (uint32, nvml.Return) { return f.tempC, f.ret(callTemp) },
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) { return f.reasons, f.ret(callThrottle) },
		GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			f.mu.Lock()
			f.procTS = append(f.procTS, last)
			var out []nvml.ProcessUtilizationSample
			for _, s := range f.procUtil {
				if s.TimeStamp > last {
					out = append(out, s)
				}
			}
			f.mu.Unlock()
			if r := f.ret(callProcUtil); r != nvml.SUCCESS {
				return nil, r
			}
			if len(out) == 0 {
				return nil, nvml.ERROR_NOT_FOUND // NVML's answer when nothing is newer
			}
			return out, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return f.compute, f.ret(callCompute) },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return f.graphics, f.ret(callGraphics) },
		GetSupportedEventTypesFunc: func() (uint64, nvml.Return) {
			if f.events == 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return f.events, nvml.SUCCESS
		},
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
	}
}

// fakeEvents queues events for the mocked event set.
type fakeEvents struct {
	mu    sync.Mutex
	queue []nvml.EventData
	waits []uint32 // timeouts asked for
	freed bool
}

func (e *fakeEvents) push(ev ...nvml.EventData) {
	e.mu.Lock()
	e.queue = append(e.queue, ev...)
	e.mu.Unlock()
}

func (e *fakeEvents) set() *mock.EventSet {
	return &mock.EventSet{
		WaitFunc: func(timeout uint32) (nvml.EventData, nvml.Return) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.waits = append(e.waits, timeout)
			if len(e.queue) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			ev := e.queue[0]
			e.queue = e.queue[1:]
			return ev, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return {
			e.mu.Lock()
			e.freed = true
			e.mu.Unlock()
			return nvml.SUCCESS
		},
	}
}

type fakeLib struct {
	lib      *mock.Interface
	devs     []*mock.Device
	events   *fakeEvents
	shutdown int
}

// newFakeLib mocks an NVML whose Init answers initRet and that has devs.
func newFakeLib(initRet nvml.Return, devs ...*fakeDev) *fakeLib {
	fl := &fakeLib{events: &fakeEvents{}}
	for _, d := range devs {
		fl.devs = append(fl.devs, d.device())
	}
	evset := fl.events.set()
	fl.lib = &mock.Interface{
		InitFunc:           func() nvml.Return { return initRet },
		ShutdownFunc:       func() nvml.Return { fl.shutdown++; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(fl.devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(fl.devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return fl.devs[i], nvml.SUCCESS
		},
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) { return evset, nvml.SUCCESS },
	}
	return fl
}

func h200(uuid string) *fakeDev {
	return &fakeDev{
		uuid:    uuid,
		util:    nvml.Utilization{Gpu: 40, Memory: 20},
		mem:     nvml.Memory{Total: 141 << 30, Used: 20 << 30, Free: 121 << 30},
		smMHz:   1980,
		memMHz:  3201,
		powerMW: 350500,
		tempC:   45,
		events:  nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError,
	}
}

// mockSampler opens fl through the real NVML adapter, with a fake clock.
func mockSampler(t *testing.T, fl *fakeLib, o Options) (*Sampler, *fakeClock) {
	t.Helper()
	o = mustOptions(t, o)
	col, reason := openLibrary(fl.lib, o)
	clk := newFakeClock()
	return newSampler(o, col, reason, clk), clk
}

func TestAbsentDriver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lib     *fakeLib
		wantLog string
	}{
		{"library not found", newFakeLib(nvml.ERROR_LIBRARY_NOT_FOUND), "gpu: NVML unavailable (libnvidia-ml.so.1 not found); GPU facts disabled"},
		{"driver not loaded", newFakeLib(nvml.ERROR_DRIVER_NOT_LOADED), "gpu: NVML unavailable (NVIDIA driver not loaded); GPU facts disabled"},
		{"no device", newFakeLib(nvml.SUCCESS), "gpu: NVML unavailable (NVML loaded but no NVIDIA device is visible); GPU facts disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb := &logBuffer{}
			set := metrics.NewSet()
			s, err := StartWith(context.Background(), tc.lib.lib, Options{Set: set, Logger: testLogger(lb), Upstream: pids.Spec{PIDs: []int{1}}})
			if err != nil {
				t.Fatal(err)
			}
			if s.Available() {
				t.Fatal("Available with no driver")
			}
			lines := lb.lines()
			if len(lines) != 1 || !strings.Contains(lines[0], `msg="`+tc.wantLog+`"`) {
				t.Fatalf("log = %q, want the one line %q", lines, tc.wantLog)
			}
			if got := series(set); !slices.Equal(got, []string{"inferwatch_gpu_available 0"}) {
				t.Fatalf("metrics = %v, want only inferwatch_gpu_available 0", got)
			}
			if f := s.Window(time.Now().Add(-time.Minute), time.Now()); f.Present() {
				t.Fatalf("Window = %+v, want absent", f)
			}
			if s.Latest() != nil || s.Devices() != nil || s.Close() != nil {
				t.Fatal("an unavailable sampler reports devices or fails to close")
			}
			if tc.name == "no device" && tc.lib.shutdown != 1 {
				t.Errorf("NVML initialised but not shut down (%d)", tc.lib.shutdown)
			}
		})
	}
}

func TestDeviceErrors(t *testing.T) {
	type check func(t *testing.T, s Sample)
	for _, tc := range []struct {
		name  string
		setup func(d *fakeDev)
		// recover, when set, is applied after the first three ticks.
		recover  func(d *fakeDev)
		check    check
		errs     []string // series lines of inferwatch_gpu_sample_errors_total after three ticks
		calls    func(m *mock.Device) int
		wantCall int // how often calls saw the failing reading in three ticks
		logs     []string
	}{
		{
			name:  "power not supported",
			setup: func(d *fakeDev) { d.setFail(callPower, nvml.ERROR_NOT_SUPPORTED) },
			check: func(t *testing.T, s Sample) {
				if s.PowerWatts != nil || s.SMUtil == nil || *s.SMUtil != 0.4 || s.TemperatureC == nil || *s.TemperatureC != 45 {
					t.Errorf("sample %+v: want power absent, the rest read", s)
				}
			},
			// Counted once and then no longer asked for.
			errs:     []string{`inferwatch_gpu_sample_errors_total{gpu="0",call="power",error="not_supported"} 1`},
			calls:    func(m *mock.Device) int { return len(m.GetPowerUsageCalls()) },
			wantCall: 1,
		},
		{
			name: "throttle reasons and clocks not supported",
			setup: func(d *fakeDev) {
				d.setFail(callThrottle, nvml.ERROR_NOT_SUPPORTED)
				d.setFail(callMemClock, nvml.ERROR_NOT_SUPPORTED)
			},
			check: func(t *testing.T, s Sample) {
				if s.Throttle != nil || s.MemClockHz != nil || s.SMClockHz == nil || *s.SMClockHz != 1980e6 {
					t.Errorf("sample %+v", s)
				}
			},
			errs: []string{
				`inferwatch_gpu_sample_errors_total{gpu="0",call="clock_memory",error="not_supported"} 1`,
				`inferwatch_gpu_sample_errors_total{gpu="0",call="throttle_reasons",error="not_supported"} 1`,
			},
		},
		{
			name:    "GPU lost, then back",
			setup:   func(d *fakeDev) { d.failAll(nvml.ERROR_GPU_IS_LOST) },
			recover: func(d *fakeDev) { d.failAll(nvml.SUCCESS) },
			check: func(t *testing.T, s Sample) {
				if s.SMUtil != nil || s.MemoryUsed != nil || s.PowerWatts != nil || s.Processes != nil || s.ProcUtilOK {
					t.Errorf("lost GPU sample has readings: %+v", s)
				}
			},
			// Counted on every tick: a lost GPU is asked again.
			errs: []string{
				`inferwatch_gpu_sample_errors_total{gpu="0",call="utilization",error="gpu_is_lost"} 3`,
				`inferwatch_gpu_sample_errors_total{gpu="0",call="process_utilization",error="gpu_is_lost"} 3`,
			},
			calls:    func(m *mock.Device) int { return len(m.GetUtilizationRatesCalls()) },
			wantCall: 3,
			logs:     []string{"NVML reports the GPU lost", "lost GPU answers again"},
		},
		{
			name: "per-process utilisation not supported",
			setup: func(d *fakeDev) {
				d.setFail(callProcUtil, nvml.ERROR_NOT_SUPPORTED)
				d.compute = []nvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 1 << 30}, {Pid: 43, UsedGpuMemory: valueNotAvailable}}
			},
			check: func(t *testing.T, s Sample) {
				if s.ProcUtilOK || len(s.Processes) != 2 {
					t.Fatalf("processes %+v ok %v", s.Processes, s.ProcUtilOK)
				}
				p := s.Processes[0]
				if p.PID != 42 || p.SMUtil != nil || p.MemoryUsed == nil || *p.MemoryUsed != 1<<30 {
					t.Errorf("process %+v: want memory, no utilisation", p)
				}
				if q := s.Processes[1]; q.PID != 43 || q.MemoryUsed != nil {
					t.Errorf("process %+v: NVML_VALUE_NOT_AVAILABLE must be absent", q)
				}
			},
			errs: []string{`inferwatch_gpu_sample_errors_total{gpu="0",call="process_utilization",error="not_supported"} 1`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := h200("GPU-0")
			tc.setup(d)
			fl := newFakeLib(nvml.SUCCESS, d)
			set := metrics.NewSet()
			lb := &logBuffer{}
			s, clk := mockSampler(t, fl, Options{Set: set, Logger: testLogger(lb)})
			for i := range 3 {
				clk.set(sec(float64(i)))
				s.sampleOnce()
				tc.check(t, s.Latest()[0])
			}
			if got := s.Stats().Ticks; got != 3 {
				t.Fatalf("%d ticks, the sampler stopped", got)
			}
			got := seriesWithPrefix(set, "inferwatch_gpu_sample_errors_total")
			for _, want := range tc.errs {
				if !slices.Contains(got, want) {
					t.Errorf("missing %s in %v", want, got)
				}
			}
			if tc.calls != nil {
				if n := tc.calls(fl.devs[0]); n != tc.wantCall {
					t.Errorf("failing reading asked %d times in 3 ticks, want %d", n, tc.wantCall)
				}
			}
			if seriesWithPrefix(set, "inferwatch_gpu_power_watts") != nil && d.fail[callPower] != nvml.SUCCESS {
				t.Error("power exported without a reading")
			}
			if tc.recover != nil {
				tc.recover(d)
				clk.set(sec(3))
				s.sampleOnce()
				if l := s.Latest()[0]; l.SMUtil == nil || *l.SMUtil != 0.4 || l.PowerWatts == nil {
					t.Errorf("after recovery: %+v", l)
				}
				// Facts over the whole span: means over the one sample
				// that read, not zeros for the lost ones.
				if f := s.Window(sec(-1), sec(3)).Devices[0]; f.Samples != 4 || f.SMUtil == nil || f.SMUtil.Mean != 0.4 {
					t.Errorf("facts across the loss: %+v", f)
				}
			}
			all := strings.Join(lb.lines(), "\n")
			for _, l := range tc.logs {
				if strings.Count(all, l) != 1 {
					t.Errorf("log %q %d times, want once:\n%s", l, strings.Count(all, l), all)
				}
			}
		})
	}
}

func TestNoisyNeighbour(t *testing.T) {
	d := h200("GPU-0")
	// PID 100 is the upstream; 200 shares the GPU; 300 holds memory and
	// does nothing (NVML gives it no sample); 400 has a sample but is in
	// neither list (a process NVML saw briefly).
	d.compute = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 4 << 30}, {Pid: 200, UsedGpuMemory: 10 << 30}, {Pid: 300, UsedGpuMemory: 1 << 30}}
	now := uint64(t0.UnixMicro())
	d.procUtil = []nvml.ProcessUtilizationSample{
		{Pid: 100, TimeStamp: now - 500_000, SmUtil: 30, MemUtil: 10},
		{Pid: 200, TimeStamp: now - 600_000, SmUtil: 50, MemUtil: 40},
		{Pid: 200, TimeStamp: now - 100_000, SmUtil: 70, MemUtil: 40},
		{Pid: 400, TimeStamp: now - 100_000, SmUtil: 5, MemUtil: 0},
	}
	fl := newFakeLib(nvml.SUCCESS, d)
	set := metrics.NewSet()
	s, clk := mockSampler(t, fl, Options{Set: set, Upstream: pids.Spec{PIDs: []int{100}}})
	s.sampleOnce()

	// Second tick: only the neighbour had work since the last sample.
	d.mu.Lock()
	d.procUtil = append(d.procUtil, nvml.ProcessUtilizationSample{Pid: 200, TimeStamp: now + 900_000, SmUtil: 80, MemUtil: 50})
	d.mu.Unlock()
	clk.set(sec(1))
	s.sampleOnce()

	if ts := d.procTS; len(ts) != 2 || ts[0] != now-1_000_000 || ts[1] != now-100_000 {
		t.Errorf("lastSeenTimeStamps asked = %v, want [now-1s, newest sample seen]", ts)
	}

	f := s.Window(sec(-1), sec(1)).Devices[0]
	up, nb := f.Upstream, f.Neighbours
	if up == nil || !slices.Equal(up.PIDs, []int{100}) {
		t.Fatalf("upstream = %+v", up)
	}
	// Upstream: 0.30 in the first second, idle (0) in the second.
	if !eqStat(up.SMUtil, &Stat{0.15, 0, 0.3}) || *up.MemoryUsedMax != 4<<30 {
		t.Errorf("upstream SM %+v memory %d", up.SMUtil, *up.MemoryUsedMax)
	}
	if nb == nil || !slices.Equal(nb.PIDs, []int{200, 300, 400}) {
		t.Fatalf("neighbours = %+v", nb)
	}
	// Neighbours: (0.5+0.7)/2 + 0 + 0.05 = 0.65, then 0.8.
	if nb.SMUtil == nil || nb.SMUtil.Max != 0.8 || !near(nb.SMUtil.Mean, 0.725) || *nb.MemoryUsedMax != 11<<30 {
		t.Errorf("neighbour SM %+v memory %d", nb.SMUtil, *nb.MemoryUsedMax)
	}
	if len(f.Processes) != 4 || f.Processes[0].PID != 100 || f.Processes[1].PID != 200 {
		t.Errorf("processes %+v", f.Processes)
	}
	if p := f.Processes[1]; p.Upstream || !near(p.SMUtil.Mean, 0.7) {
		t.Errorf("neighbour 200 = %+v %+v", p, p.SMUtil)
	}
	if last := s.Latest()[0]; last.Processes[0].PID != 100 || *last.Processes[0].SMUtil != 0 {
		t.Errorf("idle upstream in the second sample: %+v", last.Processes[0])
	}

	for _, want := range []string{
		`inferwatch_gpu_process_utilization_ratio{gpu="0",pid="200",upstream="false",kind="sm"} 0.8`,
		`inferwatch_gpu_process_utilization_ratio{gpu="0",pid="100",upstream="true",kind="sm"} 0`,
		`inferwatch_gpu_process_memory_bytes{gpu="0",pid="200",upstream="false"} 10737418240`,
		`inferwatch_gpu_group_utilization_ratio{gpu="0",uuid="GPU-0",upstream="false",kind="sm"} 0.8`,
		`inferwatch_gpu_group_utilization_ratio{gpu="0",uuid="GPU-0",upstream="true",kind="sm"} 0`,
	} {
		if !hasSeries(set, want) {
			t.Errorf("missing %s in\n%s", want, strings.Join(seriesWithPrefix(set, "inferwatch_gpu_"), "\n"))
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

func TestDeviceReadings(t *testing.T) {
	d := h200("GPU-0")
	d.reasons = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwSlowdown
	set := metrics.NewSet()
	s, _ := mockSampler(t, newFakeLib(nvml.SUCCESS, d), Options{Set: set})
	if got := s.Devices(); len(got) != 1 || got[0] != (DeviceInfo{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200", MemoryTotal: 141 << 30}) {
		t.Fatalf("Devices = %+v", got)
	}
	s.sampleOnce()
	l := s.Latest()[0]
	if *l.SMUtil != 0.4 || *l.MemUtil != 0.2 || *l.MemoryUsed != 20<<30 || *l.MemoryTotal != 141<<30 ||
		*l.SMClockHz != 1980e6 || *l.MemClockHz != 3201e6 || *l.PowerWatts != 350.5 || *l.TemperatureC != 45 ||
		!slices.Equal(ReasonNames(*l.Throttle), []string{"sw_power_cap", "hw_slowdown"}) {
		t.Errorf("sample %+v", l)
	}
	for _, want := range []string{
		`inferwatch_gpu_available 1`,
		`inferwatch_gpu_utilization_ratio{gpu="0",uuid="GPU-0",kind="sm"} 0.4`,
		`inferwatch_gpu_utilization_ratio{gpu="0",uuid="GPU-0",kind="memory"} 0.2`,
		`inferwatch_gpu_memory_used_bytes{gpu="0",uuid="GPU-0"} 21474836480`,
		`inferwatch_gpu_memory_total_bytes{gpu="0",uuid="GPU-0"} 151397597184`,
		`inferwatch_gpu_clock_hz{gpu="0",uuid="GPU-0",kind="sm"} 1980000000`,
		`inferwatch_gpu_clock_hz{gpu="0",uuid="GPU-0",kind="memory"} 3201000000`,
		`inferwatch_gpu_power_watts{gpu="0",uuid="GPU-0"} 350.5`,
		`inferwatch_gpu_temperature_celsius{gpu="0",uuid="GPU-0"} 45`,
		`inferwatch_gpu_throttle_reasons{gpu="0",uuid="GPU-0",reason="hw_slowdown"} 1`,
		`inferwatch_gpu_throttle_reasons{gpu="0",uuid="GPU-0",reason="sw_thermal_slowdown"} 0`,
	} {
		if !hasSeries(set, want) {
			t.Errorf("missing %s", want)
		}
	}
}

func TestThrottleFallbackForOldDrivers(t *testing.T) {
	d := h200("GPU-0")
	fl := newFakeLib(nvml.SUCCESS, d)
	fl.lib.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nvml.ERROR_FUNCTION_NOT_FOUND }}
	}
	fl.devs[0].GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonSwThermalSlowdown, nvml.SUCCESS }
	s, _ := mockSampler(t, fl, Options{})
	s.sampleOnce()
	if l := s.Latest()[0]; l.Throttle == nil || *l.Throttle != nvml.ClocksThrottleReasonSwThermalSlowdown || len(fl.devs[0].GetCurrentClocksEventReasonsCalls()) != 0 {
		t.Fatalf("old-driver throttle reading: %+v", l.Throttle)
	}
}

func TestErrorEvents(t *testing.T) {
	d0, d1 := h200("GPU-0"), h200("GPU-1")
	d1.events = 0 // cannot deliver events: still sampled
	fl := newFakeLib(nvml.SUCCESS, d0, d1, h200("GPU-2"))
	set := metrics.NewSet()
	s, clk := mockSampler(t, fl, Options{Set: set})
	if n := len(fl.devs[1].RegisterEventsCalls()); n != 0 {
		t.Errorf("registered events on a device without support")
	}
	// A foreign handle with GPU-2's UUID is matched by UUID.
	other := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "GPU-2", nvml.SUCCESS }}
	stranger := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "GPU-9", nvml.SUCCESS }}
	fl.events.push(
		nvml.EventData{Device: fl.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		nvml.EventData{Device: fl.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		nvml.EventData{Device: fl.devs[0], EventType: nvml.EventTypeSingleBitEccError},
		nvml.EventData{Device: other, EventType: nvml.EventTypeDoubleBitEccError},
		nvml.EventData{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 48},
		nvml.EventData{Device: stranger, EventType: nvml.EventTypeXidCriticalError, EventData: 31},
	)
	s.sampleOnce()
	l := s.Latest()
	if !slices.Equal(l[0].XIDs, []uint64{79, 79}) || l[0].ECCSingle != 1 || l[1].XIDs != nil || !slices.Equal(l[2].XIDs, []uint64{48}) || l[2].ECCDouble != 1 {
		t.Fatalf("events filed as %+v / %+v / %+v", l[0], l[1], l[2])
	}
	for _, w := range fl.events.waits {
		if w != 0 {
			t.Fatalf("event wait with timeout %d ms: the sampler must not block", w)
		}
	}
	for _, want := range []string{
		`inferwatch_gpu_xid_errors_total{gpu="0",uuid="GPU-0",xid="79"} 2`,
		`inferwatch_gpu_xid_errors_total{gpu="2",uuid="GPU-2",xid="48"} 1`,
		`inferwatch_gpu_ecc_error_events_total{gpu="0",uuid="GPU-0",kind="single_bit"} 1`,
		`inferwatch_gpu_ecc_error_events_total{gpu="2",uuid="GPU-2",kind="double_bit"} 1`,
		`inferwatch_gpu_sample_errors_total{gpu="unknown",call="events",error="unknown_device"} 1`,
	} {
		if !hasSeries(set, want) {
			t.Errorf("missing %s in\n%s", want, strings.Join(seriesWithPrefix(set, "inferwatch_gpu_"), "\n"))
		}
	}
	if f := s.Window(sec(-1), sec(0)); !slices.Equal(f.Devices[0].XIDs, []uint64{79}) {
		t.Errorf("window XIDs = %v", f.Devices[0].XIDs)
	}

	// A storm is drained a bounded amount per tick.
	for range maxEventsPerTick + 10 {
		fl.events.push(nvml.EventData{Device: fl.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 13})
	}
	clk.set(sec(1))
	s.sampleOnce()
	if n := len(s.Latest()[0].XIDs); n != maxEventsPerTick {
		t.Errorf("drained %d events in one tick, want %d", n, maxEventsPerTick)
	}
	clk.set(sec(2))
	s.sampleOnce()
	if n := len(s.Latest()[0].XIDs); n != 10 {
		t.Errorf("next tick drained %d, want the remaining 10", n)
	}
	if err := s.col.close(); err != nil || !fl.events.freed || fl.shutdown != 1 {
		t.Errorf("close: %v, event set freed %v, shutdown %d", err, fl.events.freed, fl.shutdown)
	}
}

func TestStartWithMockRuns(t *testing.T) {
	fl := newFakeLib(nvml.SUCCESS, h200("GPU-0"))
	s, err := StartWith(context.Background(), fl.lib, Options{Interval: MinInterval})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Ticks < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Ticks < 2 || fl.shutdown != 1 {
		t.Fatalf("ticks %d, shutdown %d", s.Stats().Ticks, fl.shutdown)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// TestThrottleReasonBitsMatchNVML holds the reason table to nvml.h's
// nvmlClocksEventReason* bits as go-nvml carries them, board limit (0x200)
// and reliability (0x400) included, and every bit of the All mask named.
func TestThrottleReasonBitsMatchNVML(t *testing.T) {
	want := map[string]uint64{
		"gpu_idle":                    nvml.ClocksEventReasonGpuIdle,
		"applications_clocks_setting": nvml.ClocksEventReasonApplicationsClocksSetting,
		"sw_power_cap":                nvml.ClocksEventReasonSwPowerCap,
		"hw_slowdown":                 nvml.ClocksThrottleReasonHwSlowdown,
		"sync_boost":                  nvml.ClocksEventReasonSyncBoost,
		"sw_thermal_slowdown":         nvml.ClocksEventReasonSwThermalSlowdown,
		"hw_thermal_slowdown":         nvml.ClocksThrottleReasonHwThermalSlowdown,
		"hw_power_brake_slowdown":     nvml.ClocksThrottleReasonHwPowerBrakeSlowdown,
		"display_clock_setting":       nvml.ClocksEventReasonDisplayClockSetting,
		"board_limit":                 nvml.ClocksEventReasonBoardLimit,
		"reliability":                 nvml.ClocksEventReasonReliability,
	}
	var all uint64
	for _, r := range throttleReasons {
		if w, ok := want[r.name]; !ok || w != r.bit {
			t.Errorf("%s: bit %#x, nvml.h has %#x (named: %v)", r.name, r.bit, w, ok)
		}
		all |= r.bit
	}
	if len(throttleReasons) != len(want) {
		t.Errorf("%d reasons named, nvml.h has %d", len(throttleReasons), len(want))
	}
	if all != nvml.ClocksEventReasonAll {
		t.Errorf("the named bits make %#x, nvml.h's All is %#x", all, uint64(nvml.ClocksEventReasonAll))
	}
}

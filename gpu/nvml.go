//go:build cgo

package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// StartWith is Start with the NVML library given instead of the system's
// libnvidia-ml.so.1: go-nvml's mock (pkg/nvml/mock) in tests.
func StartWith(ctx context.Context, lib nvml.Interface, o Options) (*Sampler, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	col, reason := openLibrary(lib, o)
	return start(ctx, o, col, reason, realClock{}), nil
}

// openNVML opens the system's NVML. go-nvml dlopens libnvidia-ml.so.1 in
// Init, so a machine without the driver fails there, not at link time.
func openNVML(o Options) (collector, string) {
	return openLibrary(nvml.New(), o)
}

// maxEventsPerTick bounds the events drained per tick, so that an event
// storm cannot stall sampling; the rest wait for the next tick.
const maxEventsPerTick = 64

// errorEvents are the driver events collected: XIDs and ECC errors.
const errorEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE, what NVML puts in a
// process's used memory when it may not say (e.g. no permission).
const valueNotAvailable = ^uint64(0)

// Names of the readings, the call label of inferwatch_gpu_sample_errors_total.
const (
	callUtil       = "utilization"
	callMemory     = "memory"
	callSMClock    = "clock_sm"
	callMemClock   = "clock_memory"
	callPower      = "power"
	callTemp       = "temperature"
	callThrottle   = "throttle_reasons"
	callProcUtil   = "process_utilization"
	callCompute    = "compute_processes"
	callGraphics   = "graphics_processes"
	callEvents     = "events"
	codeUnknownDev = "unknown_device"
)

type nvmlCollector struct {
	lib      nvml.Interface
	log      *slog.Logger
	interval time.Duration
	devs     []*nvmlDevice
	events   nvml.EventSet // nil when no device delivers error events
	// eventReasons: the driver has nvmlDeviceGetCurrentClocksEventReasons
	// (R535+); older ones only the deprecated ...ClocksThrottleReasons.
	eventReasons bool
}

type nvmlDevice struct {
	h           nvml.Device
	info        DeviceInfo
	unsupported map[string]bool // readings that answered NOT_SUPPORTED: skipped from then on
	lastProcTS  uint64          // newest per-process sample seen (µs since the epoch)
	lost        bool
}

// openLibrary initialises lib and finds its devices; on failure it returns
// a nil collector and the reason, worded for the one start-up log line.
func openLibrary(lib nvml.Interface, o Options) (collector, string) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initReason(ret)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, "NVML could not count devices: " + code(ret)
	}
	if n == 0 {
		lib.Shutdown()
		return nil, "NVML loaded but no NVIDIA device is visible"
	}
	c := &nvmlCollector{lib: lib, log: o.Logger, interval: o.Interval, eventReasons: hasSymbol(lib, "nvmlDeviceGetCurrentClocksEventReasons")}
	var skipped []string
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			skipped = append(skipped, fmt.Sprintf("%d: %s", i, code(ret)))
			continue
		}
		d := &nvmlDevice{h: h, info: DeviceInfo{Index: i, UUID: "unknown"}, unsupported: map[string]bool{}}
		if u, ret := h.GetUUID(); ret == nvml.SUCCESS && u != "" {
			d.info.UUID = u
		}
		if name, ret := h.GetName(); ret == nvml.SUCCESS {
			d.info.Name = name
		}
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			d.info.MemoryTotal = m.Total
		}
		c.devs = append(c.devs, d)
	}
	if len(c.devs) == 0 {
		lib.Shutdown()
		return nil, fmt.Sprintf("no NVIDIA device could be opened (%v)", skipped)
	}
	if len(skipped) > 0 {
		c.log.Warn("gpu: some NVIDIA devices could not be opened and are not sampled", "devices", skipped)
	}
	c.setupEvents()
	return c, ""
}

func initReason(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA driver not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open the NVIDIA devices"
	}
	return "nvmlInit failed: " + code(ret)
}

// hasSymbol asks the loaded library for a symbol. A mock without
// Extensions panics; that counts as absent.
func hasSymbol(lib nvml.Interface, name string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return lib.Extensions().LookupSymbol(name) == nil
}

// setupEvents registers every device for the error events it supports. A
// device that cannot deliver them still has its readings sampled.
func (c *nvmlCollector) setupEvents() {
	set, ret := c.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		c.log.Debug("gpu: no NVML event set; XID and ECC events are not collected", "err", code(ret))
		return
	}
	registered := 0
	for _, d := range c.devs {
		supported, ret := d.h.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			c.log.Debug("gpu: device event types unknown; XID and ECC events not collected", "gpu", d.info.Index, "err", code(ret))
			continue
		}
		mask := supported & errorEvents
		if mask == 0 {
			continue
		}
		if ret := d.h.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			c.log.Debug("gpu: registering XID and ECC events failed", "gpu", d.info.Index, "err", code(ret))
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return
	}
	c.events = set
}

func (c *nvmlCollector) devices() []DeviceInfo {
	out := make([]DeviceInfo, len(c.devs))
	for i, d := range c.devs {
		out[i] = d.info
	}
	return out
}

func (c *nvmlCollector) close() error {
	if c.events != nil {
		c.events.Free()
	}
	if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %s", code(ret))
	}
	return nil
}

// reader checks one device's reads during a tick.
type reader struct {
	d    *nvmlDevice
	errs *[]readError
	lost bool // some read answered GPU_IS_LOST
}

// want says whether a reading is still worth asking for.
func (r *reader) want(call string) bool { return !r.d.unsupported[call] }

// ok reports whether ret is a success; a failure is recorded, and
// NOT_SUPPORTED also retires the reading for this device.
func (r *reader) ok(call string, ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_NOT_SUPPORTED:
		r.d.unsupported[call] = true
	case nvml.ERROR_GPU_IS_LOST:
		r.lost = true
	}
	*r.errs = append(*r.errs, readError{gpu: r.d.info.Index, call: call, code: code(ret)})
	return false
}

func (c *nvmlCollector) collect(now time.Time) ([]Sample, []readError) {
	out := make([]Sample, len(c.devs))
	var errs []readError
	for i, d := range c.devs {
		r := &reader{d: d, errs: &errs}
		c.readDevice(r, now, &out[i])
		switch {
		case r.lost && !d.lost:
			c.log.Warn("gpu: NVML reports the GPU lost; its readings are absent until it answers again", "gpu", d.info.Index, "uuid", d.info.UUID)
		case !r.lost && d.lost:
			c.log.Info("gpu: lost GPU answers again", "gpu", d.info.Index, "uuid", d.info.UUID)
		}
		d.lost = r.lost
	}
	c.pollEvents(out, &errs)
	return out, errs
}

func (c *nvmlCollector) readDevice(r *reader, now time.Time, s *Sample) {
	h := r.d.h
	if r.want(callUtil) {
		if u, ret := h.GetUtilizationRates(); r.ok(callUtil, ret) {
			s.SMUtil, s.MemUtil = ptr(float64(u.Gpu)/100), ptr(float64(u.Memory)/100)
		}
	}
	if r.want(callMemory) {
		if m, ret := h.GetMemoryInfo(); r.ok(callMemory, ret) {
			s.MemoryUsed, s.MemoryTotal = ptr(m.Used), ptr(m.Total)
		}
	}
	if r.want(callSMClock) {
		if mhz, ret := h.GetClockInfo(nvml.CLOCK_SM); r.ok(callSMClock, ret) {
			s.SMClockHz = ptr(float64(mhz) * 1e6)
		}
	}
	if r.want(callMemClock) {
		if mhz, ret := h.GetClockInfo(nvml.CLOCK_MEM); r.ok(callMemClock, ret) {
			s.MemClockHz = ptr(float64(mhz) * 1e6)
		}
	}
	if r.want(callPower) {
		if mw, ret := h.GetPowerUsage(); r.ok(callPower, ret) {
			s.PowerWatts = ptr(float64(mw) / 1000)
		}
	}
	if r.want(callTemp) {
		// Deprecated for GetTemperatureV, whose handler calls the C
		// library even for a mock device and which older drivers lack.
		if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); r.ok(callTemp, ret) {
			s.TemperatureC = ptr(float64(t))
		}
	}
	if r.want(callThrottle) {
		var mask uint64
		var ret nvml.Return
		if c.eventReasons {
			mask, ret = h.GetCurrentClocksEventReasons()
		} else {
			// Deprecated, but the only one drivers before R535 have.
			mask, ret = h.GetCurrentClocksThrottleReasons()
		}
		if r.ok(callThrottle, ret) {
			s.Throttle = ptr(mask)
		}
	}
	c.readProcesses(r, now, s)
}

// procUtil accumulates one process's NVML utilisation samples of a tick.
type procUtil struct {
	sm, mem float64
	n       int
}

// readProcesses fills s.Processes from the running compute and graphics
// processes (used memory) and nvmlDeviceGetProcessUtilization (utilisation
// samples newer than the last one seen), whoever owns them.
func (c *nvmlCollector) readProcesses(r *reader, now time.Time, s *Sample) {
	h, d := r.d.h, r.d
	var util map[int]*procUtil
	if r.want(callProcUtil) {
		if d.lastProcTS == 0 {
			d.lastProcTS = uint64(now.Add(-c.interval).UnixMicro())
		}
		samples, ret := h.GetProcessUtilization(d.lastProcTS)
		switch {
		case ret == nvml.ERROR_NOT_FOUND:
			// No process had work since the last sample.
			samples, ret = nil, nvml.SUCCESS
		case ret == nvml.ERROR_INSUFFICIENT_SIZE && len(samples) == 0:
			// go-nvml's answer when the driver counts zero samples.
			ret = nvml.SUCCESS
		}
		if r.ok(callProcUtil, ret) {
			s.ProcUtilOK = true
			util = make(map[int]*procUtil, len(samples))
			for _, ps := range samples {
				// NVML may return several samples of a process (one per
				// its internal period); their mean is the tick's figure.
				u := util[int(ps.Pid)]
				if u == nil {
					u = &procUtil{}
					util[int(ps.Pid)] = u
				}
				u.sm += float64(ps.SmUtil) / 100
				u.mem += float64(ps.MemUtil) / 100
				u.n++
				d.lastProcTS = max(d.lastProcTS, ps.TimeStamp)
			}
		}
	}

	memory := map[int]*uint64{}
	var order []int
	addProc := func(pid int, used uint64) {
		m, seen := memory[pid]
		if !seen {
			order = append(order, pid)
		}
		if used == valueNotAvailable {
			if !seen {
				memory[pid] = nil
			}
			return
		}
		// A process with a compute and a graphics context is listed
		// twice with the same usage: keep one, not the sum.
		if m == nil || used > *m {
			memory[pid] = ptr(used)
		}
	}
	for _, l := range [...]struct {
		call string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{{callCompute, h.GetComputeRunningProcesses}, {callGraphics, h.GetGraphicsRunningProcesses}} {
		if !r.want(l.call) {
			continue
		}
		if infos, ret := l.get(); r.ok(l.call, ret) {
			for _, pi := range infos {
				addProc(int(pi.Pid), pi.UsedGpuMemory)
			}
		}
	}
	for pid := range util {
		if _, seen := memory[pid]; !seen {
			memory[pid] = nil
			order = append(order, pid)
		}
	}
	if len(order) == 0 {
		return
	}
	s.Processes = make([]Process, 0, len(order))
	for _, pid := range order {
		p := Process{PID: pid, MemoryUsed: memory[pid]}
		if u := util[pid]; u != nil {
			p.SMUtil, p.MemUtil = ptr(u.sm/float64(u.n)), ptr(u.mem/float64(u.n))
		} else if s.ProcUtilOK {
			// NVML samples only processes that did some work.
			p.SMUtil, p.MemUtil = ptr(0.0), ptr(0.0)
		}
		s.Processes = append(s.Processes, p)
	}
}

// pollEvents drains the error events waiting in the event set without
// blocking (timeout 0) and files each under its device's sample.
func (c *nvmlCollector) pollEvents(out []Sample, errs *[]readError) {
	if c.events == nil {
		return
	}
	for range maxEventsPerTick {
		ev, ret := c.events.Wait(0)
		if ret == nvml.ERROR_TIMEOUT {
			return // nothing waiting
		}
		if ret != nvml.SUCCESS {
			*errs = append(*errs, readError{gpu: -1, call: callEvents, code: code(ret)})
			return
		}
		i := c.deviceOf(ev.Device)
		if i < 0 {
			*errs = append(*errs, readError{gpu: -1, call: callEvents, code: codeUnknownDev})
			continue
		}
		switch {
		case ev.EventType&nvml.EventTypeXidCriticalError != 0:
			out[i].XIDs = append(out[i].XIDs, ev.EventData)
		case ev.EventType&nvml.EventTypeDoubleBitEccError != 0:
			out[i].ECCDouble++
		case ev.EventType&nvml.EventTypeSingleBitEccError != 0:
			out[i].ECCSingle++
		}
	}
}

// deviceOf finds the sampled device an event came from: by handle, else by
// UUID; -1 when neither matches.
func (c *nvmlCollector) deviceOf(dev nvml.Device) int {
	if dev == nil {
		return -1
	}
	for i, d := range c.devs {
		if sameHandle(d.h, dev) {
			return i
		}
	}
	if u, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		for i, d := range c.devs {
			if d.info.UUID == u {
				return i
			}
		}
	}
	return -1
}

// sameHandle compares two handles; an implementation whose dynamic type is
// not comparable compares unequal instead of panicking.
func sameHandle(a, b nvml.Device) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// code names an NVML return code for labels and logs: stable, unlike
// nvml.ErrorString, whose text comes from the driver once it is loaded.
func code(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_UNINITIALIZED:
		return "uninitialized"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "invalid_argument"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not_supported"
	case nvml.ERROR_NO_PERMISSION:
		return "no_permission"
	case nvml.ERROR_NOT_FOUND:
		return "not_found"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "insufficient_size"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "driver_not_loaded"
	case nvml.ERROR_TIMEOUT:
		return "timeout"
	case nvml.ERROR_IRQ_ISSUE:
		return "irq_issue"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "library_not_found"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "function_not_found"
	case nvml.ERROR_GPU_IS_LOST:
		return "gpu_is_lost"
	case nvml.ERROR_RESET_REQUIRED:
		return "reset_required"
	case nvml.ERROR_NO_DATA:
		return "no_data"
	case nvml.ERROR_UNKNOWN:
		return "unknown"
	}
	return fmt.Sprintf("nvml_error_%d", int32(ret))
}

func ptr[T any](v T) *T { return &v }

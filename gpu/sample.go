package gpu

import "time"

// DeviceInfo names a device found at start.
type DeviceInfo struct {
	Index       int    `json:"index"` // NVML index, the gpu label
	UUID        string `json:"uuid"`  // "GPU-..."; "unknown" when NVML did not say
	Name        string `json:"name,omitempty"`
	MemoryTotal uint64 `json:"memory_total_bytes,omitempty"`
}

// Sample is one reading of one device. It describes the interval
// (Start, End]: End is when it was taken, Start the device's previous
// sample (one interval earlier for the first). A nil field was not read:
// unsupported by the device, or the read failed.
type Sample struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`

	SMUtil       *float64 `json:"sm_util,omitempty"`     // 0..1: fraction of the time a kernel was running (NVML "gpu" utilisation)
	MemUtil      *float64 `json:"memory_util,omitempty"` // 0..1: fraction of the time device memory was read or written
	MemoryUsed   *uint64  `json:"memory_used_bytes,omitempty"`
	MemoryTotal  *uint64  `json:"memory_total_bytes,omitempty"`
	SMClockHz    *float64 `json:"sm_clock_hz,omitempty"`
	MemClockHz   *float64 `json:"memory_clock_hz,omitempty"`
	PowerWatts   *float64 `json:"power_watts,omitempty"`
	TemperatureC *float64 `json:"temperature_celsius,omitempty"`
	// Throttle is the clocks event (throttle) reason bit mask; ReasonNames
	// spells it out.
	Throttle *uint64 `json:"throttle_mask,omitempty"`

	XIDs      []uint64 `json:"xids,omitempty"`       // XID critical errors delivered in this interval
	ECCSingle int      `json:"ecc_single,omitempty"` // single-bit ECC error events in this interval
	ECCDouble int      `json:"ecc_double,omitempty"` // double-bit ECC error events in this interval

	// Processes are the processes with a context on the device: the
	// running compute and graphics processes and any process NVML sampled.
	Processes []Process `json:"processes,omitempty"`
	// ProcUtilOK says the per-process utilisation was read: a listed
	// process without an NVML sample then did no work (NVML samples only
	// processes with non-zero utilisation) and has SMUtil 0.
	ProcUtilOK bool `json:"process_util_ok,omitempty"`
}

// Process is one process's use of one device during a sample's interval.
type Process struct {
	PID      int  `json:"pid"`
	Upstream bool `json:"upstream,omitempty"` // one of the upstream's PIDs when sampled
	// SMUtil and MemUtil are NVML's per-process utilisation (0..1), the
	// mean of its samples in the interval; nil when not read.
	SMUtil     *float64 `json:"sm_util,omitempty"`
	MemUtil    *float64 `json:"memory_util,omitempty"`
	MemoryUsed *uint64  `json:"memory_used_bytes,omitempty"` // nil when NVML did not say (e.g. no permission)
}

// throttleReasons names the clocks event reason bits of nvml.h
// (nvmlClocksEventReason*), in bit order; TestThrottleReasonBitsMatchNVML
// holds them to go-nvml's copy of the header.
var throttleReasons = [...]struct {
	bit  uint64
	name string
}{
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
	{0x200, "board_limit"},
	{0x400, "reliability"},
}

// ThrottleReasons lists every reason name ReasonNames can return, "other"
// last: the values of inferwatch_gpu_throttle_reasons's reason label.
func ThrottleReasons() []string {
	out := make([]string, 0, len(throttleReasons)+1)
	for _, r := range throttleReasons {
		out = append(out, r.name)
	}
	return append(out, "other")
}

// ReasonNames spells out a throttle mask, in bit order; bits nvml.h did not
// define when this was written come out as one "other".
func ReasonNames(mask uint64) []string {
	var out []string
	known := uint64(0)
	for _, r := range throttleReasons {
		known |= r.bit
		if mask&r.bit != 0 {
			out = append(out, r.name)
		}
	}
	if mask&^known != 0 {
		out = append(out, "other")
	}
	return out
}

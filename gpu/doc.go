// Package gpu gives each inference call the GPU facts of its time window:
// how busy the devices were, how much memory was in use, whether clocks were
// throttled, whether the driver reported an XID or ECC error, and how much
// of the GPU the upstream's own processes used against everyone else's (a
// noisy neighbour on a shared GPU).
//
// It stands beside the call pipeline, like tritonstats: a Sampler reads
// every device through NVML (github.com/NVIDIA/go-nvml) at a fixed rate
// (default 1 Hz, down to 100 ms) into a bounded ring per device and exports
// the readings as inferwatch_gpu_* metrics. When a call record
// (record.Call) is finished, Window (or ForCall) joins the call's time span
// to the samples it overlaps and returns Facts for the record's sinks.
//
// Attribution is overlap-weighted. A sample taken at time t_i describes the
// interval (t_{i-1}, t_i] since the device's previous sample; a call
// spanning [from, to] gives that sample the weight
// |[from, to] ∩ (t_{i-1}, t_i]|. Means are Σ wᵢ·vᵢ / Σ wᵢ over the samples
// where the value was read; minima and maxima are over the samples with a
// non-zero weight. Samples are averages over their interval, so a call much
// shorter than the interval gets the utilisation of the interval that holds
// it, not its own: at 1 Hz a 20 ms call on a busy GPU sees the second's
// mean. Concurrent calls share the same samples; nothing is divided among
// them. Per-process figures are NVML's, summed over the upstream's PIDs
// and over everyone else's.
//
// Without the NVIDIA driver (no libnvidia-ml.so.1, no device, or a binary
// built without cgo) Start logs one line and returns a Sampler whose
// Available is false; Window then returns empty Facts and only
// inferwatch_gpu_available (0) is exported. Absent readings are absent,
// never zero: Facts and Sample use pointers with JSON omitempty.
package gpu

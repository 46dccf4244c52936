package sidecar

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/bpf/bpftest"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

// A running sidecar with its eBPF probes on follows a real process that
// allocates device memory through (fake) CUDA libraries and never frees
// it: MemoryLeakSuspected{memory="cuda"} fires with the allocation rate
// as its slope, and resolves when the process goes away. Without a GPU
// (NVML) there is no free memory to project against, so no projection.
func TestDeviceLeakThroughASidecar(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testenv.Unavailable(t, "the BPF objects are built for x86-64 only")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "loading eBPF needs root")
	}
	const stepMiB = 8 // every 100 ms
	pr := bpftest.Start(t, bpftest.LibCopy(t), "leak", strconv.Itoa(stepMiB), "60")
	pr.Expect("loaded", 5*time.Second)

	up := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(up.Close)
	cfg := config.Default()
	cfg.AdminListen = "127.0.0.1:0"
	no := false
	cfg.Routes = []config.Route{{Name: "http", Protocol: "http", Listen: "127.0.0.1:0", Upstream: strings.TrimPrefix(up.URL, "http://"),
		Readiness: "none", TritonStats: config.TritonStats{Enabled: &no}}}
	cfg.Host.GPUDisabled = true
	cfg.Host.UpstreamPIDs = []int{pr.PID()}
	cfg.Tracing.Disabled = true
	cfg.Alerting.Baseline.Disabled = true
	cfg.Alerting.MemoryLeak = config.MemoryLeak{Interval: config.Duration(100 * time.Millisecond), MinSpan: config.Duration(2 * time.Second)}
	sc := runSidecar(t, cfg)
	if !sc.host.probes.Enabled() {
		t.Fatalf("probes off as root: %v", sc.host.probes.Reasons())
	}
	until := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s within %v", what, d)
			}
		}
	}
	until("probed CUDA library", 10*time.Second, func() bool {
		_, ok := sc.host.probes.CUDAOutstanding()
		return ok
	})
	pr.Send("go")
	start := time.Now()

	cudaAlert := func(state alerting.State) *alerting.Alert {
		for _, a := range sc.Engine().Alerts() {
			if a.Labels["alertname"] == alerting.RuleMemoryLeakSuspected && a.Labels["memory"] == "cuda" && a.State == state {
				return &a
			}
		}
		return nil
	}
	var got *alerting.Alert
	until("MemoryLeakSuspected{memory=\"cuda\"} firing", 30*time.Second, func() bool {
		got = cudaAlert(alerting.StateFiring)
		return got != nil
	})
	out, _ := sc.host.probes.CUDAOutstanding()
	rate := float64(out) / time.Since(start).Seconds()
	t.Logf("%s; the process allocated %.1f MiB/s", got.Annotations["summary"], rate/(1<<20))
	if got.Labels["upstream"] != "pids" {
		t.Errorf("upstream label %q, want pids", got.Labels["upstream"])
	}
	slope, err := strconv.ParseFloat(got.Annotations["slope_bytes_per_second"], 64)
	if err != nil {
		t.Fatal(err)
	}
	// Within 2× of the rate the probes saw; not bounded by the nominal 80
	// MiB/s: the samples' own timing jitter can put the estimate a little
	// over it (CI: 83892558 B/s).
	if slope < rate/2 || slope > rate*2 {
		t.Errorf("slope %.0f B/s, want within 2× of the %.0f B/s allocated", slope, rate)
	}
	if v, err := strconv.ParseFloat(got.Annotations["cuda_outstanding_bytes"], 64); err != nil || v <= 0 || v > float64(out)*1.5 {
		t.Errorf("cuda_outstanding_bytes %q, want up to the %d outstanding now (%v)", got.Annotations["cuda_outstanding_bytes"], out, err)
	}
	if _, ok := got.Annotations["time_to_exhaustion"]; ok {
		t.Errorf("a projection without GPU memory known: %v", got.Annotations)
	}
	for _, a := range sc.Engine().Alerts() {
		if a.Labels["alertname"] == alerting.RuleMemoryLeakSuspected && a.Labels["memory"] == "" && a.State == alerting.StateFiring {
			t.Errorf("the process's RSS did not grow, yet: %+v", a)
		}
	}

	// The process ends (a restart): the episode resolves.
	pr.Stop()
	until("MemoryLeakSuspected{memory=\"cuda\"} resolved", 90*time.Second, func() bool { return cudaAlert(alerting.StateResolved) != nil })
}

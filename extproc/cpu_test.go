package extproc

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user + system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since from: every
// goroutine's, the pipeline's sinks and both ends of a loopback call included.
func reportCPU(b *testing.B, from time.Duration) {
	b.ReportMetric(float64(processCPU(b)-from)/float64(b.N), "cpu-ns/op")
}

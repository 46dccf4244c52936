package testenv

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the CPU time (user + system) this process has used.
func ProcessCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports the process's CPU time per op since from (a
// ProcessCPU reading): every goroutine's, so a benchmark's sinks and both
// ends of a loopback call are included.
func ReportCPU(b *testing.B, from time.Duration) {
	b.ReportMetric(float64(ProcessCPU(b)-from)/float64(b.N), "cpu-ns/op")
}

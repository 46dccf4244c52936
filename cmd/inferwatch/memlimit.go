package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/inferwatch/inferwatch/cgroup"
)

// setMemoryLimit gives Go's collector the container's memory limit: the
// runtime does not read cgroups for it, and without a soft limit a heap
// that doubles between collections (GOGC=100) under a burst of large
// tensors is OOM-killed at the cgroup's limit where collecting sooner
// would have fit. 90% of the limit, leaving room for what the collector
// does not see (NVML, thread stacks outside the heap). An explicit
// GOMEMLIMIT wins.
func setMemoryLimit(logger *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	mounts, err := cgroup.SelfMounts()
	if err != nil {
		return
	}
	limit, file, err := cgroup.SelfMemoryLimit(self, mounts)
	if err != nil || limit <= 0 {
		return
	}
	soft := limit - limit/10
	debug.SetMemoryLimit(soft)
	logger.Info("memory: Go's soft limit set to 90% of the cgroup's", "limit_bytes", limit, "soft_limit_bytes", soft, "from", file)
}

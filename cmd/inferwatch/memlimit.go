package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
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
	limit, file := cgroupMemoryLimit("/sys/fs/cgroup", string(self))
	if limit <= 0 {
		return
	}
	soft := limit - limit/10
	debug.SetMemoryLimit(soft)
	logger.Info("memory: Go's soft limit set to 90% of the cgroup's", "limit_bytes", limit, "soft_limit_bytes", soft, "from", file)
}

// cgroupMemoryLimit finds the memory limit of the cgroup /proc/self/cgroup
// (self) names, under the hierarchy mounted at root: v2's memory.max, else
// v1's memory.limit_in_bytes. Each is looked for at the cgroup's path and
// then at the mount's root, which is the process's own cgroup where the
// container runtime mounts it so (a cgroup namespace, or runc on v1). It
// returns 0 when there is no limit or none can be read, and the file read.
func cgroupMemoryLimit(root, self string) (int64, string) {
	var candidates []string
	for line := range strings.Lines(self) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			candidates = append(candidates, filepath.Join(root, f[2], "memory.max"), filepath.Join(root, "memory.max"))
		case strings.Contains(","+f[1]+",", ",memory,"):
			candidates = append(candidates, filepath.Join(root, "memory", f[2], "memory.limit_in_bytes"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
		}
	}
	// A v1 memory hierarchy the process's cgroup file does not list (runc
	// with a private cgroup view) is still the process's own at its root.
	candidates = append(candidates, filepath.Join(root, "memory", "memory.limit_in_bytes"))
	for _, c := range candidates {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(v, 10, 64)
		// "max" (v2) and v1's page-rounded maximum mean no limit.
		if v == "max" || err != nil || n <= 0 || n >= 1<<62 {
			return 0, c
		}
		return n, c
	}
	return 0, ""
}

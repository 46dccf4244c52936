//go:build amd64

package bpf

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ensureTracefs makes sure tracefs is mounted where cilium/ebpf looks for
// it: classic tracepoints (oom:mark_victim) are found by their tracefs
// IDs, and minimal hosts and containers often lack the mount. As root,
// mount it. Only the x86-64 loader needs it.
func ensureTracefs() error {
	for _, p := range []struct {
		path  string
		magic int64
	}{
		{"/sys/kernel/tracing", unix.TRACEFS_MAGIC},
		{"/sys/kernel/debug/tracing", unix.TRACEFS_MAGIC},
		{"/sys/kernel/debug/tracing", unix.DEBUGFS_MAGIC},
	} {
		var st unix.Statfs_t
		if unix.Statfs(p.path, &st) == nil && int64(st.Type) == p.magic {
			return nil
		}
	}
	if err := unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		return fmt.Errorf("tracefs is not mounted, and mounting it on /sys/kernel/tracing failed: %w", err)
	}
	return nil
}

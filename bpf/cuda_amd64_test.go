package bpf

import "testing"

// forceSingleUprobes makes the probes of t load the single-uprobe variant.
func forceSingleUprobes(t *testing.T) {
	singleUprobes = true
	t.Cleanup(func() { singleUprobes = false })
}

//go:build !amd64

package bpf

import "testing"

func forceSingleUprobes(t *testing.T) { t.Skip("the BPF objects are built for x86-64 only") }

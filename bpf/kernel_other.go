//go:build !amd64

package bpf

import "errors"

// errUnsupportedArch is the reason on architectures the BPF objects are not
// built for.
var errUnsupportedArch = errors.New("the BPF objects are built for x86-64 only")

func openKernel(error) (kernel, error) { return nil, errUnsupportedArch }

// Calibrate measures per-hit costs; the calibration hook is written in
// x86-64 assembly, so elsewhere it reports the architecture unsupported.
func Calibrate() (Costs, error) { return Costs{}, errUnsupportedArch }

//go:build !cgo

package gpu

// openNVML without cgo: go-nvml reaches libnvidia-ml.so.1 through cgo, so a
// static (CGO_ENABLED=0) build has no GPU facts but builds and runs.
func openNVML(Options) (collector, string) {
	return nil, "built without cgo, which go-nvml needs to load libnvidia-ml.so.1"
}

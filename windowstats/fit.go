package windowstats

import "math"

// Fit is an ordinary least-squares line y = Intercept + Slope·x, here mean
// latency (seconds) against throughput (calls per second) over the last
// closed windows. SlopeStdErr is the slope's standard error,
// sqrt(SSE/(n−2) / Sxx). OK is false when there are under three points or
// the throughput did not vary; Slope, Intercept and SlopeStdErr are then 0.
type Fit struct {
	N           int     `json:"n"`
	OK          bool    `json:"ok"`
	Slope       float64 `json:"slope"`     // seconds per (call/s)
	Intercept   float64 `json:"intercept"` // seconds
	SlopeStdErr float64 `json:"slopeStdErr"`
	MeanX       float64 `json:"meanX"`
	MinX        float64 `json:"minX"`
	MaxX        float64 `json:"maxX"`
	MeanY       float64 `json:"meanY"`
}

// FitLine fits y against x (same length) in two passes over centred sums,
// which keeps the result exact to rounding even when x barely varies.
func FitLine(xs, ys []float64) Fit {
	f := Fit{N: len(xs)}
	if len(xs) < 3 || len(ys) != len(xs) {
		return f
	}
	n := float64(len(xs))
	var sx, sy float64
	f.MinX, f.MaxX = xs[0], xs[0]
	for i, x := range xs {
		sx += x
		sy += ys[i]
		f.MinX, f.MaxX = min(f.MinX, x), max(f.MaxX, x)
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i, x := range xs {
		dx := x - mx
		sxx += dx * dx
		sxy += dx * (ys[i] - my)
	}
	f.MeanX, f.MeanY = mx, my
	// Throughput that varies by less than rounding gives no slope.
	if !(sxx > 1e-12*max(mx*mx, 1)*n) {
		return f
	}
	f.Slope = sxy / sxx
	f.Intercept = my - f.Slope*mx
	var sse float64
	for i, x := range xs {
		r := ys[i] - f.Intercept - f.Slope*x
		sse += r * r
	}
	f.SlopeStdErr = math.Sqrt(sse / (n - 2) / sxx)
	f.OK = true
	return f
}

package windowstats

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exactFit is the closed form in 256-bit arithmetic:
//
//	b = (nΣxy − ΣxΣy) / (nΣx² − (Σx)²),  a = (Σy − bΣx)/n,
//	SE(b) = sqrt(Σ(y − a − bx)² / (n−2) / (Σx² − (Σx)²/n))
func exactFit(xs, ys []float64) (slope, intercept, se float64) {
	f := func(v float64) *big.Float { return new(big.Float).SetPrec(256).SetFloat64(v) }
	z := func() *big.Float { return new(big.Float).SetPrec(256) }
	sx, sy, sxx, sxy := z(), z(), z(), z()
	for i := range xs {
		x, y := f(xs[i]), f(ys[i])
		sx.Add(sx, x)
		sy.Add(sy, y)
		sxx.Add(sxx, z().Mul(x, x))
		sxy.Add(sxy, z().Mul(x, y))
	}
	n := f(float64(len(xs)))
	num := z().Sub(z().Mul(n, sxy), z().Mul(sx, sy))
	den := z().Sub(z().Mul(n, sxx), z().Mul(sx, sx))
	b := z().Quo(num, den)
	a := z().Quo(z().Sub(sy, z().Mul(b, sx)), n)
	sse := z()
	for i := range xs {
		r := z().Sub(f(ys[i]), z().Add(a, z().Mul(b, f(xs[i]))))
		sse.Add(sse, z().Mul(r, r))
	}
	sxxc := z().Quo(den, n)
	v := z().Quo(z().Quo(sse, f(float64(len(xs)-2))), sxxc)
	slope, _ = b.Float64()
	intercept, _ = a.Float64()
	vf, _ := v.Float64()
	return slope, intercept, math.Sqrt(vf)
}

func TestFitLineMatchesClosedForm(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 13))
	for trial := range 200 {
		n := 3 + r.IntN(60)
		xs, ys := make([]float64, n), make([]float64, n)
		base := r.Float64() * 1000
		slope := (r.Float64() - 0.3) * 1e-3
		for i := range xs {
			xs[i] = base + r.Float64()*200 // throughput, calls/s
			ys[i] = 0.02 + slope*xs[i] + 0.002*r.NormFloat64()
		}
		f := FitLine(xs, ys)
		b, a, se := exactFit(xs, ys)
		if !f.OK || f.N != n {
			t.Fatalf("trial %d: fit not OK (n=%d)", trial, f.N)
		}
		if e := relErr(f.Slope, b); e > 1e-9 {
			t.Errorf("trial %d: slope %v exact %v (rel %g)", trial, f.Slope, b, e)
		}
		if e := relErr(f.Intercept, a); e > 1e-9 {
			t.Errorf("trial %d: intercept %v exact %v (rel %g)", trial, f.Intercept, a, e)
		}
		if e := relErr(f.SlopeStdErr, se); e > 1e-9 {
			t.Errorf("trial %d: slope SE %v exact %v (rel %g)", trial, f.SlopeStdErr, se, e)
		}
	}
}

func TestFitLineDegenerate(t *testing.T) {
	if f := FitLine([]float64{1, 2}, []float64{1, 2}); f.OK {
		t.Error("two points fitted")
	}
	if f := FitLine([]float64{5, 5, 5, 5}, []float64{1, 2, 3, 4}); f.OK || f.Slope != 0 {
		t.Errorf("constant throughput fitted: %+v", f)
	}
	// A perfect line: zero standard error.
	f := FitLine([]float64{1, 2, 3, 4}, []float64{3, 5, 7, 9})
	if !f.OK || f.Slope != 2 || f.Intercept != 1 || f.SlopeStdErr != 0 || f.MinX != 1 || f.MaxX != 4 {
		t.Errorf("line: %+v", f)
	}
}

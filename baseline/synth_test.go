package baseline

import (
	"math"
	"math/rand/v2"
	"time"
)

// t0 is a Monday, as in the benchmark.
var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// synth makes a one-minute P99-like series: a daily and weekly load shape,
// latency growing with load, AR(1) lognormal noise that grows at low load.
// mult, when set, multiplies latency at minute i (an incident); noiseMul
// scales the noise.
type synth struct {
	days     int
	base     float64
	k        float64 // latency growth at full load
	sigma    float64
	peak     float64
	seed     uint64
	mult     func(i int) float64
	noiseMul func(i int) float64
	slope    func(i int) float64 // replaces k at minute i when set
}

func loadAt(i int) float64 {
	t := t0.Add(time.Duration(i) * time.Minute)
	h := float64(t.Hour()) + float64(t.Minute())/60
	d := math.Pow(0.5-0.5*math.Cos(2*math.Pi*(h-3)/24), 1.4)
	if t.Weekday() == time.Saturday || t.Weekday() == time.Sunday {
		d *= 0.55
	}
	return 0.15 + 0.85*d
}

func (s synth) points() []Point {
	if s.base == 0 {
		s.base = 60
	}
	if s.sigma == 0 {
		s.sigma = 0.06
	}
	if s.peak == 0 {
		s.peak = 800
	}
	rng := rand.New(rand.NewPCG(s.seed, 7))
	n := s.days * 1440
	pts := make([]Point, n)
	ar := 0.0
	for i := range n {
		ld := loadAt(i)
		q := s.peak * ld * (0.95 + 0.1*rng.Float64())
		sd := s.sigma * (1 + 1.5/math.Sqrt(math.Max(q, 1)/50))
		if s.noiseMul != nil {
			sd *= s.noiseMul(i)
		}
		ar = 0.6*ar + 0.8*rng.NormFloat64()*sd
		k := s.k
		if s.slope != nil {
			k = s.slope(i)
		}
		v := s.base * (1 + k*ld*ld) * math.Exp(ar)
		if s.mult != nil {
			v *= s.mult(i)
		}
		pts[i] = Point{T: t0.Add(time.Duration(i) * time.Minute), V: v, Q: q}
	}
	return pts
}

// truth is the noise-free log latency at minute i.
func (s synth) truth(i int) float64 {
	if s.base == 0 {
		s.base = 60
	}
	ld := loadAt(i)
	return math.Log(s.base * (1 + s.k*ld*ld))
}

// window returns a mult that is f inside [from, to) minutes, 1 elsewhere.
func window(from, to int, f float64) func(int) float64 {
	return func(i int) float64 {
		if i >= from && i < to {
			return f
		}
		return 1
	}
}

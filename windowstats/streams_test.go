package windowstats

import (
	"bufio"
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

var updateTestdata = flag.Bool("update-testdata", false, "regenerate testdata/recorded_latency.csv")

const recordedPath = "testdata/recorded_latency.csv"

// benchDataDir holds the shared latency-incident benchmark, when present.
const benchDataDir = "../../shared/bench/latency-incidents/data"

// A stream is a named sequence of latencies in seconds.
type stream struct {
	name string
	xs   []float64
}

func syntheticStreams(n int) []stream {
	r := rand.New(rand.NewPCG(1, 2))
	gen := func(name string, f func() float64) stream {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = f()
		}
		return stream{name, xs}
	}
	return []stream{
		gen("uniform", func() float64 { return 0.001 + r.Float64()*0.999 }),
		gen("lognormal", func() float64 { return 0.05 * math.Exp(1.2*r.NormFloat64()) }),
		gen("pareto", func() float64 { return 0.01 / math.Pow(1-r.Float64(), 1/1.1) }),
		gen("bimodal", func() float64 {
			if r.Float64() < 0.9 {
				return 0.012 * math.Exp(0.15*r.NormFloat64())
			}
			return 0.4 * math.Exp(0.3*r.NormFloat64())
		}),
		gen("with-zeros", func() float64 {
			if r.Float64() < 0.05 {
				return 0
			}
			return 0.002 * math.Exp(r.NormFloat64())
		}),
	}
}

// recordedStream reads the stored trace: start offset (ms) and latency (µs).
func recordedStream(t testing.TB) (starts []float64, xs []float64) {
	t.Helper()
	f, err := os.Open(recordedPath)
	if err != nil {
		t.Fatalf("open recorded stream: %v", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(bufio.NewReader(f)).ReadAll()
	if err != nil {
		t.Fatalf("read %s: %v", recordedPath, err)
	}
	for i, row := range rows[1:] {
		s, err1 := strconv.ParseFloat(row[0], 64)
		x, err2 := strconv.ParseFloat(row[1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s row %d: %q", recordedPath, i+2, row)
		}
		starts = append(starts, s/1e3)
		xs = append(xs, x/1e6)
	}
	return starts, xs
}

// benchStreams reads the shared benchmark's P99 series (milliseconds) as
// value streams, when the folder is there.
func benchStreams(t testing.TB, max int) []stream {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(benchDataDir, "model_0[0-2]_p99_ms.csv"))
	var out []stream
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		var xs []float64
		for _, row := range rows[1:] {
			v, err := strconv.ParseFloat(row[1], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", p, row, err)
			}
			xs = append(xs, v/1e3)
			if len(xs) == max {
				break
			}
		}
		out = append(out, stream{"bench/" + filepath.Base(p), xs})
	}
	return out
}

// exactQuantile is the value of rank floor(q·(n−1)) of sorted xs, the
// definition the sketch's guarantee is stated for.
func exactQuantile(sorted []float64, q float64) float64 {
	return sorted[int(q*float64(len(sorted)-1))]
}

func sortedCopy(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s
}

// TestGenerateRecordedStream regenerates the stored trace with
// -update-testdata. The trace is a fixed-seed simulation of an inference
// server: Poisson arrivals whose rate swings between 40 and 160 per second,
// four workers serving FIFO with lognormal service times plus a batching
// wait, and rare stalls (GC, a noisy neighbour). Queueing gives it the long,
// load-dependent tail real servers show.
func TestGenerateRecordedStream(t *testing.T) {
	if !*updateTestdata {
		t.Skip("run with -update-testdata to regenerate " + recordedPath)
	}
	r := rand.New(rand.NewPCG(2026, 4))
	const n = 12000
	var b []byte
	b = append(b, "start_ms,latency_us\n"...)
	free := make([]float64, 4) // when each worker is next free, seconds
	now := 0.0
	for range n {
		rate := 100 + 60*math.Sin(2*math.Pi*now/40)
		now += r.ExpFloat64() / rate
		service := 0.018*math.Exp(0.35*r.NormFloat64()) + r.Float64()*0.004
		if r.Float64() < 0.003 {
			service += 0.05 + r.Float64()*0.25
		}
		w := 0
		for i := range free {
			if free[i] < free[w] {
				w = i
			}
		}
		begin := max(now, free[w])
		free[w] = begin + service
		lat := free[w] - now + 0.0003*r.Float64() // plus the sidecar's hops
		b = fmt.Appendf(b, "%.3f,%.0f\n", now*1e3, lat*1e6)
	}
	if err := os.WriteFile(recordedPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

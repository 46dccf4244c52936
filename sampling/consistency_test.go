package sampling

import (
	"math"
	"strings"
	"testing"
	"time"
)

// settle drives k at qps for a few intervals so that its probability is
// target/qps.
func settle(s *Sampler, k Key, qps int, ids *traceIDs) {
	now := t0
	for range 3 {
		roots(s, k, qps, ids)
		now = now.Add(time.Second)
		s.Tick(now)
	}
}

// thOf parses the th sub-key out of a tracestate; ok false when absent.
func thOf(t *testing.T, tracestate string) (uint64, bool) {
	t.Helper()
	ts := parseTraceState(tracestate)
	if !ts.valid {
		t.Fatalf("tracestate %q does not parse", tracestate)
	}
	if ts.thSet && !ts.thOK {
		t.Fatalf("tracestate %q has a malformed th", tracestate)
	}
	return ts.th, ts.thOK
}

func TestThresholdEncoding(t *testing.T) {
	// th at 4 digits of precision, from the specification's table.
	tests := []struct {
		p  float64
		th string
	}{
		{1, "0"},
		{0.5, "8"},
		{1.0 / 3, "aaab"},
		{0.25, "c"},
		{0.2, "cccd"},
		{0.125, "e"},
		{0.1, "e666"},
		{0.0625, "f"},
		{0.01, "fd70a"},
		{0.001, "ffbe77"},
		{0.0001, "fff9724"},
		{0.00001, "ffff583a"},
		{0.000001, "ffffef39"},
		{math.Ldexp(1, -56), "ffffffffffffff"},
		{1e-30, "ffffffffffffff"}, // below 2^-56: the smallest expressible
		{0.999999, "0"},           // no precision is spent near 1
		{1.5, "0"},
	}
	for _, tt := range tests {
		th := newThreshold(tt.p)
		if th.th != tt.th {
			t.Errorf("p=%v: th %q, want %q", tt.p, th.th, tt.th)
		}
		back, ok := parseTH(th.th)
		if !ok || back != th.t {
			t.Errorf("p=%v: th %q parses back to %#x (%v), want %#x", tt.p, th.th, back, ok, th.t)
		}
		if got := thresholdProbability(back); got != th.p {
			t.Errorf("p=%v: th %q encodes %v, threshold says %v", tt.p, th.th, got, th.p)
		}
		if tt.p > math.Ldexp(1, -56) && tt.p < 0.99 && math.Abs(th.p-tt.p)/tt.p > 1.0/4096 {
			t.Errorf("p=%v: encoded probability %v is off by more than 1/4096", tt.p, th.p)
		}
	}
	for _, s := range []string{"", "g", "-1", "fffffffffffffff", "0x8", " 8"} {
		if _, ok := parseTH(s); ok {
			t.Errorf("parseTH(%q) accepted", s)
		}
	}
	if v, ok := parseTH("F"); !ok || v != 0xf<<52 {
		t.Errorf("parseTH(F) = %#x, %v", v, ok)
	}
	for _, s := range []string{"", "abc", "ffffffffffffffff", "0000000000000g"} {
		if _, ok := parseRV(s); ok {
			t.Errorf("parseRV(%q) accepted", s)
		}
	}
}

// TestConsistentAcrossSamplers: two sidecars with the same probability make
// the same decisions (chained or side by side); a sidecar with a higher
// probability keeps a superset.
func TestConsistentAcrossSamplers(t *testing.T) {
	k := Key{Route: "/v2/models/m/infer", Model: "m"}
	a := newSampler(t, Config{})
	b := newSampler(t, Config{})
	wide := newSampler(t, Config{})
	settle(a, k, 1000, newTraceIDs(10))
	settle(b, k, 1000, newTraceIDs(11))
	settle(wide, k, 250, newTraceIDs(12))
	pa, pb, pw := a.Probability(k), b.Probability(k), wide.Probability(k)
	if pa != pb || math.Abs(pa-0.1) > 0.001 || math.Abs(pw-0.4) > 0.001 {
		t.Fatalf("probabilities %v, %v, %v; want 0.1, 0.1, 0.4", pa, pb, pw)
	}
	ids := newTraceIDs(13)
	const n = 100_000
	kept := 0
	for range n {
		id := ids.next()
		da := a.Head(k, id, Parent{})
		db := b.Head(k, id, Parent{})
		if da != db {
			t.Fatalf("trace %x: side by side decisions differ: %+v vs %+v", id, da, db)
		}
		// b downstream of a, honouring a's decision.
		chained := b.Head(k, id, Parent{Present: true, Sampled: da.Sampled, TraceState: da.TraceState})
		if chained.Sampled != da.Sampled || da.Sampled && (chained.Probability != da.Probability || chained.TraceState != da.TraceState) {
			t.Fatalf("trace %x: chained decision %+v, upstream %+v", id, chained, da)
		}
		if dw := wide.Head(k, id, Parent{}); da.Sampled && !dw.Sampled {
			t.Fatalf("trace %x kept at p=%v but not at p=%v", id, pa, pw)
		}
		if da.Sampled {
			kept++
			th, ok := thOf(t, da.TraceState)
			if !ok || thresholdProbability(th) != da.Probability || da.Probability != pa {
				t.Fatalf("trace %x: tracestate %q for probability %v (key at %v)", id, da.TraceState, da.Probability, pa)
			}
			if traceRandomness(id) < th {
				t.Fatalf("trace %x kept with randomness below its threshold", id)
			}
		}
	}
	// Binomial(100k, 0.1): sd ≈ 95.
	if want := pa * n; math.Abs(float64(kept)-want) > 500 {
		t.Errorf("kept %d of %d at p=%v, want about %.0f", kept, n, pa, want)
	}
}

func TestParentBased(t *testing.T) {
	high := [16]byte{8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff} // R = 2^56-1
	low := [16]byte{15: 1}                                                                         // R = 1
	const rvHigh = "rv:ffffffffffffff"
	tests := []struct {
		name   string
		id     [16]byte
		parent Parent
		want   Decision
	}{
		{"sampled, no tracestate", low, Parent{Present: true, Sampled: true}, Decision{Sampled: true}},
		{"not sampled, no tracestate", high, Parent{Present: true}, Decision{}},
		{"sampled with consistent th", high,
			Parent{Present: true, Sampled: true, TraceState: "ot=th:8"},
			Decision{Sampled: true, Probability: 0.5, TraceState: "ot=th:8"}},
		{"sampled with th, other vendors kept verbatim", high,
			Parent{Present: true, Sampled: true, TraceState: "rojo=00f067aa0ba902b7, ot=th:c;foo:bar ,congo=t61rcWkgMzE"},
			Decision{Sampled: true, Probability: 0.25, TraceState: "rojo=00f067aa0ba902b7, ot=th:c;foo:bar ,congo=t61rcWkgMzE"}},
		{"sampled with inconsistent th: honoured, th erased", low,
			Parent{Present: true, Sampled: true, TraceState: "rojo=1,ot=th:8;rv:00000000000001"},
			Decision{Sampled: true, TraceState: "ot=rv:00000000000001,rojo=1"}},
		{"sampled, rv makes it consistent", low,
			Parent{Present: true, Sampled: true, TraceState: "ot=th:8;" + rvHigh + ",congo=x"},
			Decision{Sampled: true, Probability: 0.5, TraceState: "ot=th:8;" + rvHigh + ",congo=x"}},
		{"sampled with th 0", low,
			Parent{Present: true, Sampled: true, TraceState: "ot=th:0"},
			Decision{Sampled: true, Probability: 1, TraceState: "ot=th:0"}},
		{"sampled without th: no probability, state kept", high,
			Parent{Present: true, Sampled: true, TraceState: "rojo=1,ot=rv:00000000000001"},
			Decision{Sampled: true, TraceState: "rojo=1,ot=rv:00000000000001"}},
		{"not sampled: th erased, ot moved first", high,
			Parent{Present: true, TraceState: "rojo=1,ot=th:8;" + rvHigh + ",congo=2"},
			Decision{TraceState: "ot=" + rvHigh + ",rojo=1,congo=2"}},
		{"not sampled: ot holding only th removed", high,
			Parent{Present: true, TraceState: "rojo=1,ot=th:8"},
			Decision{TraceState: "rojo=1"}},
		{"not sampled without ot: verbatim", high,
			Parent{Present: true, TraceState: "rojo=1,congo=2"},
			Decision{TraceState: "rojo=1,congo=2"}},
		{"Level 2 keys (digit first, two @) kept", high,
			Parent{Present: true, Sampled: true, TraceState: "1vendor=x,t@v@w=y,ot=th:8"},
			Decision{Sampled: true, Probability: 0.5, TraceState: "1vendor=x,t@v@w=y,ot=th:8"}},
		{"Level 2 keys kept, th erased when not sampled", high,
			Parent{Present: true, TraceState: "1vendor=x,ot=th:8"},
			Decision{TraceState: "1vendor=x"}},
		{"malformed tracestate dropped", high,
			Parent{Present: true, Sampled: true, TraceState: "rojo=1,Bad Key=2,ot=th:8"},
			Decision{Sampled: true}},
		{"duplicate keys dropped", high,
			Parent{Present: true, Sampled: true, TraceState: "ot=th:8,ot=th:c"},
			Decision{Sampled: true}},
		{"malformed th erased", high,
			Parent{Present: true, Sampled: true, TraceState: "ot=th:xyz;rv:00000000000001,rojo=1"},
			Decision{Sampled: true, TraceState: "ot=rv:00000000000001,rojo=1"}},
		{"malformed ot value dropped", high,
			Parent{Present: true, Sampled: true, TraceState: "rojo=1,ot=th:8;th:c"},
			Decision{Sampled: true, TraceState: "rojo=1"}},
		{"malformed rv: threshold cannot be checked", high,
			Parent{Present: true, Sampled: true, TraceState: "ot=th:8;rv:12"},
			Decision{Sampled: true, TraceState: "ot=rv:12"}},
		{"whitespace-only member canonicalised", high,
			Parent{Present: true, Sampled: true, TraceState: "rojo=1, ,ot=th:8"},
			Decision{Sampled: true, Probability: 0.5, TraceState: "rojo=1,ot=th:8"}},
		{"no traceparent: tracestate ignored, root decision", high,
			Parent{TraceState: "ot=th:ffffffffffffff,rojo=1"},
			Decision{Sampled: true, Probability: 1, TraceState: "ot=th:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSampler(t, Config{})
			k := Key{Route: "r", Model: "m"}
			got := s.Head(k, tt.id, tt.parent)
			if got != tt.want {
				t.Errorf("Head = %+v, want %+v", got, tt.want)
			}
			if tt.parent.Present && s.controller(k).count.Load() != 0 {
				t.Error("a call with a parent counted towards the key's QPS")
			}
			if got.TraceState != "" {
				if ts := parseTraceState(got.TraceState); !ts.valid || !ts.clean {
					t.Errorf("propagated tracestate %q is not clean", got.TraceState)
				}
			}
		})
	}
}

// TestParentBasedNotSampledIgnoresProbability: a present, not-sampled parent
// is followed even where the key's own probability is 1.
func TestParentBasedNotSampledIgnoresProbability(t *testing.T) {
	s := newSampler(t, Config{})
	k := Key{Route: "r"}
	ids := newTraceIDs(14)
	for range 1000 {
		if d := s.Head(k, ids.next(), Parent{Present: true}); d.Sampled {
			t.Fatal("sampled against a not-sampled parent")
		}
	}
	if s.Probability(k) != 1 {
		t.Fatal("key should be at the ceiling")
	}
}

func TestRootTraceStateAllocFree(t *testing.T) {
	s := newSampler(t, Config{})
	k := Key{Route: "r"}
	ids := newTraceIDs(15)
	settle(s, k, 1000, ids)
	id := ids.next()
	allocs := testing.AllocsPerRun(1000, func() {
		s.Head(k, id, Parent{})
		s.Head(k, id, Parent{Present: true, TraceState: "rojo=1,congo=2"})
		s.Head(k, id, Parent{Present: true, Sampled: true, TraceState: "ot=th:0,rojo=1"})
	})
	if allocs != 0 {
		t.Errorf("Head allocates %v times on paths that need no rewrite", allocs)
	}
	if !strings.HasPrefix(s.Head(k, [16]byte{9: 0xff}, Parent{}).TraceState, "ot=th:e66") {
		t.Error("sampled root does not carry its th")
	}
}

package bpf

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/cgroup"
)

func TestParseMaps(t *testing.T) {
	in := `55d0c8a00000-55d0c8a01000 r--p 00000000 fd:01 1311 /opt/app/cudaprog
7f3c1a000000-7f3c1a021000 r--p 00000000 fd:01 1312    /usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127
7f3c1a021000-7f3c1a0a0000 r-xp 00021000 fd:01 1312    /usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127
7f3c1b000000-7f3c1b400000 r-xp 00100000 00:2a 99 /tmp/x/libcuda.so.1 (deleted)
7f3c1c000000-7f3c1c100000 r-xp 00000000 fd:01 7 /site-packages/torch/lib/libcudart-d0da41ae.so.11.0
7f3c1d000000-7f3c1d100000 r-xp 00000000 fd:01 8 /usr/lib/libcudnn.so.8
7f3c1e000000-7f3c1e100000 r-xp 00000000 fd:01 9 /usr/lib/libcudadebugger.so.1
7ffd1000000-7ffd1021000 rw-p 00000000 00:00 0                          [stack]
7ffd2000000-7ffd2001000 rw-p 00000000 00:00 0
`
	ms, err := parseMaps(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 9 {
		t.Fatalf("%d mappings, want 9", len(ms))
	}
	if m := ms[3]; !m.deleted || m.path != "/tmp/x/libcuda.so.1" || m.offset != 0x100000 || m.dev != "00:2a" || m.inode != 99 || !m.exec() {
		t.Errorf("deleted mapping parsed as %+v", m)
	}
	libs := cudaLibraries(42, ms)
	if len(libs) != 3 {
		t.Fatalf("libraries %+v, want libcudart, libcuda and the hashed libcudart", libs)
	}
	rt := libs[0]
	if rt.kind != libRuntime || len(rt.exec) != 1 || rt.exec[0] != [2]uint64{0x7f3c1a021000, 0x7f3c1a0a0000} || rt.open != "/proc/42/map_files/7f3c1a000000-7f3c1a021000" {
		t.Errorf("runtime library %+v", *rt)
	}
	if libs[1].kind != libDriver || !libs[1].deleted || libs[2].kind != libRuntime {
		t.Errorf("libraries %+v %+v", *libs[1], *libs[2])
	}
	if _, off, ok := fileOffset(ms, 0x7f3c1a021010); !ok || off != 0x21010 {
		t.Errorf("file offset %#x, %v", off, ok)
	}
	if _, _, ok := fileOffset(ms, 0x7ffd1000010); ok {
		t.Error("an anonymous mapping has a file offset")
	}
	if _, err := parseMaps(strings.NewReader("zz-yy r-xp 0 0:0 0 x\n")); err == nil {
		t.Error("a bad line parsed")
	}
}

func TestCUDALibKind(t *testing.T) {
	for name, want := range map[string]int{
		"libcudart.so": 0, "libcudart.so.12": 0, "/a/libcudart.so.11.0": 0, "libcudart-d0da41ae.so.11.0": 0,
		"libcuda.so": 1, "libcuda.so.1": 1, "libcuda.so.550.54.15": 1,
		"libcudart_static.a": -1, "libcudnn.so.9": -1, "libcudadebugger.so.1": -1, "libcudart-.so": -1, "libcuda-x.so": -1,
	} {
		k, ok := cudaLibKind(name)
		got := -1
		if ok {
			got = int(k)
		}
		if got != want {
			t.Errorf("cudaLibKind(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestCPUStat(t *testing.T) {
	v2 := "usage_usec 100\nnr_periods 50\nnr_throttled 7\nthrottled_usec 2500\n"
	s, ok := parseCPUStat([]byte(v2))
	if !ok || s.periods != 50 || s.throttled != 7 || s.throttledTime != 2500*time.Microsecond {
		t.Errorf("v2: %+v %v", s, ok)
	}
	v1 := "nr_periods 10\nnr_throttled 3\nthrottled_time 4000000\n"
	if s, ok := parseCPUStat([]byte(v1)); !ok || s.throttledTime != 4*time.Millisecond {
		t.Errorf("v1: %+v %v", s, ok)
	}
	if _, ok := parseCPUStat([]byte("usage_usec 1\nuser_usec 1\n")); ok {
		t.Error("a cpu.stat without throttling reported throttling")
	}
}

func TestParsePSI(t *testing.T) {
	p, ok := parsePSI([]byte("some avg10=1.00 avg60=0.50 avg300=0.10 total=1500\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=200\n"))
	if !ok || p.some != 1500*time.Microsecond || p.full != 200*time.Microsecond {
		t.Errorf("%+v %v", p, ok)
	}
	if _, ok := parsePSI(nil); ok {
		t.Error("empty PSI parsed")
	}
}

func TestDecideDuty(t *testing.T) {
	for _, c := range []struct {
		budget, always, rate, cost, min, want float64
	}{
		{0.03, 0, 0, 20e-6, 0.01, 1},        // no launches: free
		{0.03, 0, 1000, 20e-6, 0.01, 1},     // 2% fits in 3%
		{0.03, 0, 40000, 15e-6, 0.01, 0.05}, // 60% of a core: 5% of the time
		{0.03, 0.01, 40000, 15e-6, 0.01, 0.02 / 0.6},
		{0.03, 0.05, 40000, 15e-6, 0.01, 0.01}, // over budget without launches: the floor
	} {
		if got := decideDuty(c.budget, c.always, c.rate, c.cost, c.min); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("decideDuty(%+v) = %v", c, got)
		}
	}
}

func TestGateLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var g gateLog
	g.openAt(at(0))
	g.closeAt(at(100))
	g.openAt(at(1000))
	if d := g.onWithin(at(50), at(1050)); d != 100*time.Millisecond {
		t.Errorf("on within = %v, want 100ms", d)
	}
	if d := g.onWithin(at(200), at(900)); d != 0 {
		t.Errorf("on within an off-phase = %v", d)
	}
}

func TestTailRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Idle for 200 ms, then 20k/s: the tail sees the new rate.
	marks := []launchMark{{at(50), 0}, {at(100), 0}, {at(150), 0}, {at(200), 0}, {at(250), 1000}, {at(300), 2000}}
	if r := tailRate(marks, launchMark{at(0), 0}, launchMark{at(350), 3000}); math.Abs(r-20000) > 1 {
		t.Errorf("tail rate %v, want 20000", r)
	}
	// A phase shorter than the tail is taken whole.
	if r := tailRate(nil, launchMark{at(0), 0}, launchMark{at(40), 800}); math.Abs(r-20000) > 1 {
		t.Errorf("short phase rate %v, want 20000", r)
	}
}

// TestJoinProportional: a window covering half a sample gets half its
// counts; levels come from the last sample; waits are clipped exactly.
func TestJoinProportional(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := newRing(2)
	r.push(sample{start: at(-100), end: at(0)}) // pushed out by the next two
	r.push(sample{start: at(0), end: at(100), cuda: true, launches: 100, launchesCounted: 100, outstanding: 10, sched: true, rqNs: 1000, rqWaits: 10})
	s := sample{start: at(100), end: at(200), cuda: true, launches: 50, launchesCounted: 10, estimated: true, outstanding: 20}
	s.copyBytes[dirH2D] = 400
	s.rqHist[10] = 4
	s.sched = true
	r.push(s)
	var l syncLog
	l.end(syncSpan{begin: at(40), end: at(60), tid: 1})
	l.begin(syncSpan{begin: at(140), tid: 2})
	f := join(r, &l, []OOMKill{{Time: at(120), PID: 7}, {Time: at(500), PID: 8}}, at(50), at(150), at(160))
	if f.Samples != 2 || f.Coverage != 1 || f.CUDA == nil || f.Sched == nil {
		t.Fatalf("facts %+v", f)
	}
	c := f.CUDA
	if c.Launches != 75 || !c.LaunchesEstimated || c.H2DBytes != 200 || c.Outstanding != 20 {
		t.Errorf("CUDA facts %+v", *c)
	}
	if c.SyncWait != 20*time.Millisecond || c.Syncs != 2 {
		t.Errorf("sync wait %v in %d, want 10ms+10ms in 2", c.SyncWait, c.Syncs)
	}
	if f.Sched.RunqueueDelay != 500 || f.Sched.RunqueueWaits != 5 {
		t.Errorf("sched facts %+v", *f.Sched)
	}
	if len(f.OOMKills) != 1 || f.OOMKills[0].PID != 7 {
		t.Errorf("OOM kills %+v", f.OOMKills)
	}
	if f := join(r, &l, nil, at(300), at(400), at(400)); f.Present() || f.Samples != 0 {
		t.Errorf("a window past the samples has facts %+v", f)
	}
}

func TestPercentile(t *testing.T) {
	var h [nBuckets]float64
	h[10] = 50 // [1024, 2048) ns
	h[20] = 50 // [~1ms, ~2ms)
	if p := percentile(h[:], 0.5); p < 1024 || p > 2048 {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(h[:], 0.99); p < 1<<20 || p > 1<<21 {
		t.Errorf("p99 %v", p)
	}
	if percentile(make([]float64, nBuckets), 0.5) != 0 {
		t.Error("empty histogram has a percentile")
	}
}

func TestLog2HistExposition(t *testing.T) {
	var h log2Hist
	h.counts[9] = 2  // below 1.024µs
	h.counts[19] = 3 // about 0.5ms
	h.sumNs = 1_500_000
	var b bytes.Buffer
	h.write(&b, "x_seconds")
	out := b.String()
	for _, want := range []string{
		"# TYPE x_seconds histogram\n",
		`x_seconds_bucket{le="1.024e-06"} 2` + "\n",
		`x_seconds_bucket{le="0.000262144"} 2` + "\n",
		`x_seconds_bucket{le="0.001048576"} 5` + "\n",
		`x_seconds_bucket{le="+Inf"} 5` + "\n",
		"x_seconds_sum 0.0015\n",
		"x_seconds_count 5\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q:\n%s", want, out)
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.Budget != DefaultBudget || o.Sample != DefaultSample || o.Period != DefaultPeriod || !ringShapeIs(o, 481, 241, 8) {
		t.Errorf("defaults %+v %v", o, err)
	}
	for _, bad := range []Options{{Budget: -1}, {Sample: time.Millisecond}, {Sample: 2 * time.Second}, {MinDuty: 2}, {Costs: &Costs{}}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}

// TestNilProbes: a nil *Probes answers like disabled ones.
func TestNilProbes(t *testing.T) {
	var p *Probes
	if p.Enabled() || p.Window(time.Now(), time.Now().Add(time.Second)).Present() || p.Kernels(3) != nil || p.Close() != nil || !p.Settled(time.Now()) {
		t.Error("a nil Probes reports something")
	}
	set := metrics.NewSet()
	newExporter(set).start(false, false, false)
	var b bytes.Buffer
	set.WritePrometheus(&b)
	if !strings.Contains(b.String(), "inferwatch_bpf_enabled 0") || strings.Contains(b.String(), "inferwatch_cuda") {
		t.Errorf("disabled metrics:\n%s", b.String())
	}
}

func ringShapeIs(o Options, fine, coarse, per int) bool {
	f, c, p := o.ringShape()
	return f == fine && c == coarse && p == per
}

// TestTieredRing: samples older than the fine part merge per coarse
// sample; every counter of the span survives the merge, a window over
// merged samples gets its pro-rata share, levels are the newest, and the
// oldest coarse samples leave first.
func TestTieredRing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 100 * time.Millisecond) }
	r := newTieredRing(4, 3, 2)
	for i := range 12 {
		s := sample{start: at(i), end: at(i + 1), cuda: true, launches: 10, launchesCounted: 10, outstanding: int64(i), sched: true, rqNs: 100, rqWaits: 1}
		s.rqHist[3] = 2
		if i == 5 {
			s.cgroup = true
			s.throttled = cpuStat{periods: 4, throttled: 2, throttledTime: 7}
		}
		if i%2 == 0 {
			s.psiOK[psiCPU] = true
			s.psi[psiCPU].some = 5
		}
		r.push(s)
	}
	// 12 pushed: fine holds 8..11; 0..7 went coarse as (0,1) (2,3) (4,5)
	// (6,7), of which (0,1) was pushed out.
	if r.fine.n != 4 || r.coarse.n != 3 || r.len() != 7 {
		t.Fatalf("fine %d coarse %d", r.fine.n, r.coarse.n)
	}
	for i, want := range []struct{ start, end int }{{2, 4}, {4, 6}, {6, 8}, {8, 9}, {9, 10}, {10, 11}, {11, 12}} {
		if s := r.at(i); !s.start.Equal(at(want.start)) || !s.end.Equal(at(want.end)) {
			t.Errorf("sample %d spans %v-%v, want %d-%d", i, s.start.Sub(t0), s.end.Sub(t0), want.start, want.end)
		}
	}
	c := r.at(1) // (4,5)
	if c.launches != 20 || c.rqNs != 200 || c.rqWaits != 2 || c.rqHist[3] != 4 || c.outstanding != 5 {
		t.Errorf("merged counters %+v", *c)
	}
	if !c.cgroup || c.throttled != (cpuStat{periods: 4, throttled: 2, throttledTime: 7}) {
		t.Errorf("merged cgroup %v %+v", c.cgroup, c.throttled)
	}
	if !c.psiOK[psiCPU] || c.psi[psiCPU].some != 5 {
		t.Errorf("merged PSI %v %+v", c.psiOK, c.psi)
	}
	if r.last().outstanding != 11 {
		t.Errorf("last outstanding %d, want 11", r.last().outstanding)
	}
	var l syncLog
	// Half of the merged (4,5) and all of (6,7) and 8: 1 + 2 + 1 samples.
	f := join(r, &l, nil, at(5), at(9), at(12))
	if f.CUDA == nil || f.CUDA.Launches != 40 || f.Coverage != 1 || f.Samples != 3 {
		t.Fatalf("window over merged samples: %+v %+v", f, f.CUDA)
	}
	// Pushed out: nothing of it is left.
	if f := join(r, &l, nil, at(0), at(2), at(12)); f.Samples != 0 {
		t.Errorf("window over dropped samples: %+v", f)
	}
	// Samples on either side of a gap do not merge.
	g := newTieredRing(1, 4, 4)
	for _, i := range []int{0, 1, 5, 6} {
		g.push(sample{start: at(i), end: at(i + 1)})
	}
	if g.coarse.n != 2 || !g.at(0).end.Equal(at(2)) || !g.at(1).start.Equal(at(5)) || !g.at(1).end.Equal(at(6)) {
		t.Errorf("across a gap: %d coarse, first %v-%v", g.coarse.n, g.at(0).start.Sub(t0), g.at(0).end.Sub(t0))
	}
	// A ring without a coarse part drops the oldest as before.
	plain := newRing(2)
	for i := range 3 {
		plain.push(sample{start: at(i), end: at(i + 1)})
	}
	if plain.len() != 2 || !plain.at(0).start.Equal(at(1)) {
		t.Errorf("plain ring holds %d from %v", plain.len(), plain.at(0).start.Sub(t0))
	}
}

// TestCgroupReaderReset: a cpu.stat whose counters went back (the
// upstream restarted in a cgroup of the same path, recreated) gives no
// delta for that sample, not a wrapped one: before, a cgroup never
// throttled passed the throttled-time check and its nr_periods wrapped to
// ~1.8e19.
func TestCgroupReaderReset(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.stat")
	c := cgroupReader{paths: []string{p}}
	for i, tc := range []struct {
		stat string
		want cpuStat
	}{
		{"nr_periods 1000\nnr_throttled 0\nthrottled_usec 0\n", cpuStat{}},
		{"nr_periods 1100\nnr_throttled 0\nthrottled_usec 0\n", cpuStat{periods: 100}},
		{"nr_periods 5\nnr_throttled 0\nthrottled_usec 0\n", cpuStat{}},                                 // recreated
		{"nr_periods 15\nnr_throttled 2\nthrottled_usec 300\n", cpuStat{10, 2, 300 * time.Microsecond}}, // from the new start
		{"nr_periods 20\nnr_throttled 1\nthrottled_usec 400\n", cpuStat{}},                              // throttled went back
	} {
		if err := os.WriteFile(p, []byte(tc.stat), 0o644); err != nil {
			t.Fatal(err)
		}
		d, ok := c.sample()
		if !ok || d != tc.want {
			t.Errorf("reading %d: %+v %v, want %+v", i, d, ok, tc.want)
		}
	}
}

// TestCgroupReaderWhy: a process whose cgroup is out of this process's
// view (another container's) is not read, and the reader says why.
func TestCgroupReaderWhy(t *testing.T) {
	c := cgroupReader{mounts: []cgroup.Mount{{Point: "/sys/fs/cgroup", Root: "/some/other/container", V2: true}}}
	err := c.setPIDs([]int{os.Getpid()})
	if !errors.Is(err, cgroup.ErrOutside) || len(c.paths) != 0 {
		t.Fatalf("paths %v, err %v; want none, and ErrOutside", c.paths, err)
	}
	mounts, err := cgroup.SelfMounts()
	if err != nil {
		t.Fatal(err)
	}
	c = cgroupReader{mounts: mounts}
	if err := c.setPIDs([]int{os.Getpid()}); err != nil || len(c.paths) != 1 {
		t.Fatalf("this process: paths %v, err %v", c.paths, err)
	}
}

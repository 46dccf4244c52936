package baseline

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestMain lets the test binary double as a process whose memory grows
// (BASELINE_LEAK_HELPER=MiB per 100 ms; 0: allocate once, then hold).
func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv("BASELINE_LEAK_HELPER"); ok {
		step, _ := strconv.Atoi(v)
		leakHelper(step)
		return
	}
	os.Exit(m.Run())
}

var sink [][]byte

func leakHelper(stepMiB int) {
	touch := func(n int) {
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		sink = append(sink, b)
	}
	touch(32)
	for range 600 { // at most a minute
		time.Sleep(100 * time.Millisecond)
		if stepMiB > 0 {
			touch(stepMiB)
		}
	}
}

// A real process that grows its RSS is flagged with a projected exhaustion
// time; one that holds steady is not.
func TestLeakOfARealProcess(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stepMiB   int
		suspected bool
	}{
		{"grows 8 MiB per 100ms", 8, true},
		{"steady", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "BASELINE_LEAK_HELPER="+strconv.Itoa(tc.stepMiB))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := cmd.Process.Pid
			time.Sleep(300 * time.Millisecond) // past the first allocation
			var w LeakWatch
			for range 30 {
				rss, err := ReadRSS(pid)
				if err != nil {
					t.Fatal(err)
				}
				w.Add(Sample{T: time.Now(), V: rss})
				time.Sleep(50 * time.Millisecond)
			}
			// Project against a limit 1 GiB above the current RSS.
			last := w.samples[len(w.samples)-1].V
			limit := last + 1<<30
			l, err := w.Estimate(limit, LeakOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("slope %.1f MiB/s, concordance %.2f, time to limit %v, suspected %v",
				l.Slope/(1<<20), l.Concordance, l.TimeToLimit.Round(time.Second), l.Suspected)
			if l.Suspected != tc.suspected {
				t.Fatalf("suspected %v, want %v", l.Suspected, tc.suspected)
			}
			if tc.suspected {
				// 80 MiB/s against 1 GiB left: about 13 s.
				if l.TimeToLimit < 5*time.Second || l.TimeToLimit > 40*time.Second {
					t.Errorf("time to limit %v, want about 13s", l.TimeToLimit)
				}
				if l.Exhaustion.IsZero() {
					t.Error("no exhaustion time")
				}
			}
		})
	}
}

func TestEstimateLeakSynthetic(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	mk := func(f func(i int) float64) []Sample {
		s := make([]Sample, 200)
		for i := range s {
			s[i] = Sample{T: start.Add(time.Duration(i) * time.Minute), V: f(i)}
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		s         []Sample
		limit     float64
		o         LeakOptions
		suspected bool
		tte       time.Duration
	}{
		// 1 MB a minute from 1 GB, limit 2 GB: 1 GB - 199 MB left at 1 MB/min.
		{"linear leak", mk(func(i int) float64 { return 1e9 + float64(i)*1e6 }), 2e9, LeakOptions{}, true, 801 * time.Minute},
		{"leak with GC sawtooth", mk(func(i int) float64 { return 1e9 + float64(i)*1e6 + float64(i%10)*3e6 }), 2e9, LeakOptions{}, true, 0},
		{"flat with noise", mk(func(i int) float64 { return 1e9 + float64((i*7919)%13)*1e6 }), 2e9, LeakOptions{}, false, 0},
		{"leak too slow for the horizon", mk(func(i int) float64 { return 1e9 + float64(i)*1e6 }), 1e15, LeakOptions{}, false, 0},
		// Allocations counted from zero: no relative rise exists, so the
		// absolute floor decides. 1 MB a minute from 0, limit 1 GB: 801 MB left.
		{"from zero, over the floor", mk(func(i int) float64 { return float64(i) * 1e6 }), 1e9, LeakOptions{FromZero: true, MinRiseBytes: 64e6}, true, 801 * time.Minute},
		{"from zero, under the floor", mk(func(i int) float64 { return float64(i) * 1e6 }), 1e9, LeakOptions{FromZero: true, MinRiseBytes: 256e6}, false, 0},
		{"from zero, no limit", mk(func(i int) float64 { return float64(i) * 1e6 }), 0, LeakOptions{FromZero: true, MinRiseBytes: 64e6}, true, 0},
		{"from zero, flat", mk(func(i int) float64 { return 5e8 + float64((i*7919)%13)*1e6 }), 1e9, LeakOptions{FromZero: true, MinRiseBytes: 64e6}, false, 0},
		// The same series without FromZero: its first fitted value is about
		// zero, and a relative rise of nothing is no leak.
		{"counted from zero, judged as absolute", mk(func(i int) float64 { return float64(i) * 1e6 }), 1e9, LeakOptions{MinRiseBytes: 64e6}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := EstimateLeak(tc.s, tc.limit, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if l.Suspected != tc.suspected {
				t.Fatalf("suspected %v, want %v (%+v)", l.Suspected, tc.suspected, l)
			}
			if tc.tte > 0 {
				if d := l.TimeToLimit - tc.tte; d < -time.Minute || d > time.Minute {
					t.Errorf("time to limit %v, want %v", l.TimeToLimit, tc.tte)
				}
			}
		})
	}
}

func TestMemTotal(t *testing.T) {
	l, err := MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	if l < 64<<20 {
		t.Fatalf("limit %v bytes", l)
	}
}

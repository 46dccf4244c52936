package history

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/windowstats"
)

var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// loadAt is a daily load shape in history time.
func loadAt(t time.Time) float64 {
	h := float64(t.Hour()) + float64(t.Minute())/60
	return 800 * (0.15 + 0.85*math.Pow(0.5-0.5*math.Cos(2*math.Pi*(h-3)/24), 1.4))
}

func p99At(q float64, i int) float64 {
	u := q / 800
	return 0.040 * (1 + u*u) * (1 + 0.02*math.Sin(float64(i)*1.3))
}

// feed drives n one-second windows (one history minute each at speedup 60)
// starting at real second from; it returns the last answer.
func feed(h *Seasonal, from, n int, mult float64) (exp, up float64, ok bool, w windowstats.WindowView) {
	for i := from; i < from+n; i++ {
		real := t0.Add(time.Duration(i) * time.Second)
		hist := t0.Add(time.Duration(i) * time.Minute)
		q := loadAt(hist)
		w = windowstats.WindowView{Start: real, Seconds: 1, Count: int64(q), QPS: q, P99: p99At(q, i) * mult}
		exp, up, ok = h.Baseline("resnet", "1", &w)
	}
	return
}

// Two daily cycles of compressed history switch the model from no band to
// a seasonal one that follows load; the history survives a restart.
func TestSeasonalSwitchesAfterTwoCycles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.json")
	h, err := New(Options{Path: path, Speedup: 60})
	if err != nil {
		t.Fatal(err)
	}
	// The first window sets the epoch at t0, so history minute i is window i.
	if _, _, ok, _ := feed(h, 0, 36*60, 1); ok {
		t.Fatal("a band after 36 hours of history")
	}
	if k := h.ModelKind("resnet", "1"); k != "trailing" {
		t.Fatalf("model kind %q after 36h, want trailing", k)
	}
	exp, up, ok, w := feed(h, 36*60, 13*60, 1)
	if !ok || h.ModelKind("resnet", "1") != "daily" {
		t.Fatalf("no daily band after 49 hours (ok %v, kind %q)", ok, h.ModelKind("resnet", "1"))
	}
	t.Logf("at %s: P99 %.4f, band expected %.4f upper %.4f", w.End().Format(time.TimeOnly), w.P99, exp, up)
	if math.Abs(exp/w.P99-1) > 0.05 || w.P99 > up {
		t.Fatalf("P99 %.4f not tracked: expected %.4f, upper %.4f", w.P99, exp, up)
	}
	// Through the busy afternoon the P99 doubles with load and stays in the band.
	for i := 49 * 60; i < 49*60+8*60; i++ {
		_, up, _, w := feed(h, i, 1, 1)
		if w.P99 > up {
			t.Fatalf("load-proportional P99 %.4f over the band's upper %.4f at %s", w.P99, up, w.End())
		}
	}
	// A +60% incident does not.
	if _, up, _, w := feed(h, 57*60, 1, 1.6); w.P99 <= up {
		t.Fatalf("incident P99 %.4f inside the band's upper %.4f", w.P99, up)
	}
	if b := h.Bands()[[2]string{"resnet", "1"}]; !(b.Lower < b.Expected && b.Expected < b.Upper) {
		t.Fatalf("bands %+v", b)
	}
	n := h.Len("resnet", "1")
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}
	h2, err := New(Options{Path: path, Speedup: 60})
	if err != nil {
		t.Fatal(err)
	}
	if got := h2.Len("resnet", "1"); got < n-1 || got > n {
		t.Fatalf("after restart %d points, want %d", got, n)
	}
	if _, _, ok, _ := feed(h2, 57*60+1, 1, 1); !ok {
		t.Fatal("no band after restart")
	}
}

func TestBounded(t *testing.T) {
	h, err := New(Options{Span: 48 * time.Hour, MaxModels: 2, Speedup: 60})
	if err != nil {
		t.Fatal(err)
	}
	feed(h, 0, 4*24*60, 1)
	if n := h.Len("resnet", "1"); n > 48*60+48*60/8 {
		t.Fatalf("%d points kept, span allows %d", n, 48*60)
	}
	for _, m := range []string{"a", "b", "c"} {
		w := windowstats.WindowView{Start: t0.Add(100 * time.Hour), Seconds: 1, Count: 1, QPS: 1, P99: 0.01}
		h.Baseline(m, "1", &w)
	}
	if len(h.s) != 2 {
		t.Fatalf("%d models kept, max 2", len(h.s))
	}
}

func TestOptionsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{Span: time.Hour}, "history"},
		{Options{Resolution: time.Millisecond}, "resolution"},
		{Options{MaxModels: -1}, "max_models"},
		{Options{RefitEvery: time.Minute}, "refit_every"},
		{Options{Speedup: 0.5}, "speedup"},
		{Options{Speedup: math.NaN()}, "speedup"}, // no comparison holds for NaN
		{Options{Band: math.NaN()}, "band"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: err %v, want one naming %s", tc.o, err, tc.field)
		}
	}
}

// A history file that cannot be read as one — cut short by a crash (empty,
// or the JSON stopped mid-point), not JSON, or another version — does not
// stop the sidecar from starting: it is renamed to PATH.corrupt, with a
// warning naming both, and the history starts empty and is saved again.
func TestDamagedFileSetAside(t *testing.T) {
	for name, body := range map[string]string{
		"empty":         ``,
		"cut short":     `{"version":1,"series":{"m\u00001":{"points":[{"t":1772409600,"p":0.04`,
		"not JSON":      "\x00\x00\x00\x00",
		"wrong type":    `{"version":1,"series":{"m\u00001":{"points":"x"}}}`,
		"other version": `{"version":2,"series":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "history.json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			h, err := New(Options{Path: path, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("a damaged history file stops start-up: %v", err)
			}
			if len(h.s) != 0 {
				t.Fatalf("%d models from a damaged file", len(h.s))
			}
			kept, err := os.ReadFile(path + ".corrupt")
			if err != nil || string(kept) != body {
				t.Fatalf("damaged file not set aside as it was: %q, %v", kept, err)
			}
			if msg := logs.String(); !strings.Contains(msg, path) || !strings.Contains(msg, path+".corrupt") {
				t.Fatalf("warning %q does not name the file and where it went", msg)
			}
			if err := h.Save(); err != nil {
				t.Fatal(err)
			}
			if _, err := New(Options{Path: path}); err != nil {
				t.Fatalf("the history saved after setting one aside does not load: %v", err)
			}
		})
	}
}

// TestSpanIsTime: `history` bounds the time kept, not only the points. A
// model called now and then (a window every five minutes here) fills its
// point budget slowly; it must not be fitted on latency older than the
// span. Five days at 100 ms, then three days at 40 ms, with a 48h span:
// the points kept and the band are those of the last 48 hours.
func TestSpanIsTime(t *testing.T) {
	const span = 48 * time.Hour
	h, err := New(Options{Span: span})
	if err != nil {
		t.Fatal(err)
	}
	var exp float64
	var ok bool
	for m := 0; m < 8*24*60; m += 5 {
		p99 := 0.100
		if m >= 5*24*60 {
			p99 = 0.040
		}
		w := windowstats.WindowView{Start: t0.Add(time.Duration(m) * time.Minute), Seconds: 10, Count: 10, QPS: 1, P99: p99}
		exp, _, ok = h.Baseline("rare", "1", &w)
	}
	s := h.s[key("rare", "1")]
	first, last := s.Points[0].T, s.Points[len(s.Points)-1].T
	t.Logf("%d points over %v; band expected %.4f (ok %v, kind %s)", len(s.Points), time.Duration(last-first)*time.Second, exp, ok, h.ModelKind("rare", "1"))
	if age := time.Duration(last-first) * time.Second; age > span+span/8 {
		t.Errorf("points kept over %v, span %v", age, span)
	}
	if !ok || math.Abs(exp/0.040-1) > 0.03 {
		t.Errorf("band expected %.4f (ok %v) after two days at 40 ms: fitted on history older than the span", exp, ok)
	}
}

// TestUnwritablePathStopsStart: a history_path whose folder is missing (a
// typo, a volume not mounted) is a config mistake: New names the field,
// instead of the sidecar starting and failing to save every five minutes,
// the history never surviving a restart.
func TestUnwritablePathStopsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-mounted", "history.json")
	if _, err := New(Options{Path: path}); err == nil || !strings.Contains(err.Error(), "history_path") {
		t.Fatalf("history_path %s: err %v, want one naming history_path", path, err)
	}
	if os.Geteuid() != 0 { // root writes into a read-only folder
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if _, err := New(Options{Path: filepath.Join(dir, "history.json")}); err == nil || !strings.Contains(err.Error(), "history_path") {
			t.Fatalf("read-only folder: err %v, want one naming history_path", err)
		}
	}
}

// TestClockStepsBack: a wall clock stepped forward and then back (NTP
// correcting a wrong time) must not cost the live points until it catches
// up; the points timed by the clock that ran ahead go instead.
func TestClockStepsBack(t *testing.T) {
	h, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	window := func(at time.Time) {
		w := windowstats.WindowView{Start: at, Seconds: 10, Count: 100, QPS: 10, P99: 0.05}
		h.Baseline("resnet", "1", &w)
	}
	for m := range 10 {
		window(t0.Add(time.Duration(m) * time.Minute))
	}
	for m := range 5 { // an hour ahead
		window(t0.Add(time.Hour + time.Duration(10+m)*time.Minute))
	}
	for m := range 10 { // back on time
		window(t0.Add(time.Duration(10+m) * time.Minute))
	}
	pts := h.s[key("resnet", "1")].Points
	var got []int64
	for _, p := range pts {
		got = append(got, (p.T-t0.Unix())/60)
	}
	want := make([]int64, 19) // minutes 0..18: the 19th is still being filled
	for i := range want {
		want[i] = int64(i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("points at minutes %v, want %v", got, want)
	}
}

// TestPartialWindowLoadUnknown: a window that began before its series (the
// sidecar restarted at the afternoon peak) counts a fraction of the
// traffic. Taken as the load, it put the band of a model whose latency
// rises with load under the normal peak P99; the load is unknown instead.
func TestPartialWindowLoadUnknown(t *testing.T) {
	h, err := New(Options{Speedup: 60})
	if err != nil {
		t.Fatal(err)
	}
	feed(h, 0, 50*60, 1)
	i := 50*60 + 13*60 // 15:00 on the third day, history time
	real := t0.Add(time.Duration(i) * time.Second)
	q := loadAt(t0.Add(time.Duration(i) * time.Minute))
	w := windowstats.WindowView{Start: real, Seconds: 1, Partial: true, Count: int64(q / 10), QPS: q / 10, P99: p99At(q, i)}
	exp, up, ok := h.Baseline("resnet", "1", &w)
	if !ok {
		t.Fatal("no band after 50 hours")
	}
	if w.P99 > up {
		t.Errorf("peak P99 %.4f over the band's upper %.4f (expected %.4f) in a partial window", w.P99, up, exp)
	}
}

package gpu

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// t0 is the fake clock's start; any fixed instant does.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is moved by hand; its ticker delivers what the test sends.
type fakeClock struct {
	mu       sync.Mutex
	t        time.Time
	tick     chan time.Time
	interval []time.Duration // what each ticker was asked for
	stopped  bool
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0, tick: make(chan time.Time)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) ticker(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.interval = append(c.interval, d)
	return c.tick, func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
	}
}

// fakeCollector returns the samples queued by the test, or empty ones.
type fakeCollector struct {
	mu     sync.Mutex
	devs   []DeviceInfo
	next   [][]Sample
	calls  []time.Time
	closed bool
}

func (f *fakeCollector) devices() []DeviceInfo { return f.devs }

func (f *fakeCollector) collect(now time.Time) ([]Sample, []readError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, now)
	if len(f.next) > 0 {
		s := f.next[0]
		f.next = f.next[1:]
		return s, nil
	}
	return make([]Sample, len(f.devs)), nil
}

func (f *fakeCollector) close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

// logBuffer collects log lines, safe for the sampler goroutine.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func testLogger(lb *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// series returns the set's samples as "name{labels} value" lines, without
// comments.
func series(set *metrics.Set) []string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	var out []string
	for l := range strings.SplitSeq(b.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// hasSeries reports whether set has the series line (name and labels, then
// value).
func hasSeries(set *metrics.Set, line string) bool {
	for _, l := range series(set) {
		if l == line {
			return true
		}
	}
	return false
}

func seriesWithPrefix(set *metrics.Set, prefix string) []string {
	var out []string
	for _, l := range series(set) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func f64(v float64) *float64 { return &v }
func u64(v uint64) *uint64   { return &v }

func mustOptions(t *testing.T, o Options) Options {
	t.Helper()
	o, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

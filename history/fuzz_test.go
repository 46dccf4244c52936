package history

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/windowstats"
)

// FuzzLoad holds the history file's loader to any bytes: a file cut short
// by a crash, edited by hand or from another version either fails New with
// an error or loads a history that keeps the invariants the rest of the
// package relies on, and fitting from it neither panics nor gives a band
// that is not a number.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"version":1,"series":{"m\u00001":{"points":[{"t":1772409600,"p":0.04,"q":100},{"t":1772409660,"p":0.05,"q":120}]}},"epoch":"2026-03-02T00:00:00Z"}`))
	f.Add([]byte(`{"version":1,"series":{"m\u00001":{"points":[{"t":5,"p":0.04,"q":1},{"t":5,"p":-1,"q":-3},{"t":2,"p":0,"q":1e308},{"t":9223372036854775807,"p":1e308,"q":0}]}}}`))
	f.Add([]byte(`{"version":1,"series":{"a":null,"b":{"points":null}}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"series":{"m\u00001":{"points":[{"t":1772409600,"p":0.04`))
	// Two and a half days of a daily pattern, a point per half hour, out of
	// order and with duplicates: enough for a daily fit once sorted.
	pts := `[`
	for i := 120; i >= 0; i-- {
		t := 1772409600 + int64(i)*1800
		p := 0.04 * (1 + 0.5*math.Sin(float64(i)*2*math.Pi/48))
		if i%2 == 0 {
			t -= 1800
		}
		if i != 120 {
			pts += ","
		}
		pts += `{"t":` + itoa(t) + `,"p":` + ftoa(p) + `,"q":100}`
	}
	f.Add([]byte(`{"version":1,"series":{"m\u00001":{"points":` + pts + `]}}}`))

	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "history.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		h, err := New(Options{Path: path, MaxModels: 4})
		if err != nil {
			return
		}
		max := int(h.o.Span / h.o.Resolution)
		if len(h.s) > h.o.MaxModels {
			t.Fatalf("%d models loaded, at most %d", len(h.s), h.o.MaxModels)
		}
		for k, s := range h.s {
			if len(s.Points) > max {
				t.Fatalf("%q: %d points, at most %d", k, len(s.Points), max)
			}
			for i, p := range s.Points {
				if !(p.P99 > 0) || math.IsInf(p.P99, 0) || !(p.QPS >= 0) || math.IsInf(p.QPS, 0) {
					t.Fatalf("%q: point %d %+v: P99 must be positive and QPS not negative, both finite", k, i, p)
				}
				if i > 0 && p.T <= s.Points[i-1].T {
					t.Fatalf("%q: point %d at %d after %d: not in time order", k, i, p.T, s.Points[i-1].T)
				}
				if s.Points[len(s.Points)-1].T-p.T >= int64(h.o.Span/time.Second) {
					t.Fatalf("%q: point %d at %d, over the span before the last at %d", k, i, p.T, s.Points[len(s.Points)-1].T)
				}
			}
		}
		// A window just after each model's last point fits it.
		for k, s := range h.s {
			var at time.Time
			if n := len(s.Points); n > 0 {
				at = time.Unix(s.Points[n-1].T, 0).Add(h.o.Resolution)
			} else {
				at = time.Unix(1772409600, 0)
			}
			model, version := splitKey(k)
			w := windowstats.WindowView{Start: at, Seconds: 1, Count: 100, QPS: 100, P99: 0.05}
			exp, up, ok := h.Baseline(model, version, &w)
			if ok && (!(exp > 0) || !(up >= exp) || math.IsInf(up, 0)) {
				t.Fatalf("%q: band expected %g upper %g", k, exp, up)
			}
		}
	})
}

func splitKey(k string) (string, string) {
	for i := range len(k) {
		if k[i] == 0 {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TestLoadKeepsUsablePoints: what the loader drops from a damaged file, and
// that a point from the future no longer holds back the live ones.
func TestLoadKeepsUsablePoints(t *testing.T) {
	now := time.Now().Unix() / 60 * 60
	tests := []struct {
		name   string
		points string
		want   []int64 // times kept, minutes before now
	}{
		{"in order", `{"t":%d,"p":0.04,"q":1},{"t":%d,"p":0.05,"q":2}`, []int64{2, 1}},
		{"out of order and repeated", `{"t":%d,"p":0.04,"q":1},{"t":%d,"p":0.05,"q":2},{"t":%d,"p":0.06,"q":3}`, []int64{3, 2}},
		{"not positive, negative load", `{"t":%d,"p":0,"q":1},{"t":%d,"p":0.05,"q":-2},{"t":%d,"p":-0.1,"q":3}`, nil},
		{"from the future", `{"t":%d,"p":0.04,"q":1},{"t":%d,"p":0.05,"q":2}`, []int64{5}},
		{"older than the span before the last", `{"t":%d,"p":0.04,"q":1},{"t":%d,"p":0.05,"q":2}`, []int64{1}},
	}
	times := map[string][]int64{
		"in order":                            {now - 120, now - 60},
		"out of order and repeated":           {now - 120, now - 180, now - 120},
		"not positive, negative load":         {now - 180, now - 120, now - 60},
		"from the future":                     {now - 300, now + 3600},
		"older than the span before the last": {now - 15*86400, now - 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := make([]any, 0, 3)
			for _, v := range times[tt.name] {
				args = append(args, v)
			}
			body := fmt.Sprintf(`{"version":1,"series":{"m\u00001":{"points":[`+tt.points+`]}}}`, args...)
			path := filepath.Join(t.TempDir(), "history.json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			h, err := New(Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, p := range h.s[key("m", "1")].Points {
				got = append(got, (now-p.T)/60)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("kept %v minutes before now, want %v", got, tt.want)
			}
			// A live window after the file's points is recorded.
			w := windowstats.WindowView{Start: time.Unix(now, 0).Add(2 * time.Minute), Seconds: 1, Count: 10, QPS: 10, P99: 0.07}
			h.Baseline("m", "1", &w)
			w.Start = w.Start.Add(time.Minute) // the next step flushes the first
			h.Baseline("m", "1", &w)
			if n := h.Len("m", "1"); n != len(tt.want)+1 {
				t.Fatalf("%d points after a live window, want %d", n, len(tt.want)+1)
			}
		})
	}
}

package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSeries writes days of one-minute NAB rows (and load rows) with a
// +100% burst of 10 minutes at the end of the last day.
func writeSeries(t *testing.T, dir, name string, days int) {
	t.Helper()
	var v, q strings.Builder
	v.WriteString("timestamp,value\n")
	q.WriteString("timestamp,qps\n")
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	n := days * 1440
	for i := range n {
		ts := t0.Add(time.Duration(i) * time.Minute).Format(time.DateTime)
		ld := 0.5 + 0.4*math.Sin(2*math.Pi*float64(i%1440)/1440)
		lat := 50 * (1 + ld*ld) * (1 + 0.03*math.Sin(float64(i)*1.7))
		if i >= n-120 && i < n-110 {
			lat *= 2
		}
		fmt.Fprintf(&v, "%s,%.3f\n", ts, lat)
		fmt.Fprintf(&q, "%s,%.1f\n", ts, 500*ld)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".csv"), []byte(v.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".load.csv"), []byte(q.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDetectCommand(t *testing.T) {
	dir := t.TempDir()
	writeSeries(t, dir, "m", 4)
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"one file to stdout", []string{"--load", filepath.Join(dir, "m.load.csv"), filepath.Join(dir, "m.csv")}, ""},
		{"a folder", []string{"--dir", dir, "--out-dir", filepath.Join(dir, "out")}, ""},
		{"missing file", []string{filepath.Join(dir, "nope.csv")}, "no such file"},
		{"bad option names the field", []string{"--min-excess", "-1", filepath.Join(dir, "m.csv")}, "min_excess"},
		{"dir without out-dir", []string{"--dir", dir}, "--out-dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runDetect(tc.args, &out, &errb)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			text := out.String()
			if tc.args[0] == "--dir" {
				b, err := os.ReadFile(filepath.Join(dir, "out", "m.csv"))
				if err != nil {
					t.Fatal(err)
				}
				text = string(b)
			}
			lines := strings.Split(strings.TrimSpace(text), "\n")
			if lines[0] != "timestamp,value,expected,lower,upper,anomaly_score,alert,kind" {
				t.Fatalf("header %q", lines[0])
			}
			if len(lines) != 4*1440+1 {
				t.Fatalf("%d lines, want %d", len(lines), 4*1440+1)
			}
			// The burst near the end alerts, as a burst.
			alerts := 0
			for _, l := range lines[len(lines)-125 : len(lines)-105] {
				if strings.HasSuffix(l, ",1,burst") {
					alerts++
				}
			}
			if alerts == 0 {
				t.Errorf("the burst did not alert: %s", strings.Join(lines[len(lines)-125:len(lines)-105], "\n"))
			}
		})
	}
}

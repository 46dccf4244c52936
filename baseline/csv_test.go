package baseline

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestReadSeries(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		err      string
	}{
		{"nab with header", "timestamp,value\n2026-03-02 00:00:00,53.083\n2026-03-02 00:01:00,43.042\n", 2, ""},
		{"no header, rfc3339", "2026-03-02T00:00:00Z,1\n2026-03-02T00:01:00Z,2\n", 2, ""},
		{"unix seconds", "t,v\n1700000000,1\n1700000060,2.5\n", 2, ""},
		{"bad value names the line", "timestamp,value\n2026-03-02 00:00:00,x\n", 0, "line 2"},
		{"bad timestamp names the line", "timestamp,value\n2026-03-02 00:00:00,1\nyesterday,2\n", 0, "line 3"},
		{"out of order", "2026-03-02 00:01:00,1\n2026-03-02 00:00:00,2\n", 0, "not after"},
		{"one field", "timestamp,value\n2026-03-02 00:00:00\n", 0, "fields"},
		{"empty", "", 0, "no rows"},
		// A spreadsheet's byte-order mark: the first row is a row, not a header.
		{"byte-order mark, no header", "\ufeff2026-03-02 00:00:00,1\n2026-03-02 00:01:00,2\n", 2, ""},
		{"byte-order mark and header", "\ufefftimestamp,value\n2026-03-02 00:00:00,1\n", 1, ""},
		// A first row whose time parses is data: its bad value is reported,
		// not taken for a header and lost.
		{"bad value on the first row names it", "2026-03-02 00:00:00,x\n2026-03-02 00:01:00,2\n", 0, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts, err := ReadSeries(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pts) != tc.n {
				t.Fatalf("%d points, want %d", len(pts), tc.n)
			}
			if !math.IsNaN(pts[0].Q) {
				t.Errorf("Q %v, want NaN", pts[0].Q)
			}
		})
	}
}

func TestJoinLoadAndWrite(t *testing.T) {
	pts, err := ReadSeries(strings.NewReader("timestamp,value\n2026-03-02 00:00:00,50\n2026-03-02 00:01:00,60\n2026-03-02 00:02:00,70\n"))
	if err != nil {
		t.Fatal(err)
	}
	load, err := ReadSeries(strings.NewReader("timestamp,qps\n2026-03-02 00:00:00,100\n2026-03-02 00:02:00,300\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := JoinLoad(pts, load); n != 2 {
		t.Fatalf("joined %d, want 2", n)
	}
	if pts[0].Q != 100 || !math.IsNaN(pts[1].Q) || pts[2].Q != 300 {
		t.Fatalf("Q %v %v %v", pts[0].Q, pts[1].Q, pts[2].Q)
	}
	var b bytes.Buffer
	if err := WriteHeader(&b); err != nil {
		t.Fatal(err)
	}
	o := Output{T: pts[0].T, Value: 50, Expected: 48, Lower: 40, Upper: 60, Score: 0.7, Alert: true,
		Kind: KindPeriodic, Period: 30 * time.Minute}
	if err := WriteOutput(&b, o); err != nil {
		t.Fatal(err)
	}
	want := "timestamp,value,expected,lower,upper,anomaly_score,alert,kind\n" +
		"2026-03-02 00:00:00,50.000,48.000,40.000,60.000,0.700,1,periodic/30m\n"
	if b.String() != want {
		t.Fatalf("got\n%swant\n%s", b.String(), want)
	}
}

// FuzzReadSeries: any input either fails with an error or yields points in
// strictly increasing time order.
func FuzzReadSeries(f *testing.F) {
	f.Add("timestamp,value\n2026-03-02 00:00:00,53.083\n2026-03-02 00:01:00,43.042\n")
	f.Add("1700000000,1\n1700000060,NaN\n")
	f.Add("\"a,b\",1\n")
	f.Add("2026-03-02T00:00:00+02:00,1e308\n")
	f.Fuzz(func(t *testing.T, in string) {
		pts, err := ReadSeries(strings.NewReader(in))
		if err != nil {
			return
		}
		if len(pts) == 0 {
			t.Fatal("no points and no error")
		}
		for i := 1; i < len(pts); i++ {
			if !pts[i].T.After(pts[i-1].T) {
				t.Fatalf("row %d not after row %d", i, i-1)
			}
		}
		// The detector must take whatever the reader accepts.
		d, err := NewDetector(DetectorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pts {
			o := d.Step(p)
			if o.Score < 0 || o.Score > 1 || math.IsNaN(o.Score) {
				t.Fatalf("score %v", o.Score)
			}
		}
	})
}

package inferapi

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

func TestParseServerTiming(t *testing.T) {
	st := func(name string, d time.Duration) record.Stage {
		return record.Stage{Name: name, Duration: d, Source: StageSourceServerTiming}
	}
	many := strings.Repeat("s;dur=1,", 20)
	var sixteen []record.Stage
	for range maxStages {
		sixteen = append(sixteen, st("s", time.Millisecond))
	}
	tests := []struct {
		name   string
		values []string
		want   []record.Stage
	}{
		{"basic", []string{`preprocess;dur=12.3;desc="x", infer;dur=4`}, []record.Stage{st("preprocess", 12300*time.Microsecond), st("infer", 4*time.Millisecond)}},
		{"several values", []string{"a;dur=1", "b;dur=2, c;dur=3"}, []record.Stage{st("a", time.Millisecond), st("b", 2*time.Millisecond), st("c", 3*time.Millisecond)}},
		{"no dur skipped", []string{"cache;desc=hit, db;dur=0.5, miss"}, []record.Stage{st("db", 500*time.Microsecond)}},
		{"dur anywhere, any case, spaces", []string{`x ; desc="a;b,c" ; DUR = 7 `}, []record.Stage{st("x", 7*time.Millisecond)}},
		{"quoted dur", []string{`q;dur="2.5"`}, []record.Stage{st("q", 2500*time.Microsecond)}},
		{"quoted dur with an escape", []string{`q;dur="\2"`}, []record.Stage{st("q", 2*time.Millisecond)}},
		{"first dur wins", []string{"d;dur=1;dur=2"}, []record.Stage{st("d", time.Millisecond)}},
		{"escaped quote in desc", []string{`e;desc="say \"hi\", ok";dur=1, f;dur=2`}, []record.Stage{st("e", time.Millisecond), st("f", 2*time.Millisecond)}},
		{"name sanitised", []string{"gpu/infer:step 1;dur=1"}, []record.Stage{st("gpu_infer_step_1", time.Millisecond)}},
		{"name with spaces inside", []string{"a b;dur=1"}, []record.Stage{st("a_b", time.Millisecond)}},
		{"name cut", []string{strings.Repeat("n", 40) + ";dur=1"}, []record.Stage{st(strings.Repeat("n", 32), time.Millisecond)}},
		{"non-ASCII name", []string{"étape;dur=1"}, []record.Stage{st("__tape", time.Millisecond)}},
		{"at most 16", []string{many, "late;dur=1"}, sixteen},
		{"bad durations", []string{"a;dur=, b;dur=x, c;dur=-1, d;dur=NaN, e;dur=Inf, f;dur=1e300, g;dur"}, nil},
		{"empty names and entries", []string{",, ;dur=1,;dur=2, ,"}, nil},
		{"unterminated quote", []string{`a;dur=1;desc="oops, b;dur=2`}, []record.Stage{st("a", time.Millisecond)}},
		{"trailing backslash", []string{`a;desc="\`}, nil},
		{"empty", nil, nil},
		{"zero", []string{"z;dur=0"}, []record.Stage{st("z", 0)}},
	}
	for _, tt := range tests {
		got := ParseServerTiming(tt.values, nil)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: ParseServerTiming(%q)\n got %+v\nwant %+v", tt.name, tt.values, got, tt.want)
		}
	}
}

func TestParseServerTimingAppends(t *testing.T) {
	prior := []record.Stage{{Name: "queue", Duration: time.Second, Source: "other"}}
	got := ParseServerTiming([]string{"infer;dur=2"}, prior)
	want := []record.Stage{prior[0], {Name: "infer", Duration: 2 * time.Millisecond, Source: StageSourceServerTiming}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestParseServerTimingBoundAcrossCalls: the bound holds per record, however
// a front hands the header over: the HTTP/2 plane parses each Server-Timing
// field on its own, and a gRPC call has headers and trailers. Stages of
// other sources do not count against it.
func TestParseServerTimingBoundAcrossCalls(t *testing.T) {
	stages := []record.Stage{{Name: "queue", Duration: time.Second, Source: "other"}}
	for range 1000 {
		stages = ParseServerTiming([]string{"a;dur=1, b;dur=2, c;dur=3"}, stages)
	}
	n := 0
	for _, s := range stages {
		if s.Source == StageSourceServerTiming {
			n++
		}
	}
	if n != maxStages || stages[0].Source != "other" || len(stages) != maxStages+1 {
		t.Errorf("%d stages, %d from Server-Timing; want %d and the other source's first", len(stages), n, maxStages)
	}
}

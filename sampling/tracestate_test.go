package sampling

import (
	"slices"
	"strings"
	"testing"
)

func TestParseTraceState(t *testing.T) {
	long := strings.Repeat("a", 256)
	tests := []struct {
		in           string
		valid, clean bool
		th           string // th as parsed, "" when absent or invalid
	}{
		{"", true, true, ""},
		{"rojo=00f067aa0ba902b7", true, true, ""},
		{"rojo=1,congo=t61rcWkgMzE", true, true, ""},
		{"rojo=1 , congo=2\t", true, true, ""},
		{",,rojo=1,,", true, true, ""},
		{"rojo=1, ,congo=2", true, false, ""},
		{"ot=th:8", true, true, "80000000000000"},
		{"ot=th:8;rv:0123456789abcd,x=1", true, true, "80000000000000"},
		{"ot=foo:bar;th:c", true, true, "c0000000000000"},
		{"tenant@vendor=1", true, true, ""},
		{"0tenant@v=1", true, true, ""},
		{"a/b*c_d-e=1", true, true, ""},
		{"rojo= leading space kept", true, true, ""},
		{long + "=x", true, true, ""},
		{"k=" + long, true, true, ""},
		{"a" + long + "=x", false, false, ""}, // key of 257
		{"k=a" + long, false, false, ""},      // value of 257
		{"Rojo=1", false, false, ""},          // upper case key
		// Level 2 keys (https://www.w3.org/TR/trace-context-2/#key): a
		// digit first, '@' anywhere, no tenant/system limits.
		{"0rojo=1", true, true, ""},
		{"t@vendorvendorvendor=1", true, true, ""},
		{"t@v@w=1", true, true, ""},
		{"rojo@=1", true, true, ""},
		{"@rojo=1", false, false, ""},                               // '@' first
		{"_rojo=1", false, false, ""},                               // '_' first
		{"rojo.x=1", false, false, ""},                              // '.' is no keychar
		{"rojo", false, false, ""},                                  // no =
		{"rojo=", false, false, ""},                                 // empty value
		{"rojo=a=b", false, false, ""},                              // = in value
		{"rojo=a\x01", false, false, ""},                            // control character
		{"rojo=é", false, false, ""},                                // non-ASCII
		{"rojo =1", false, false, ""},                               // space before =
		{"rojo=1,rojo=2", false, false, ""},                         // duplicate
		{strings.Repeat("a=1,", 1) + members(32), false, false, ""}, // 33 members
		{members(32), true, true, ""},
		{"ot=th:8;th:c", true, true, ""},          // duplicate sub-key: ot unusable, list valid
		{"ot=th:8 x", true, true, ""},             // bad ot value
		{"ot=th:", true, true, ""},                // empty th
		{"ot=th:123456789abcdef", true, true, ""}, // 15 digits
	}
	for _, tt := range tests {
		ts := parseTraceState(tt.in)
		if ts.valid != tt.valid || ts.valid && ts.clean != tt.clean {
			t.Errorf("parse(%q): valid %v clean %v, want %v %v", tt.in, ts.valid, ts.clean, tt.valid, tt.clean)
		}
		th := ""
		if ts.thOK && ts.otOK {
			th = encodeTH(ts.th)
			th += strings.Repeat("0", 14-len(th))
		}
		if th != tt.th {
			t.Errorf("parse(%q): th %q, want %q", tt.in, th, tt.th)
		}
	}
}

// members makes n distinct valid members.
func members(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i))
		b.WriteString("=v")
	}
	return b.String()
}

func TestRewriteTraceState(t *testing.T) {
	tests := []struct {
		in, th, want string
	}{
		{"", "c", "ot=th:c"},
		{"rojo=1,congo=2", "c", "ot=th:c,rojo=1,congo=2"},
		{"rojo=1,ot=th:8;rv:0123456789abcd,congo=2", "c", "ot=th:c;rv:0123456789abcd,rojo=1,congo=2"},
		{"rojo=1,ot=foo:1;th:8;bar:2", "e666", "ot=th:e666;foo:1;bar:2,rojo=1"},
		{"rojo=1,ot=th:8", "", "rojo=1"},
		{"rojo=1,ot=th:8;th:9", "c", "ot=th:c,rojo=1"}, // unusable ot replaced
		{"rojo=1,ot=th:8;th:9", "", "rojo=1"},
		{"rojo=1 ,\t, congo=2", "", "rojo=1,congo=2"},
		{members(32), "c", "ot=th:c," + members(31)}, // truncated from the end
		{"ot=th:8;x:" + strings.Repeat("y", 248), "fd70a", "ot=th:fd70a"},
	}
	for _, tt := range tests {
		ts := parseTraceState(tt.in)
		if !ts.valid {
			t.Fatalf("test input %q does not parse", tt.in)
		}
		got := rewriteTraceState(tt.in, &ts, tt.th)
		if got != tt.want {
			t.Errorf("rewrite(%q, th=%q) = %q, want %q", tt.in, tt.th, got, tt.want)
		}
		if out := parseTraceState(got); !out.valid || !out.clean {
			t.Errorf("rewrite(%q) produced an invalid tracestate %q", tt.in, got)
		}
		if n := countOT(got); n > 1 {
			t.Errorf("rewrite(%q) duplicated ot: %q", tt.in, got)
		}
	}
}

// FuzzTraceState: whatever the incoming tracestate, parsing and Head never
// panic, and what the sampler propagates is a clean W3C list with at most
// one ot member whose th, if any, is the decision's probability; other
// vendors' members survive in order.
func FuzzTraceState(f *testing.F) {
	for _, s := range []string{
		"", "rojo=1", "ot=th:8", "rojo=1,ot=th:8;rv:0123456789abcd,congo=2", "ot=th:8;th:c",
		"a=1, ,b=2", "t@v=x", "ot=th:", "ot=;", "ot=th:0", ",,,", "ot=th:ffffffffffffff;rv:ffffffffffffff",
		members(33), "ot=" + strings.Repeat("a:b;", 70),
	} {
		f.Add(s, true, uint64(0))
		f.Add(s, false, ^uint64(0))
	}
	f.Fuzz(func(t *testing.T, in string, sampled bool, rnd uint64) {
		ts := parseTraceState(in)
		var id [16]byte
		for i := range 8 {
			id[8+i] = byte(rnd >> (56 - 8*i))
		}
		s := newSamplerNoFail()
		d := s.Head(Key{}, id, Parent{Present: true, Sampled: sampled, TraceState: in})
		if d.Sampled != sampled {
			t.Fatalf("parent decision %v not honoured", sampled)
		}
		if !ts.valid {
			if d.TraceState != "" {
				t.Fatalf("invalid tracestate %q propagated as %q", in, d.TraceState)
			}
			return
		}
		checkOut(t, in, d.TraceState)
		out := parseTraceState(d.TraceState)
		if d.Probability > 0 {
			if !sampled || !out.thOK || thresholdProbability(out.th) != d.Probability {
				t.Fatalf("in %q: probability %v but propagated %q", in, d.Probability, d.TraceState)
			}
		} else if out.thSet {
			t.Fatalf("in %q: th propagated without a probability: %q", in, d.TraceState)
		}
		for _, th := range []string{"", "c", "fd70a"} {
			got := rewriteTraceState(in, &ts, th)
			checkOut(t, in, got)
			o := parseTraceState(got)
			if th == "" && o.thSet || th != "" && (!o.thOK || encodeTH(o.th) != th) {
				t.Fatalf("rewrite(%q, %q) = %q: wrong th", in, th, got)
			}
		}
		if c := canonicalTraceState(in); parseTraceState(c).clean != true {
			t.Fatalf("canonical form %q of %q is not clean", c, in)
		}
	})
}

func newSamplerNoFail() *Sampler {
	s, err := New(Config{})
	if err != nil {
		panic(err)
	}
	return s
}

// checkOut verifies an output tracestate against its valid input.
func checkOut(t *testing.T, in, out string) {
	t.Helper()
	o := parseTraceState(out)
	if !o.valid || !o.clean {
		t.Fatalf("from %q: output %q is not a clean tracestate", in, out)
	}
	if n := countOT(out); n > 1 {
		t.Fatalf("from %q: output %q has two ot members", in, out)
	}
	// Non-ot members of the input, in order, must be a prefix-preserving
	// subsequence of the output's (only truncation at 32 drops any).
	var want, got []string
	for m := range strings.SplitSeq(in, ",") {
		if m = trimOWS(m); m != "" && !strings.HasPrefix(m, "ot=") {
			want = append(want, m)
		}
	}
	for m := range strings.SplitSeq(out, ",") {
		if m = trimOWS(m); m != "" && !strings.HasPrefix(m, "ot=") {
			got = append(got, m)
		}
	}
	if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) || len(got) < len(want) && len(got)+1 < maxMembers {
		t.Fatalf("from %q: other members not preserved in %q", in, out)
	}
}

// countOT counts the ot members of a tracestate.
func countOT(s string) int {
	n := 0
	for m := range strings.SplitSeq(s, ",") {
		if strings.HasPrefix(trimOWS(m), "ot=") {
			n++
		}
	}
	return n
}

package callcap

import (
	"net/http"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

func TestPrefixKeepsWithinMaxAndBudget(t *testing.T) {
	tests := []struct {
		name          string
		max           int
		budget        int64
		writes        []string
		want          string
		truncated     bool
		leftAfterKeep int64
	}{
		{"fits", 16, 100, []string{"abc", "def"}, "abcdef", false, 94},
		{"cut at max", 4, 100, []string{"abc", "def"}, "abcd", true, 96},
		{"budget runs out", 16, 5, []string{"abc", "def"}, "abc", true, 2},
		{"nothing after the budget refused", 16, 4, []string{"abc", "de", "f"}, "abc", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(tt.budget)
			p := NewPrefix(tt.max, b)
			for _, w := range tt.writes {
				p.Write([]byte(w))
			}
			if string(p.Buf) != tt.want || p.Truncated != tt.truncated || b.Left() != tt.leftAfterKeep {
				t.Fatalf("kept %q truncated %v left %d; want %q %v %d", p.Buf, p.Truncated, b.Left(), tt.want, tt.truncated, tt.leftAfterKeep)
			}
			p.Release()
			p.Release()
			if b.Left() != tt.budget {
				t.Fatalf("after release %d left of %d", b.Left(), tt.budget)
			}
		})
	}
	var nilPrefix *Prefix
	nilPrefix.Write([]byte("x")) // a front without capture passes nil
	nilPrefix.Release()
}

func TestReservationAndSampler(t *testing.T) {
	b := NewBudget(10)
	r := NewReservation(b)
	if !r.Take(6) || r.Take(6) || b.Left() != 4 {
		t.Fatalf("take: left %d", b.Left())
	}
	r.Release()
	r.Release()
	if b.Left() != 10 {
		t.Fatalf("release: left %d", b.Left())
	}
	for _, tt := range []struct {
		share float64
		of100 int
	}{{0, 0}, {0.01, 1}, {0.25, 25}, {1, 100}} {
		s, n := NewSampler(tt.share), 0
		for range 100 {
			if s.Sample() {
				n++
			}
		}
		if n != tt.of100 {
			t.Errorf("share %v sampled %d of 100", tt.share, n)
		}
	}
}

func TestDeferredDecodes(t *testing.T) {
	msg, err := proto.Marshal(&inference.ModelInferRequest{ModelName: "m"})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBudget(100)
	res := NewReservation(b)
	res.Take(int64(len(msg)))
	var c record.Call
	GRPCDecode(msg, res)(&c)
	if !c.DecodeRan || c.DecodeFail || b.Left() != 100 {
		t.Fatalf("gRPC decode: ran %v fail %v left %d", c.DecodeRan, c.DecodeFail, b.Left())
	}
	c = record.Call{}
	GRPCDecode([]byte{0xff}, nil)(&c)
	if !c.DecodeFail {
		t.Fatalf("a malformed message decoded")
	}

	rt := inferapi.HTTPRoute("POST", "/v2/models/m/infer", "")
	req := NewPrefix(1024, b)
	req.Write([]byte(`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}`))
	hdr := DecodeHeaders(func(k string) string { return map[string]string{"content-type": "application/json"}[k] })
	c = record.Call{Code: "200"}
	HTTPDecode(rt, hdr, req, http.Header{}, nil, true)(&c)
	if !c.DecodeRan || c.DecodeFail || c.BatchSize != 2 || c.InputCount != 1 || b.Left() != 100 {
		t.Fatalf("HTTP decode: %+v, left %d", c, b.Left())
	}
	// Outside the decode sample: the same fields from the bracket scan, no
	// decode phase, and numbers inside data not checked.
	for _, tc := range []struct {
		body     string
		full     bool
		wantFail bool
	}{
		{`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}`, false, false},
		{`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4.]}]}`, false, false},
		{`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4.]}]}`, true, true},
		{`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]`, false, true},
	} {
		req := NewPrefix(1024, b)
		req.Write([]byte(tc.body))
		c = record.Call{Code: "200"}
		HTTPDecode(rt, hdr, req, http.Header{}, nil, tc.full)(&c)
		if c.DecodeRan != tc.full || c.DecodeFail != tc.wantFail || c.BatchSize != 2 || c.InputCount != 1 || b.Left() != 100 {
			t.Fatalf("HTTP decode of %s (full %v): %+v, left %d", tc.body, tc.full, c, b.Left())
		}
	}
	if hdr.Get("Content-Type") != "application/json" || len(DecodeHeaders(func(string) string { return "" })) != 0 {
		t.Fatalf("DecodeHeaders: %v", hdr)
	}
}

// TestDecodeHeaders: every header the decoders read is kept, from a lookup
// by lower-case name (Envoy's and HTTP/2's spelling), and nothing else.
func TestDecodeHeaders(t *testing.T) {
	in := map[string]string{
		"content-type":                    "application/json",
		"content-encoding":                "gzip",
		"inference-header-content-length": "12",
		"authorization":                   "secret",
	}
	got := DecodeHeaders(func(k string) string { return in[k] })
	want := http.Header{
		"Content-Type":                    {"application/json"},
		"Content-Encoding":                {"gzip"},
		"Inference-Header-Content-Length": {"12"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeHeaders: %v, want %v", got, want)
	}
	// And the decoders, given them, leave a compressed body alone.
	rt := inferapi.HTTPRoute("POST", "/v2/models/m/infer", "")
	req := NewPrefix(64, NewBudget(64))
	req.Write([]byte{0x1f, 0x8b, 8, 0})
	c := record.Call{Code: "200"}
	HTTPDecode(rt, got, req, got, nil, false)(&c)
	if c.DecodeFail {
		t.Fatalf("a gzip body counted as a decode failure")
	}
}

package record

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestPhases(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name           string
		c              Call
		upstream, xfer time.Duration
		upOK, xferOK   bool
	}{
		{"unary", Call{RequestEnd: 1 * ms, UpstreamStart: ms / 2, UpstreamSent: 2 * ms, FirstByte: 10 * ms, ResponseEnd: 12 * ms, End: 13 * ms}, 8 * ms, 2 * ms, true, true},
		{"stream answered before request ended", Call{RequestEnd: 20 * ms, UpstreamStart: 1 * ms, UpstreamSent: 20 * ms, FirstByte: 5 * ms, ResponseEnd: 30 * ms, End: 30 * ms}, 4 * ms, 25 * ms, true, true},
		{"no response", Call{RequestEnd: 1 * ms, UpstreamStart: ms, End: 2 * ms}, 0, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, ok := tt.c.Upstream()
			if up != tt.upstream || ok != tt.upOK {
				t.Errorf("Upstream() = %v, %v; want %v, %v", up, ok, tt.upstream, tt.upOK)
			}
			x, ok := tt.c.Transfer()
			if x != tt.xfer || ok != tt.xferOK {
				t.Errorf("Transfer() = %v, %v; want %v, %v", x, ok, tt.xfer, tt.xferOK)
			}
		})
	}
}

func TestTensorCap(t *testing.T) {
	var c Call
	for i := 0; i < MaxTensors+5; i++ {
		c.AddInput(Tensor{Name: "x"})
	}
	if len(c.Inputs) != MaxTensors || c.InputCount != MaxTensors+5 {
		t.Fatalf("kept %d, counted %d", len(c.Inputs), c.InputCount)
	}
}

func TestFailed(t *testing.T) {
	tests := []struct {
		c    Call
		want bool
	}{
		{Call{Protocol: ProtocolGRPC, Code: "OK"}, false},
		{Call{Protocol: ProtocolGRPC, Code: "UNAVAILABLE"}, true},
		{Call{Protocol: ProtocolHTTP, Code: "200"}, false},
		{Call{Protocol: ProtocolHTTP, Code: "404"}, false},
		{Call{Protocol: ProtocolHTTP, Code: "502", ErrorKind: ErrUpstreamUnavailable}, true},
		{Call{Protocol: ProtocolHTTP, Code: "200", ErrorKind: ErrDecode}, false},
		{Call{Protocol: ProtocolHTTP, Code: "200", LLM: &LLM{Streamed: true, FinishReason: "stop"}}, false},
		{Call{Protocol: ProtocolHTTP, Code: "200", LLM: &LLM{Streamed: true, Error: true, FinishReason: "error"}}, true},
	}
	for _, tt := range tests {
		if got := tt.c.Failed(); got != tt.want {
			t.Errorf("%+v: Failed() = %v", tt.c, got)
		}
	}
}

func TestPipelineRunsDeferredThenSinksAndDropsWhenFull(t *testing.T) {
	var seen atomic.Int64
	block := make(chan struct{})
	var drops atomic.Int64
	p := NewPipeline(2, SinkFunc(func(c *Call) {
		<-block
		if c.Model != "decoded" {
			t.Errorf("deferred work did not run before the sink")
		}
		seen.Add(1)
	}), func() { drops.Add(1) })
	mk := func() *Call {
		return &Call{Deferred: func(c *Call) { c.Model = "decoded" }}
	}
	accepted := 0
	for i := 0; i < 10; i++ {
		if p.Submit(mk()) {
			accepted++
		}
	}
	if p.Dropped() == 0 || drops.Load() != int64(p.Dropped()) {
		t.Fatalf("a full queue dropped %d, onDrop saw %d", p.Dropped(), drops.Load())
	}
	close(block)
	p.Close()
	if int(seen.Load()) != accepted {
		t.Fatalf("observed %d of %d accepted", seen.Load(), accepted)
	}
	if p.Submit(mk()) {
		t.Fatalf("Submit after Close accepted a record")
	}
}

func TestGRPCCodes(t *testing.T) {
	for n := -1; n <= 17; n++ {
		name := GRPCCodeName(n)
		m, ok := GRPCCodeNumber(name)
		switch {
		case n < 0 || n > 16:
			if name != "UNKNOWN" {
				t.Errorf("GRPCCodeName(%d) = %q, want UNKNOWN", n, name)
			}
		case !ok || m != n:
			t.Errorf("%d -> %q -> %d, %v", n, name, m, ok)
		}
	}
	if n, _ := GRPCCodeNumber("UNAVAILABLE"); n != 14 {
		t.Errorf("UNAVAILABLE = %d", n)
	}
}

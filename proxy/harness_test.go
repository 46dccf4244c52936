package proxy

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// harness runs the proxy in front of an upstream and collects its records.
type harness struct {
	t        testing.TB
	addr     string
	handler  *Handler
	server   *Server
	pipeline *record.Pipeline

	mu   sync.Mutex
	recs []*record.Call
	got  chan struct{}
}

func newHarness(t testing.TB, upstream string, grpc bool, tweak ...func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, got: make(chan struct{}, 1<<16)}
	h.pipeline = record.NewPipeline(1<<16, record.SinkFunc(func(c *record.Call) {
		h.mu.Lock()
		h.recs = append(h.recs, c)
		h.mu.Unlock()
		h.got <- struct{}{}
	}), nil)
	proto := UpstreamHTTP1
	if grpc {
		proto = UpstreamHTTP2
	}
	tr := NewTransport(TransportOptions{Protocol: proto, Addr: upstream})
	o := Options{Route: "test", Upstream: upstream, Transport: tr, Pipeline: h.pipeline,
		Logger: testLogger(t), MaxMessageBytes: 1<<31 - 1, CaptureBytes: 1 << 20,
		DecodeSample: 1, DecodeMaxBytes: 4 << 20, UpstreamRTT: tr.RTT}
	for _, f := range tweak {
		f(&o)
	}
	h.handler = NewHandler(o)
	l := Listener{Name: "test", Addr: "127.0.0.1:0", Handler: h.handler}
	if testDataPlane() == "frame" {
		l.HTTP1 = NewHTTP1Plane(h.handler)
		if grpc {
			f, err := NewFramePlane(h.handler, tr, upstream, 0)
			if err != nil {
				t.Fatal(err)
			}
			l.Frames = f
		}
	}
	h.server = NewServer(o.Logger, l)
	if err := h.server.Listen(); err != nil {
		t.Fatal(err)
	}
	h.addr = h.server.Addrs()[0].String()
	go h.server.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.server.Shutdown(ctx)
		h.pipeline.Close()
		tr.CloseIdleConnections()
	})
	return h
}

// testDataPlane is the data plane the tests run on: INFERWATCH_DATA_PLANE
// (frame or stdlib), as in the sidecar; CI runs the suite on both.
func testDataPlane() string {
	if v := os.Getenv("INFERWATCH_DATA_PLANE"); v != "" {
		return v
	}
	return "stdlib"
}

// waitRecords waits until n records arrived and returns them all.
func (h *harness) waitRecords(n int) []*record.Call {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		if len(h.recs) >= n {
			out := append([]*record.Call(nil), h.recs...)
			h.mu.Unlock()
			return out
		}
		h.mu.Unlock()
		select {
		case <-h.got:
		case <-deadline:
			h.t.Fatalf("waited for %d records, have %d", n, len(h.recs))
		}
	}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

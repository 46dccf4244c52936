package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

func TestUpstreamDownFailsFast(t *testing.T) {
	dead := listen(t)
	addr := dead.Addr().String()
	dead.Close() // nothing listens here now

	gh := newHarness(t, addr, true)
	start := time.Now()
	o := doCall(context.Background(), dial(t, gh.addr), "/inference.GRPCInferenceService/ModelInfer", nil, [][]byte{inferRequest("m", 4)})
	if o.code != codes.Unavailable || time.Since(start) > time.Second {
		t.Fatalf("gRPC to a dead upstream: %v %q after %v", o.code, o.message, time.Since(start))
	}
	hh := newHarness(t, addr, false)
	start = time.Now()
	res, err := http.Get("http://" + hh.addr + "/v2/models/m/ready")
	if err != nil || res.StatusCode != http.StatusBadGateway || time.Since(start) > time.Second {
		t.Fatalf("HTTP to a dead upstream: %v %v after %v", res, err, time.Since(start))
	}
	res.Body.Close()
	if r := gh.waitRecords(1)[0]; r.ErrorKind != record.ErrUpstreamUnavailable || r.Code != "UNAVAILABLE" {
		t.Errorf("gRPC record: %q %s", r.ErrorKind, r.Code)
	}
	if r := hh.waitRecords(1)[0]; r.ErrorKind != record.ErrUpstreamUnavailable || r.Code != "502" {
		t.Errorf("HTTP record: %q %s", r.ErrorKind, r.Code)
	}
}

// TestUpstreamKilledMidLoad kills the upstream under load: every call must
// end within a second, the proxy stays up, and calls succeed again once the
// upstream is back on the same address.
func TestUpstreamKilledMidLoad(t *testing.T) {
	l := listen(t)
	addr := l.Addr().String()
	serve := func(l net.Listener) *grpc.Server {
		s := grpc.NewServer()
		inference.RegisterGRPCInferenceServiceServer(s, kserveEcho{})
		go s.Serve(l)
		return s
	}
	up := serve(l)
	h := newHarness(t, addr, true)
	cc := dial(t, h.addr)

	var ok, unavailable, other, slow atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s := time.Now()
				o := doCall(ctx, cc, "/inference.GRPCInferenceService/ModelInfer", nil, [][]byte{inferRequest("m", 64)})
				cancel()
				if time.Since(s) > time.Second {
					slow.Add(1)
				}
				switch o.code {
				case codes.OK:
					ok.Add(1)
				case codes.Unavailable:
					unavailable.Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					other.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	up.Stop() // kill: connections closed, in-flight calls cut
	time.Sleep(500 * time.Millisecond)
	okBefore := ok.Load()
	if unavailable.Load() == 0 {
		t.Errorf("no UNAVAILABLE while the upstream was down")
	}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("rebind upstream: %v", err)
	}
	up = serve(l2)
	defer up.Stop()
	deadline := time.Now().Add(3 * time.Second)
	for ok.Load() == okBefore && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if ok.Load() == okBefore {
		t.Fatalf("no success after the upstream came back")
	}
	if slow.Load() > 0 || other.Load() > 0 {
		t.Errorf("%d calls took over 1 s, %d ended with a code other than OK/UNAVAILABLE", slow.Load(), other.Load())
	}
	t.Logf("ok=%d unavailable=%d", ok.Load(), unavailable.Load())
}

func TestDrainCompletesInFlight(t *testing.T) {
	up, _, stop := startGRPCUpstream(t)
	defer stop()
	h := newHarness(t, up, true)
	cc := dial(t, h.addr)
	const n = 10
	hold := newHold(t, "drain", n)
	var wg sync.WaitGroup
	codesGot := make(chan codes.Code, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := doCall(context.Background(), cc, "/acme.Echo/Slow", metadata.Pairs("x-hold", "drain"), [][]byte{[]byte("x")})
			codesGot <- o.code
		}()
	}
	// Every call is at the upstream, held there until released.
	hold.wait(t, n)
	if got := h.handler.InFlight(); got != n {
		t.Fatalf("in flight before drain: %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- h.server.Shutdown(ctx) }()
	// Shutdown waits for the held calls (a loaded machine may start it
	// late, never let it return early); then they are let go.
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with %d calls held in flight", err, n)
	case <-time.After(100 * time.Millisecond):
	}
	close(hold.release)
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wg.Wait()
	close(codesGot)
	for c := range codesGot {
		if c != codes.OK {
			t.Errorf("in-flight call ended %v during drain", c)
		}
	}
	if _, err := net.DialTimeout("tcp", h.addr, 200*time.Millisecond); err == nil {
		t.Errorf("still accepting after drain")
	}
}

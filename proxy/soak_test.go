package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestSoakMixed sends soakCalls calls of every kind — unary and streaming,
// 8 B to 1 MiB, KServe infer and unknown services, error statuses, metadata
// both ways — through the proxy on the plane under test
// (INFERWATCH_DATA_PLANE), each one also straight to the upstream, and
// checks that the client sees the same bytes, metadata and status both
// ways, and that the proxy recorded every call.
func TestSoakMixed(t *testing.T) {
	if testing.Short() {
		t.Skip("10^5 calls")
	}
	up, _, stop := startGRPCUpstream(t)
	defer stop()
	h := newHarness(t, up, true)
	direct, proxied := dial(t, up), dial(t, h.addr)
	n := soakCalls
	differ, first := soak(n, func(i int) error {
		method, md, in := soakCall(rand.New(rand.NewPCG(uint64(i), 7)))
		a := doCall(context.Background(), direct, method, md, in)
		b := doCall(context.Background(), proxied, method, md, in)
		if err := a.equal(b); err != nil {
			return fmt.Errorf("call %d %s: %w", i, method, err)
		}
		return nil
	})
	if differ > 0 {
		t.Errorf("%d of %d calls differed through the proxy (%s plane); first: %v", differ, n, testDataPlane(), first)
	}
	recs := h.waitRecords(n)
	if len(recs) != n {
		t.Errorf("%d records for %d calls", len(recs), n)
	}
	if dropped := h.pipeline.Dropped(); dropped > 0 {
		t.Errorf("%d records dropped", dropped)
	}
	t.Logf("%d calls through the %s plane, each byte-identical to direct", n, testDataPlane())
}

// soak runs call(0..n-1) from 16 workers and returns how many failed and
// the first five errors.
func soak(n int, call func(i int) error) (failed int64, first []error) {
	var next, differ atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := call(i); err != nil {
					differ.Add(1)
					mu.Lock()
					if len(first) < 5 {
						first = append(first, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return differ.Load(), first
}

// soakCall draws one call: its method, metadata and request messages.
func soakCall(r *rand.Rand) (string, metadata.MD, [][]byte) {
	sizes := []int{0, 8, 100, 4 << 10, 16 << 10, 100 << 10, 1 << 20}
	size := func() int {
		s := sizes[r.IntN(len(sizes))]
		if s == 1<<20 && r.IntN(8) != 0 {
			s = 8 // keep megabyte calls a few percent of the mix
		}
		return s
	}
	md := metadata.Pairs("x-soak", strconv.Itoa(r.IntN(1000)))
	switch r.IntN(4) {
	case 0: // KServe v2 unary infer
		return "/inference.GRPCInferenceService/ModelInfer", md, [][]byte{inferRequest("m"+strconv.Itoa(r.IntN(3)), size())}
	case 1: // a streaming call of several messages
		var in [][]byte
		for j := r.IntN(5); j >= 0; j-- {
			b := make([]byte, size())
			for k := range b {
				b[k] = byte(r.Uint32())
			}
			in = append(in, b)
		}
		return "/acme.Echo/Stream", md, in
	case 2: // an error status with trailers
		md.Append("x-code", strconv.Itoa(1+r.IntN(15)))
		return "/acme.Echo/Fail", md, [][]byte{make([]byte, size())}
	default: // unary, random bytes
		b := make([]byte, size())
		for k := range b {
			b[k] = byte(r.Uint32())
		}
		return "/acme.Echo/Unary", md, [][]byte{b}
	}
}

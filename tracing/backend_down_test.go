package tracing

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// blackhole accepts connections and never answers: a backend that hangs.
func blackhole(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// TestBackendDown sends calls through the proxy with every call traced and
// the OTLP backend refusing connections (down) or accepting and never
// answering (hung): every call succeeds, the export queue never holds more
// than its bound, the lost traces are counted, and every trace is
// accounted for as exported or dropped.
func TestBackendDown(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		endpoint       func(testing.TB) string
	}{
		{"grpc-refused", ProtocolGRPC, testenv.FreeAddr},
		{"grpc-hung", ProtocolGRPC, blackhole},
		{"http-refused", ProtocolHTTP, testenv.FreeAddr},
		{"http-hung", ProtocolHTTP, blackhole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := metrics.NewSet()
			const queue = 32
			tr, err := New(Config{Endpoint: tc.endpoint(t), Protocol: tc.protocol, Insecure: true, Metrics: set,
				QueueSize: queue, BatchSize: 64, BatchTimeout: 5 * time.Millisecond, ExportTimeout: 100 * time.Millisecond, Keep: 10,
				Logger: discardLogger})
			if err != nil {
				t.Fatal(err)
			}
			up := httpModel(t, nil)
			s := startSidecar(t, "r", up, false, tr)

			var maxQueue atomic.Int64
			stopWatch := make(chan struct{})
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					select {
					case <-stopWatch:
						return
					default:
					}
					if l := int64(len(tr.queue.ch)); l > maxQueue.Load() {
						maxQueue.Store(l)
					}
					runtime.Gosched()
				}
			}()
			var ms0 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)

			const workers, perWorker = 4, 400
			var failed atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					hc := &http.Client{}
					for range perWorker {
						if err := postInfer(hc, s.addr, "mnist", nil); err != nil {
							failed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			took := time.Since(start)
			s.stop()
			var ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			close(stopWatch)
			<-watched
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			tr.Close(ctx)

			n := float64(workers * perWorker)
			full := metricValue(t, set, `inferwatch_traces_dropped_total{reason="queue_full"}`)
			exportFailed := metricValue(t, set, `inferwatch_traces_dropped_total{reason="export_failed"}`)
			shut := metricValue(t, set, `inferwatch_traces_dropped_total{reason="shutdown"}`)
			exported := metricValue(t, set, "inferwatch_traces_exported_total")
			t.Logf("%v calls in %v (%.0f/s): dropped queue_full=%v export_failed=%v shutdown=%v exported=%v; queue max %d of %d; heap after GC %d KiB -> %d KiB",
				n, took.Round(time.Millisecond), n/took.Seconds(), full, exportFailed, shut, exported, maxQueue.Load(), queue,
				ms0.HeapAlloc>>10, ms1.HeapAlloc>>10)
			if failed.Load() != 0 {
				t.Errorf("%d calls failed with the trace backend down", failed.Load())
			}
			if maxQueue.Load() > queue {
				t.Errorf("export queue held %d > %d", maxQueue.Load(), queue)
			}
			if exported != 0 || full+exportFailed+shut != n {
				t.Errorf("of %v traces: %v exported, %v dropped", n, exported, full+exportFailed+shut)
			}
			if got := len(tr.Traces(0, "")); got != 10 {
				t.Errorf("in-memory traces %d, want the last 10", got)
			}
			if ms1.HeapAlloc > ms0.HeapAlloc+32<<20 {
				t.Errorf("heap grew from %d to %d bytes", ms0.HeapAlloc, ms1.HeapAlloc)
			}
		})
	}
}

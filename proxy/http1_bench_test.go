package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// BenchmarkHTTP1Plane is a KServe v2 JSON inference call (a 1×784 FP32
// input, ~9 KB, answered with ~300 B) through the proxy's HTTP/1.1 path, on
// each data plane: stdlib (net/http's server) and frame (package h1's
// loop), with keep-alive clients 8 at a time. cpu-µs/op is the whole
// process's CPU per call (clients, proxy and upstream together), so the
// planes' difference is the difference of their servers.
func BenchmarkHTTP1Plane(b *testing.B) {
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchV2Reply)
	})}
	ul := listen(b)
	go up.Serve(ul)
	defer up.Close()
	body := benchV2Request()
	for _, plane := range []string{"direct", "stdlib", "frame"} {
		b.Run(plane, func(b *testing.B) {
			addr := ul.Addr().String()
			if plane != "direct" {
				pl := record.NewPipeline(1<<14, record.SinkFunc(func(*record.Call) {}), nil)
				defer pl.Close()
				tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP1, Addr: addr})
				h := NewHandler(Options{Upstream: addr, Transport: tr, Pipeline: pl, CaptureBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler)})
				l := Listener{Name: "b", Addr: "127.0.0.1:0", Handler: h}
				if plane == "frame" {
					l.HTTP1 = NewHTTP1Plane(h)
				}
				s := NewServer(slog.New(slog.DiscardHandler), l)
				if err := s.Listen(); err != nil {
					b.Fatal(err)
				}
				go s.Serve()
				defer s.Shutdown(context.Background())
				addr = s.Addrs()[0].String()
			}
			url := "http://" + addr + "/v2/models/mnist/infer"
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{}).DialContext}}
			defer c.CloseIdleConnections()
			call := func() error {
				res, err := c.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err == nil && res.StatusCode != 200 {
					err = fmt.Errorf("status %d", res.StatusCode)
				}
				return err
			}
			for range 16 {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			const clients = 8
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			var wg sync.WaitGroup
			var next sync.Mutex
			left := b.N
			errs := make(chan error, clients)
			for range clients {
				wg.Go(func() {
					for {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						if err := call(); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()+ru1.Stime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

const benchV2Reply = `{"model_name":"mnist","model_version":"1","outputs":[{"name":"probs","datatype":"FP32","shape":[1,10],"data":[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]}]}`

func benchV2Request() []byte {
	var sb strings.Builder
	sb.WriteString(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[`)
	for i := range 784 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%.6f", float64(i%255)/255)
	}
	sb.WriteString(`]}]}`)
	return []byte(sb.String())
}

package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sseClock is an SSE upstream whose events carry the time they were
// flushed (Unix ns), so a client anywhere on this machine measures each
// event's lag from the server's flush to its own read without sharing
// state with the server: the lag of a path through a proxy minus the lag
// of the direct path is what the proxy adds per event.
func sseClock(events int, gap time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		f.Flush()
		t := time.NewTicker(gap)
		defer t.Stop()
		for i := range events {
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}],\"sent\":%d}\n\n", i, time.Now().UnixNano())
			f.Flush()
		}
		fmt.Fprintf(w, "data: [DONE]\n\n")
	})
}

// eventLags streams one chat completion from addr and returns each event's
// lag from the server's flush to this read.
func eventLags(client *http.Client, addr string) ([]time.Duration, error) {
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var lags []time.Duration
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		now := time.Now()
		line := sc.Bytes()
		i := bytes.LastIndex(line, []byte(`"sent":`))
		if i < 0 {
			continue
		}
		ns, err := strconv.ParseInt(string(bytes.TrimRight(line[i+7:], "}")), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("event %q: %w", line, err)
		}
		lags = append(lags, now.Sub(time.Unix(0, ns)))
	}
	return lags, sc.Err()
}

// startNginx runs nginx in front of upstream as an unbuffered SSE proxy
// (proxy_buffering off, HTTP/1.1 upstream keep-alive), or returns "" when
// there is no nginx.
func startNginx(b *testing.B, upstream string) string {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return ""
	}
	l := listen(b)
	addr := l.Addr().String()
	l.Close()
	dir := b.TempDir()
	user := ""
	if os.Getuid() == 0 {
		user = "user root;"
	}
	conf := fmt.Sprintf(`%s
worker_processes 2;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %s;
  proxy_temp_path %s;
  upstream up { server %s; keepalive 16; }
  server {
    listen %s;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, user, dir, dir, dir, dir, upstream, addr)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-g", "daemon off;")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	b.Fatalf("nginx did not listen on %s", addr)
	return ""
}

// BenchmarkSSEEventLag measures what each path adds to every server-sent
// event of a streamed generation: direct, through the sidecar, and through
// nginx with proxy_buffering off when nginx is installed, in the same run.
// Each iteration streams one generation of 200 events 2 ms apart; the
// reported figures are the lag quantiles over all events of all
// iterations, and the sidecar's and nginx's added p50/p99 over direct.
//
//	go test -run XXX -bench BenchmarkSSEEventLag -benchtime 20x ./proxy
func BenchmarkSSEEventLag(b *testing.B) {
	l := listen(b)
	up := &http.Server{Handler: sseClock(200, 2*time.Millisecond)}
	go up.Serve(l)
	b.Cleanup(func() { up.Close() })
	upstream := l.Addr().String()
	h := newHarness(b, upstream, false, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) })
	targets := []struct{ name, addr string }{{"direct", upstream}, {"inferwatch", h.addr}}
	if ng := startNginx(b, upstream); ng != "" {
		targets = append(targets, struct{ name, addr string }{"nginx", ng})
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	lags := make([][]time.Duration, len(targets))
	b.ResetTimer()
	for range b.N {
		for i, t := range targets { // interleaved, so drift hits all alike
			got, err := eventLags(client, t.addr)
			if err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
			lags[i] = append(lags[i], got...)
		}
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[min(int(p*float64(len(d))), len(d)-1)]) / 1e3
	}
	var p50d, p99d float64
	for i, t := range targets {
		slices.Sort(lags[i])
		p50, p99 := q(lags[i], 0.50), q(lags[i], 0.99)
		b.ReportMetric(p50, t.name+"-p50-µs")
		b.ReportMetric(p99, t.name+"-p99-µs")
		if i == 0 {
			p50d, p99d = p50, p99
			continue
		}
		b.ReportMetric(p50-p50d, t.name+"-added-p50-µs")
		b.ReportMetric(p99-p99d, t.name+"-added-p99-µs")
	}
}

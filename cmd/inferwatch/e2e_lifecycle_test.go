package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/proto/inference"
)

// slowKServe is a KServe v2 gRPC upstream whose ModelInfer takes delay and
// echoes the raw inputs back.
type slowKServe struct {
	inference.UnimplementedGRPCInferenceServiceServer
	delay   time.Duration
	arrived *atomic.Int64
}

func (slowKServe) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: true}, nil
}

func (s slowKServe) ModelInfer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	s.arrived.Add(1)
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &inference.ModelInferResponse{ModelName: r.GetModelName(), Id: r.GetId(), RawOutputContents: r.GetRawInputContents()}, nil
}

// slowUpstreams runs a gRPC and an HTTP upstream on 127.0.0.1 whose infer
// calls take delay; arrived counts the calls that reached either.
type slowUpstreams struct {
	grpcAddr, httpAddr string
	arrived            atomic.Int64
}

func startSlowUpstreams(t *testing.T, delay time.Duration) *slowUpstreams {
	t.Helper()
	u := &slowUpstreams{}
	gl, hl := listenLocal(t), listenLocal(t)
	u.grpcAddr, u.httpAddr = gl.Addr().String(), hl.Addr().String()

	gs := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(gs, slowKServe{delay: delay, arrived: &u.arrived})
	go gs.Serve(gl)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ready":true}`)
	})
	mux.HandleFunc("POST /v2/models/slow/infer", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.arrived.Add(1)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	t.Cleanup(func() {
		gs.Stop()
		hs.Close()
	})
	return u
}

func grpcClient(t *testing.T, addr string) inference.GRPCInferenceServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64*mib), grpc.MaxCallSendMsgSize(64*mib)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inference.NewGRPCInferenceServiceClient(cc)
}

func httpClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// TestE2EDrainOnSIGTERM sends SIGTERM to a proxy while gRPC and HTTP calls
// are in flight through it.
func TestE2EDrainOnSIGTERM(t *testing.T) {
	tests := []struct {
		name         string
		delay        time.Duration // each upstream call
		drainTimeout time.Duration
		drainDelay   time.Duration
		wantOK       bool // calls complete, else they are cut off
		wantExit     int
	}{
		{name: "in-flight calls finish", delay: 2 * time.Second, drainTimeout: 10 * time.Second, drainDelay: 300 * time.Millisecond, wantOK: true, wantExit: 0},
		// A drain timeout of 2 s, not 500 ms: /readyz is checked while the
		// admin listener lives, which is this long with no drain delay,
		// and a loaded machine's first request to it may take half a
		// second. The calls (20 s) are cut off all the same.
		{name: "drain timeout cuts calls off", delay: 20 * time.Second, drainTimeout: 2 * time.Second, wantOK: false, wantExit: 1},
	}
	const perProtocol = 5
	payload := bytes.Repeat([]byte("inferwatch drains "), 64<<10/18)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startSlowUpstreams(t, tt.delay)
			px := startProxy(t,
				"--grpc-listen", "127.0.0.1:0", "--grpc-upstream", up.grpcAddr,
				"--http-listen", "127.0.0.1:0", "--http-upstream", up.httpAddr,
				"--admin-listen", "127.0.0.1:0", "--no-triton-stats",
				"--drain-timeout", tt.drainTimeout.String(), "--drain-delay", tt.drainDelay.String())
			px.waitReady(t, 5*time.Second)

			gc := grpcClient(t, px.grpcAddr)
			hc := httpClient(t, 30*time.Second)
			type result struct {
				proto string
				ok    bool
				err   string
				at    time.Time
			}
			results := make(chan result, 2*perProtocol)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range perProtocol {
				go func() {
					id := fmt.Sprint("call-", i)
					res, err := gc.ModelInfer(ctx, &inference.ModelInferRequest{
						ModelName: "slow", Id: id,
						Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "in", Datatype: "BYTES", Shape: []int64{1}}},
						RawInputContents: [][]byte{payload},
					})
					r := result{proto: "grpc", at: time.Now()}
					switch {
					case err != nil:
						r.err = err.Error()
					case res.GetId() != id || len(res.GetRawOutputContents()) != 1 || !bytes.Equal(res.GetRawOutputContents()[0], payload):
						r.err = "response does not echo the request"
					default:
						r.ok = true
					}
					results <- r
				}()
				go func() {
					r := result{proto: "http"}
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+px.httpAddr+"/v2/models/slow/infer", bytes.NewReader(payload))
					res, err := hc.Do(req)
					if err == nil {
						var body []byte
						body, err = io.ReadAll(res.Body)
						res.Body.Close()
						switch {
						case err != nil:
						case res.StatusCode != http.StatusOK:
							err = fmt.Errorf("status %s", res.Status)
						case !bytes.Equal(body, payload):
							err = fmt.Errorf("body of %d bytes does not echo the request", len(body))
						}
					}
					r.at = time.Now()
					if err != nil {
						r.err = err.Error()
					} else {
						r.ok = true
					}
					results <- r
				}()
			}
			deadline := time.Now().Add(5 * time.Second)
			for up.arrived.Load() < 2*perProtocol {
				if time.Now().After(deadline) {
					t.Fatalf("only %d of %d calls reached the upstream", up.arrived.Load(), 2*perProtocol)
				}
				time.Sleep(5 * time.Millisecond)
			}

			sigAt := time.Now()
			px.signal(syscall.SIGTERM)

			// /readyz says draining while the admin listener still serves.
			sawDraining := false
			for time.Since(sigAt) < max(time.Second, tt.drainDelay+tt.drainTimeout) && !sawDraining {
				res, err := http.Get("http://" + px.admin + "/readyz")
				if err != nil {
					break // admin already gone
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				sawDraining = res.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "draining")
				time.Sleep(10 * time.Millisecond)
			}
			if !sawDraining {
				t.Errorf("/readyz never said 503 draining after SIGTERM")
			}

			// New connections are refused once the drain delay is over.
			var refusedAt time.Time
			for time.Since(sigAt) < tt.drainDelay+2*time.Second {
				if refused(px.grpcAddr) && refused(px.httpAddr) {
					refusedAt = time.Now()
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if refusedAt.IsZero() {
				t.Errorf("route listeners still accept connections %v after SIGTERM", tt.drainDelay+2*time.Second)
			} else if d := refusedAt.Sub(sigAt); d < tt.drainDelay {
				t.Errorf("listeners closed %v after SIGTERM, before the %v drain delay", d, tt.drainDelay)
			}

			var got []result
			for range 2 * perProtocol {
				select {
				case r := <-results:
					got = append(got, r)
				case <-time.After(15 * time.Second):
					t.Fatalf("calls still running 15s after SIGTERM; finished: %+v", got)
				}
			}
			exit := px.wait(tt.drainTimeout + 5*time.Second)
			exitAfter := time.Since(sigAt)

			firstDone := got[0].at
			for _, r := range got {
				if r.at.Before(firstDone) {
					firstDone = r.at
				}
				if r.ok != tt.wantOK {
					t.Errorf("%s call: ok=%v err=%q, want ok=%v", r.proto, r.ok, r.err, tt.wantOK)
				}
				if !r.at.After(sigAt) {
					t.Errorf("%s call finished before SIGTERM: not in flight", r.proto)
				}
			}
			if tt.wantOK && !refusedAt.IsZero() && !refusedAt.Before(firstDone) {
				t.Errorf("listeners closed only after calls finished (%v vs %v after SIGTERM): drain did not overlap in-flight calls",
					refusedAt.Sub(sigAt), firstDone.Sub(sigAt))
			}
			if exit != tt.wantExit {
				t.Errorf("exit code %d, want %d", exit, tt.wantExit)
			}
			if limit := min(tt.delay, tt.drainDelay+tt.drainTimeout) + 3*time.Second; exitAfter > limit {
				t.Errorf("exited %v after SIGTERM, want under %v", exitAfter, limit)
			}
			if !tt.wantOK && !strings.Contains(px.log(), "drain: ") {
				t.Errorf("a cut-off drain should say so in the error; log:\n%s", px.log())
			}
			t.Logf("SIGTERM → listeners refused after %v, first call done after %v, exit %d after %v",
				refusedAt.Sub(sigAt).Round(time.Millisecond), firstDone.Sub(sigAt).Round(time.Millisecond), exit, exitAfter.Round(time.Millisecond))
		})
	}
}

// TestE2ESecondSignalExitsAtOnce: during a long drain (a call in flight, a
// 30 s drain timeout) a second SIGTERM ends the process at once, as
// whoever sends it means.
func TestE2ESecondSignalExitsAtOnce(t *testing.T) {
	up := startSlowUpstreams(t, 20*time.Second)
	px := startProxy(t, "--http-listen", "127.0.0.1:0", "--http-upstream", up.httpAddr,
		"--admin-listen", "127.0.0.1:0", "--no-triton-stats", "--drain-timeout", "30s")
	px.waitReady(t, 5*time.Second)
	go http.Post("http://"+px.httpAddr+"/v2/models/slow/infer", "application/json", strings.NewReader("{}"))
	for deadline := time.Now().Add(5 * time.Second); up.arrived.Load() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the upstream")
		}
	}
	px.signal(syscall.SIGTERM)
	px.waitLine(regexp.MustCompile(`signal received: draining`), 5*time.Second)
	at := time.Now()
	px.signal(syscall.SIGTERM)
	if exit := px.wait(5 * time.Second); exit == 0 {
		t.Errorf("exit code 0 after a second signal, want the signal's")
	}
	t.Logf("exited %v after the second SIGTERM", time.Since(at).Round(time.Millisecond))
}

// TestE2EReadinessFollowsUpstream starts the proxy in front of an address
// nobody listens on, then starts the model server there.
func TestE2EReadinessFollowsUpstream(t *testing.T) {
	tests := []struct {
		proto string
	}{
		{proto: "grpc"},
		{proto: "http"},
	}
	for _, tt := range tests {
		t.Run(tt.proto, func(t *testing.T) {
			msGRPC, msHTTP := testenv.FreeAddr(t), testenv.FreeAddr(t)
			upstream := msGRPC
			if tt.proto == "http" {
				upstream = msHTTP
			}
			px := startProxy(t, "--"+tt.proto+"-listen", "127.0.0.1:0", "--"+tt.proto+"-upstream", upstream,
				"--admin-listen", "127.0.0.1:0", "--no-triton-stats")
			listen := px.grpcAddr
			if tt.proto == "http" {
				listen = px.httpAddr
			}

			// Not ready, with the route and the reason named.
			deadline := time.Now().Add(3 * time.Second)
			for {
				code, body := px.adminGet(t, "/readyz")
				if code == http.StatusServiceUnavailable && strings.Contains(body, tt.proto+": unreachable") {
					break
				}
				if code == http.StatusOK {
					t.Fatalf("/readyz 200 with no upstream at %s", upstream)
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz = %d %q, want 503 naming %q and unreachable", code, strings.TrimSpace(body), tt.proto)
				}
				time.Sleep(50 * time.Millisecond)
			}
			upReady := func() float64 {
				_, text := px.adminGet(t, "/metrics")
				v, ok := parseMetrics(t, text).Sum("inferwatch_upstream_ready", map[string]string{"route": tt.proto})
				if !ok {
					t.Fatalf("no inferwatch_upstream_ready{route=%q} in /metrics", tt.proto)
				}
				return v
			}
			if v := upReady(); v != 0 {
				t.Errorf("inferwatch_upstream_ready = %v with the upstream down, want 0", v)
			}
			// Calls fail as unavailable meanwhile.
			switch tt.proto {
			case "grpc":
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := grpcClient(t, listen).ServerLive(ctx, &inference.ServerLiveRequest{})
				cancel()
				if status.Code(err) != codes.Unavailable {
					t.Errorf("ServerLive with the upstream down: %v, want UNAVAILABLE", err)
				}
			case "http":
				res, err := httpClient(t, 5*time.Second).Get("http://" + listen + "/v2/health/live")
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusBadGateway {
					t.Errorf("GET /v2/health/live with the upstream down: %s, want 502", res.Status)
				}
			}

			startModelServerProc(t, msGRPC, msHTTP)
			started := time.Now()
			px.waitReady(t, 3*time.Second)
			t.Logf("ready %v after the model server logged its addresses", time.Since(started).Round(time.Millisecond))
			if v := upReady(); v != 1 {
				t.Errorf("inferwatch_upstream_ready = %v once ready, want 1", v)
			}
			switch tt.proto {
			case "grpc":
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := grpcClient(t, listen).ServerLive(ctx, &inference.ServerLiveRequest{})
				cancel()
				if err != nil || !res.GetLive() {
					t.Errorf("ServerLive through the proxy: %v, %v", res, err)
				}
			case "http":
				res, err := httpClient(t, 5*time.Second).Get("http://" + listen + "/v2/health/live")
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Errorf("GET /v2/health/live through the proxy: %s", res.Status)
				}
			}
		})
	}
}

// TestE2EConfigErrors checks that a mistake stops start-up, naming the field.
func TestE2EConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // all in stderr
	}{
		{
			name: "upstream flag not host:port",
			args: []string{"--grpc-listen", "127.0.0.1:0", "--grpc-upstream", "nohostport"},
			want: []string{`routes[0] (grpc).upstream: "nohostport" is not host:port`},
		},
		{
			name: "listen without upstream",
			args: []string{"--http-listen", "127.0.0.1:0"},
			want: []string{"--http-listen and --http-upstream go together"},
		},
		{
			name: "no routes",
			args: []string{"--admin-listen", "127.0.0.1:0"},
			want: []string{"routes: no listen/upstream pair"},
		},
		{
			name: "bad readiness and upstream port",
			args: []string{"--http-listen", "127.0.0.1:0", "--http-upstream", "127.0.0.1:0", "--readiness", "sometimes"},
			want: []string{`routes[0] (http).upstream: "127.0.0.1:0" has no valid port`, `routes[0] (http).readiness: "sometimes" is not auto, tcp or none`},
		},
		{
			name: "config: upstream without port",
			args: []string{"--config", "testdata/bad_upstream.yaml"},
			want: []string{`routes[0] (triton-grpc).upstream: "127.0.0.1" is not host:port`, `routes[1] (triton-http).upstream_protocol: "h3" is not http1 or h2c`},
		},
		{
			name: "config: unknown field",
			args: []string{"--config", "testdata/unknown_field.yaml"},
			want: []string{"line 8: field upstream_timeout not found in type config.Route"},
		},
		{
			// The error gives the line and the value but not the field's
			// name (drain_timeout): config.Duration.UnmarshalYAML cannot see
			// its key. Require "drain_timeout" once config names it.
			name: "config: bad duration",
			args: []string{"--config", "testdata/bad_duration.yaml"},
			want: []string{"testdata/bad_duration.yaml", "drain_timeout", "line 2", `"30x"`},
		},
		{
			name: "config: flags given override it and are validated",
			args: []string{"--config", "testdata/ok.yaml", "--log-level", "loud", "--drain-timeout", "-1s"},
			want: []string{`log_level: "loud" is not one of debug, info, warn, error`, "drain_timeout: must not be negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := start(t, "proxy", append([]string{"proxy"}, tt.args...)...)
			exit := p.wait(10 * time.Second)
			log := p.log()
			if exit == 0 {
				t.Errorf("exit 0, want non-zero")
			}
			if !strings.HasPrefix(log, "inferwatch: configuration:") {
				t.Errorf("stderr does not start with %q:\n%s", "inferwatch: configuration:", log)
			}
			for _, w := range tt.want {
				if !strings.Contains(log, w) {
					t.Errorf("stderr lacks %q:\n%s", w, log)
				}
			}
			if strings.Contains(log, "admin endpoints") || strings.Contains(log, "msg=proxying") {
				t.Errorf("started serving despite the mistake:\n%s", log)
			}
		})
	}
}

// TestE2EAdminLoopbackByDefault runs the proxy without --admin-listen: the
// admin endpoints must listen on 127.0.0.1:9901 and nowhere else.
func TestE2EAdminLoopbackByDefault(t *testing.T) {
	const port = 9901
	// Skip when anything holds the port, on any address.
	for _, a := range []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf(":%d", port)} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Skipf("port %d is taken (%v); cannot check the default admin address", port, err)
		}
		l.Close()
	}
	p := start(t, "proxy", "proxy", "--http-listen", "127.0.0.1:0", "--http-upstream", "127.0.0.1:1", "--no-triton-stats")
	m, err := p.findLine(adminLine, 10*time.Second)
	if err != nil && p.exited() && strings.Contains(p.log(), "address already in use") {
		t.Skipf("port %d was taken meanwhile: %s", port, p.log())
	}
	if err != nil {
		t.Fatalf("proxy %v:\n%s", err, p.log())
	}
	host, portStr, err := net.SplitHostPort(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if host != "127.0.0.1" || portStr != strconv.Itoa(port) {
		t.Errorf("admin endpoints at %s, want 127.0.0.1:%d", m[1], port)
	}
	// What the kernel says: every listening socket on the port is bound to
	// 127.0.0.1, none to a wildcard or an IPv6 address.
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if f == "/proc/net/tcp6" && os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		suffix := fmt.Sprintf(":%04X", port)
		found := false
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "0A" || !strings.HasSuffix(fs[1], suffix) { // 0A: LISTEN
				continue
			}
			found = true
			if f == "/proc/net/tcp6" || fs[1] != "0100007F"+suffix {
				t.Errorf("%s: a socket listens on %s, want only 0100007F%s (127.0.0.1)", f, fs[1], suffix)
			}
		}
		if f == "/proc/net/tcp" && !found {
			t.Errorf("%s: nothing listens on port %d", f, port)
		}
	}
	sc := &sidecarProc{proc: p, admin: m[1]}
	if code, body := sc.adminGet(t, "/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	p.signal(syscall.SIGTERM)
	if exit := p.wait(5 * time.Second); exit != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", exit)
	}
}

// waitGroupTimeout waits for wg or fails after d.
func waitGroupTimeout(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still running after %v", what, d)
	}
}

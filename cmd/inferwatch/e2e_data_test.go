package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/proto/inference"
)

// throttled reads at most rate bytes per second on average, 32 KiB at a
// time: a slow peer.
type throttled struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     int64
}

func (t *throttled) Read(p []byte) (int, error) {
	if len(p) > 32<<10 {
		p = p[:32<<10]
	}
	if t.start.IsZero() {
		t.start = time.Now()
	}
	if d := time.Until(t.start.Add(time.Duration(float64(t.n) / t.rate * float64(time.Second)))); d > 0 {
		time.Sleep(d)
	}
	n, err := t.r.Read(p)
	t.n += int64(n)
	return n, err
}

// stream is size deterministic pseudo-random bytes.
func stream(seed byte, size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{seed}), size)
}

// bigUpstream answers POST .../infer by reading the body slowly and
// reporting its length and SHA-256, and GET /blob with size bytes as fast as
// the proxy takes them, reporting their SHA-256 on sent.
type bigUpstream struct {
	size int64
	rate float64
	sent chan string
}

func (u *bigUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v2/health/ready":
		io.WriteString(w, `{"ready":true}`)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/infer"):
		h := sha256.New()
		n, err := io.Copy(h, &throttled{r: r.Body, rate: u.rate})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"bytes": n, "sha256": hex.EncodeToString(h.Sum(nil))})
	case r.Method == http.MethodGet && r.URL.Path == "/blob":
		h := sha256.New()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(u.size, 10))
		if _, err := io.CopyBuffer(w, io.TeeReader(stream(2, u.size), h), make([]byte, 32<<10)); err != nil {
			u.sent <- "write failed: " + err.Error()
			return
		}
		u.sent <- hex.EncodeToString(h.Sum(nil))
	default:
		http.NotFound(w, r)
	}
}

func protocols(name string) *http.Protocols {
	p := new(http.Protocols)
	switch name {
	case "h2c":
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	return p
}

// TestE2EMemoryBoundLargeBodies moves a 256 MiB request to an upstream that
// reads it slowly and a 256 MiB response to a client that reads it slowly,
// at once, through the HTTP route, and bounds the proxy's peak RSS.
func TestE2EMemoryBoundLargeBodies(t *testing.T) {
	const (
		size = 256 * mib
		rate = 64 * mib // bytes/s on the slow side: about 4 s per body
		// Design: per call 32 KiB copy buffer + 1 MiB HTTP/2 stream receive
		// window + 4 MiB upstream stream window + 1 MiB capture of an infer
		// body; the whole process stays well below this.
		bound = 80 * mib
	)
	tests := []struct {
		client, upstream string
	}{
		{client: "http1", upstream: "http1"},
		{client: "h2c", upstream: "h2c"},
	}
	for _, tt := range tests {
		t.Run(tt.client+" client, "+tt.upstream+" upstream", func(t *testing.T) {
			up := &bigUpstream{size: size, rate: rate, sent: make(chan string, 1)}
			l := listenLocal(t)
			hs := &http.Server{Handler: up, Protocols: protocols(tt.upstream)}
			go hs.Serve(l)
			t.Cleanup(func() { hs.Close() })

			px := startProxy(t, "--http-listen", "127.0.0.1:0", "--http-upstream", l.Addr().String(),
				"--http-upstream-protocol", tt.upstream, "--admin-listen", "127.0.0.1:0", "--no-triton-stats")
			px.waitReady(t, 5*time.Second)
			rss0, _, err := procMemory(px.pid())
			if err != nil {
				t.Fatal(err)
			}

			// Sample the proxy's RSS while the bodies move.
			stop := make(chan struct{})
			var maxRSS int64
			var sampler sync.WaitGroup
			sampler.Go(func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					if rss, _, err := procMemory(px.pid()); err == nil {
						maxRSS = max(maxRSS, rss)
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			})

			tr := &http.Transport{Protocols: protocols(tt.client)}
			t.Cleanup(tr.CloseIdleConnections)
			hc := &http.Client{Transport: tr, Timeout: 25 * time.Second}
			began := time.Now()
			var wg sync.WaitGroup
			var upErr, downErr error
			wg.Go(func() {
				sent := sha256.New()
				req, err := http.NewRequest(http.MethodPost, "http://"+px.httpAddr+"/v2/models/blob/infer", io.TeeReader(stream(1, size), sent))
				if err != nil {
					upErr = err
					return
				}
				req.ContentLength = size
				req.Header.Set("Content-Type", "application/octet-stream")
				res, err := hc.Do(req)
				if err != nil {
					upErr = err
					return
				}
				defer res.Body.Close()
				var got struct {
					Bytes  int64  `json:"bytes"`
					SHA256 string `json:"sha256"`
				}
				if err := json.NewDecoder(res.Body).Decode(&got); err != nil || res.StatusCode != http.StatusOK {
					upErr = fmt.Errorf("upload answer: %s, %v", res.Status, err)
					return
				}
				if want := hex.EncodeToString(sent.Sum(nil)); got.Bytes != size || got.SHA256 != want {
					upErr = fmt.Errorf("upstream received %d bytes sha256 %s, client sent %d bytes sha256 %s", got.Bytes, got.SHA256, int64(size), want)
				}
			})
			wg.Go(func() {
				res, err := hc.Get("http://" + px.httpAddr + "/blob")
				if err != nil {
					downErr = err
					return
				}
				defer res.Body.Close()
				h := sha256.New()
				n, err := io.Copy(h, &throttled{r: res.Body, rate: rate})
				if err != nil || res.StatusCode != http.StatusOK {
					downErr = fmt.Errorf("download: %s, %d bytes, %v", res.Status, n, err)
					return
				}
				got := hex.EncodeToString(h.Sum(nil))
				select {
				case want := <-up.sent:
					if n != size || got != want {
						downErr = fmt.Errorf("client read %d bytes sha256 %s, upstream sent %d bytes sha256 %s", n, got, int64(size), want)
					}
				case <-time.After(5 * time.Second):
					downErr = fmt.Errorf("upstream never finished sending")
				}
			})
			waitGroupTimeout(t, &wg, 28*time.Second, "transfers")
			elapsed := time.Since(began)
			close(stop)
			sampler.Wait()
			_, hwm, err := procMemory(px.pid())
			if err != nil {
				t.Fatal(err)
			}
			if upErr != nil {
				t.Errorf("256 MiB request: %v", upErr)
			}
			if downErr != nil {
				t.Errorf("256 MiB response: %v", downErr)
			}
			t.Logf("proxy memory: VmRSS %.1f MiB before, max sampled VmRSS %.1f MiB, VmHWM %.1f MiB (bound %d MiB); 2×256 MiB in %v",
				float64(rss0)/mib, float64(maxRSS)/mib, float64(hwm)/mib, bound/mib, elapsed.Round(time.Millisecond))
			if hwm >= bound {
				t.Errorf("proxy VmHWM %.1f MiB, want under %d MiB: bodies are being buffered", float64(hwm)/mib, bound/mib)
			}
			if elapsed < 3*time.Second {
				t.Errorf("transfers took %v: the slow side was not slow, the bound proves little", elapsed)
			}
			// The taps counted every byte of the request.
			waitMetric(t, px, 5*time.Second, "inferwatch_request_bytes_total", map[string]string{"protocol": "http", "model": "blob"}, size)
		})
	}
}

// waitMetric waits until the samples matching name and labels add up to want.
func waitMetric(t *testing.T, px *sidecarProc, timeout time.Duration, name string, match map[string]string, want float64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, text := px.adminGet(t, "/metrics")
		got, ok := parseMetrics(t, text).Sum(name, match)
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v (present %v), want %v", name, match, got, ok, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mnistInput is one 28×28 FP32 image.
func mnistInput() []float32 {
	x := make([]float32, 784)
	for i := range x {
		x[i] = float32(i%28) / 28
	}
	return x
}

// inferGRPC makes n ModelInfer calls to mnist-mlp at addr, alternating
// raw_input_contents and typed fp32_contents.
func inferGRPC(t *testing.T, addr string, n int) {
	t.Helper()
	x := mnistInput()
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	reqs := []*inference.ModelInferRequest{
		{ModelName: "mnist-mlp",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 784}}},
			RawInputContents: [][]byte{raw}},
		{ModelName: "mnist-mlp",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 784},
				Contents: &inference.InferTensorContents{Fp32Contents: x}}}},
	}
	gc := grpcClient(t, addr)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := gc.ModelInfer(ctx, reqs[i%len(reqs)])
		cancel()
		if err != nil {
			t.Fatalf("gRPC ModelInfer %d: %v", i, err)
		}
		if len(res.GetOutputs()) != 1 || res.GetOutputs()[0].GetName() != "probabilities" || len(res.GetRawOutputContents()) != 1 || len(res.GetRawOutputContents()[0]) != 40 {
			t.Fatalf("gRPC ModelInfer %d: outputs %v", i, res.GetOutputs())
		}
	}
}

// inferHTTP makes n KServe v2 JSON infer calls to mnist-mlp at addr.
func inferHTTP(t *testing.T, addr string, n int) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "datatype": "FP32", "shape": []int{1, 784}, "data": mnistInput()}}})
	if err != nil {
		t.Fatal(err)
	}
	hc := httpClient(t, 5*time.Second)
	for i := range n {
		res, err := hc.Post("http://"+addr+"/v2/models/mnist-mlp/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Outputs []struct {
				Name string    `json:"name"`
				Data []float64 `json:"data"`
			} `json:"outputs"`
		}
		err = json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || len(out.Outputs) != 1 || len(out.Outputs[0].Data) != 10 {
			t.Fatalf("HTTP infer %d: %s %v %+v", i, res.Status, err, out)
		}
		if st := res.Header.Get("Server-Timing"); !strings.Contains(st, "infer;dur=") {
			t.Errorf("HTTP infer %d: Server-Timing %q did not pass through", i, st)
		}
	}
}

// TestE2EMetrics drives gRPC and HTTP inference through the proxy to the
// model server and checks what the admin /metrics says about them.
func TestE2EMetrics(t *testing.T) {
	_, msGRPC, msHTTP := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0")
	px := startProxy(t,
		"--grpc-listen", "127.0.0.1:0", "--grpc-upstream", msGRPC,
		"--http-listen", "127.0.0.1:0", "--http-upstream", msHTTP,
		"--admin-listen", "127.0.0.1:0", "--triton-stats-interval", "500ms", "--decode-sample", "1")
	px.waitReady(t, 5*time.Second)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := px.adminGet(t, path); code != http.StatusOK {
			t.Errorf("%s = %d %q", path, code, body)
		}
	}
	waitTritonBaseline(t, px)

	const grpcCalls, httpCalls = 6, 4
	inferGRPC(t, px.grpcAddr, grpcCalls)
	inferHTTP(t, px.httpAddr, httpCalls)
	const grpcN = float64(grpcCalls)
	want := map[string]float64{"grpc": grpcN, "http": httpCalls}

	// Records reach the metrics off the data path, and the deltas on the
	// next polls: wait until both are in. A scrape is not a snapshot (it
	// can meet a record half observed), so the last family a record
	// updates that the checks below read is waited for too.
	var ss exposition.Page
	deadline := time.Now().Add(5 * time.Second)
	for {
		ss = px.scrape(t)
		settled := true
		for proto, n := range want {
			got, _ := ss.Sum("inferwatch_requests_total", map[string]string{"protocol": proto, "model": "mnist-mlp"})
			settled = settled && got == n
			// 5 phases and 4 server stages a call, each once.
			for f, per := range map[string]float64{"inferwatch_phase_duration_seconds_count": 5, "inferwatch_server_stage_duration_seconds_count": 4, "inferwatch_request_duration_seconds_count": 1} {
				got, _ := ss.Sum(f, map[string]string{"protocol": proto, "model": "mnist-mlp"})
				settled = settled && got == per*n
			}
		}
		v, _ := ss.Sum("inferwatch_triton_stage_count_total", tritonInfer)
		settled = settled && v >= grpcN+httpCalls
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	for proto, n := range want {
		l := map[string]string{"protocol": proto, "api": "kserve_v2", "method": "infer", "model": "mnist-mlp", "code": map[string]string{"grpc": "OK", "http": "200"}[proto]}
		if got, _ := ss.Sum("inferwatch_requests_total", l); got != n {
			t.Errorf("inferwatch_requests_total%v = %v, want %v", l, got, n)
		}
		m := map[string]string{"protocol": proto, "model": "mnist-mlp", "le": "+Inf"}
		if got, _ := ss.Sum("inferwatch_request_duration_seconds_bucket", m); got != n {
			t.Errorf("inferwatch_request_duration_seconds_bucket%v = %v, want %v", m, got, n)
		}
		for _, phase := range []string{"ingress", "upstream", "transfer", "egress", "decode"} {
			m := map[string]string{"protocol": proto, "model": "mnist-mlp", "phase": phase, "le": "+Inf"}
			if got, _ := ss.Sum("inferwatch_phase_duration_seconds_bucket", m); got != n {
				t.Errorf("inferwatch_phase_duration_seconds_bucket%v = %v, want %v", m, got, n)
			}
		}
		for _, stage := range []string{"queue", "preprocess", "infer", "postprocess"} {
			m := map[string]string{"protocol": proto, "model": "mnist-mlp", "stage": stage}
			if got, _ := ss.Sum("inferwatch_server_stage_duration_seconds_count", m); got != n {
				t.Errorf("inferwatch_server_stage_duration_seconds_count%v = %v, want %v (from Server-Timing)", m, got, n)
			}
		}
		// The histogram's buckets are cumulative: non-decreasing in le.
		var prev float64
		for _, s := range ss.Find("inferwatch_request_duration_seconds_bucket", map[string]string{"protocol": proto, "model": "mnist-mlp"}) {
			if s.Value < prev {
				t.Errorf("inferwatch_request_duration_seconds_bucket{le=%s} = %v after %v: not cumulative", s.Labels["le"], s.Value, prev)
			}
			prev = s.Value
		}
	}
	if got, _ := ss.Sum("inferwatch_errors_total", map[string]string{"model": "mnist-mlp"}); got != 0 {
		t.Errorf("inferwatch_errors_total{model=mnist-mlp} = %v, want 0", got)
	}
	secs, _ := ss.Sum("inferwatch_triton_stage_duration_seconds_total", tritonInfer)
	if secs <= 0 {
		t.Errorf("inferwatch_triton_stage_duration_seconds_total%v = %v, want > 0", tritonInfer, secs)
	}
	count, _ := ss.Sum("inferwatch_triton_stage_count_total", tritonInfer)
	inferences, _ := ss.Sum("inferwatch_triton_inference_count_total", map[string]string{"model": "mnist-mlp"})
	t.Logf("triton statistics: compute_infer %v s over %v executions, %v inferences, for %v calls", secs, count, inferences, grpcN+httpCalls)
	if count < grpcN+httpCalls {
		t.Errorf("inferwatch_triton_stage_count_total%v = %v, want at least the %v calls made", tritonInfer, count, grpcN+httpCalls)
	}

	// Every family of ours says what it is.
	_, text := px.adminGet(t, "/metrics")
	families := 0
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, "# HELP inferwatch_")
		if !ok {
			continue
		}
		families++
		if name, desc, _ := strings.Cut(rest, " "); strings.TrimSpace(desc) == "" {
			t.Errorf("inferwatch_%s has no # HELP text", name)
		}
	}
	if families < 20 {
		t.Errorf("only %d inferwatch_* families exposed", families)
	}
}

var tritonInfer = map[string]string{"model": "mnist-mlp", "stage": "compute_infer"}

// scrape fetches and parses the admin /metrics.
func (s *sidecarProc) scrape(t *testing.T) exposition.Page {
	t.Helper()
	code, text := s.adminGet(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	return parseMetrics(t, text)
}

// waitTritonBaseline waits for the first statistics poll of mnist-mlp. That
// poll is the baseline: calls made before it are history, not news, so a
// test waits for it before the calls it wants counted.
func waitTritonBaseline(t *testing.T, px *sidecarProc) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := px.scrape(t).Sum("inferwatch_triton_stage_duration_seconds_total", tritonInfer); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no inferwatch_triton_stage_duration_seconds_total for mnist-mlp: the statistics baseline never came")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2ETritonStatsCountedOnce checks that the statistics the model server
// reports reach the metrics once per call, whichever routes front it.
func TestE2ETritonStatsCountedOnce(t *testing.T) {
	tests := []struct {
		name                 string
		grpcCalls, httpCalls int
	}{
		{name: "grpc route", grpcCalls: 5},
		{name: "http route", httpCalls: 5},
		{name: "grpc and http routes", grpcCalls: 3, httpCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, msGRPC, msHTTP := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0")
			args := []string{"--admin-listen", "127.0.0.1:0", "--triton-stats-interval", "200ms"}
			if tt.grpcCalls > 0 {
				args = append(args, "--grpc-listen", "127.0.0.1:0", "--grpc-upstream", msGRPC)
			}
			if tt.httpCalls > 0 {
				args = append(args, "--http-listen", "127.0.0.1:0", "--http-upstream", msHTTP)
			}
			px := startProxy(t, args...)
			px.waitReady(t, 5*time.Second)
			waitTritonBaseline(t, px)
			inferGRPC(t, px.grpcAddr, tt.grpcCalls)
			inferHTTP(t, px.httpAddr, tt.httpCalls)
			calls := float64(tt.grpcCalls + tt.httpCalls)

			deadline := time.Now().Add(5 * time.Second)
			for {
				if v, _ := px.scrape(t).Sum("inferwatch_triton_execution_count_total", map[string]string{"model": "mnist-mlp"}); v >= calls {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("inferwatch_triton_execution_count_total{model=mnist-mlp} never reached %v", calls)
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(5 * 200 * time.Millisecond) // every poller has polled again since
			ss := px.scrape(t)
			got := map[string]float64{}
			for _, name := range []string{"inferwatch_triton_execution_count_total", "inferwatch_triton_inference_count_total"} {
				got[name], _ = ss.Sum(name, map[string]string{"model": "mnist-mlp"})
			}
			for _, stage := range []string{"success", "queue", "compute_input", "compute_infer", "compute_output"} {
				got["inferwatch_triton_stage_count_total/"+stage], _ = ss.Sum("inferwatch_triton_stage_count_total", map[string]string{"model": "mnist-mlp", "stage": stage})
			}
			for name, v := range got {
				if v != calls {
					t.Errorf("%s = %v, want %v (one per call)", name, v, calls)
				}
			}
		})
	}
}

// TestE2ETraceHostFacts checks that kept traces carry the host facts of
// their call's window, whole: the spans are built once the samples covering
// the call exist. (Joined when the record arrived, a 10 ms call found no
// sample: 0 of 50 demo traces had host attributes before.) Root loads the
// scheduler probes, as CI does.
func TestE2ETraceHostFacts(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "the scheduler probes need root")
	}
	_, msGRPC, msHTTP := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0")
	px := startProxy(t,
		"--grpc-listen", "127.0.0.1:0", "--grpc-upstream", msGRPC,
		"--http-listen", "127.0.0.1:0", "--http-upstream", msHTTP,
		"--admin-listen", "127.0.0.1:0", "--no-triton-stats")
	px.waitReady(t, 5*time.Second)
	const calls = 8
	inferGRPC(t, px.grpcAddr, calls/2)
	inferHTTP(t, px.httpAddr, calls/2)

	var got struct {
		Traces []struct {
			Spans []struct {
				Attributes map[string]any `json:"attributes"`
			} `json:"spans"`
		} `json:"traces"`
	}
	traces := &got.Traces
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, body := px.adminGet(t, "/api/v1/traces?limit=100")
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("/api/v1/traces: %v: %s", err, body)
		}
		if len(*traces) >= calls || time.Now().After(deadline) {
			break
		}
	}
	if len(*traces) < calls {
		t.Fatalf("%d traces kept, want %d", len(*traces), calls)
	}
	for i, tr := range *traces {
		a := tr.Spans[0].Attributes
		if _, ok := a["inference.sched.runqueue_delay_ms"]; !ok {
			t.Errorf("trace %d: no run-queue delay on the call span: %v", i, a)
		}
		if cov, _ := a["inference.host.coverage"].(float64); cov < 0.99 {
			t.Errorf("trace %d: host coverage %v, want the whole call", i, a["inference.host.coverage"])
		}
		if _, ok := a["inference.gpu.utilization"]; ok {
			t.Errorf("trace %d: GPU utilisation on a machine without NVML", i)
		}
	}
}

package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Readiness probe kinds.
const (
	ProbeAuto = "auto" // KServe v2 readiness if the upstream speaks it, else TorchServe's health, else reachability
	ProbeTCP  = "tcp"  // any answer at the HTTP/2 or HTTP/1.1 level counts
	ProbeNone = "none" // always ready
)

// Probe checks one upstream.
type Probe struct {
	Name      string
	Upstream  string // host:port
	GRPC      bool
	TLS       bool
	Kind      string
	Transport http.RoundTripper
	Timeout   time.Duration // default 1s
}

// Readiness is what /readyz reports: every upstream ready and not draining.
type Readiness struct {
	probes []Probe

	mu       sync.Mutex
	ready    []bool
	reasons  []string
	draining bool
}

// NewReadiness starts with every probed upstream not ready.
func NewReadiness(probes ...Probe) *Readiness {
	r := &Readiness{probes: probes, ready: make([]bool, len(probes)), reasons: make([]string, len(probes))}
	for i, p := range probes {
		r.reasons[i] = p.Name + ": not probed yet"
		if p.Kind == ProbeNone {
			r.ready[i], r.reasons[i] = true, ""
		}
	}
	return r
}

// Run probes every interval until ctx ends.
func (r *Readiness) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.ProbeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeOnce probes every upstream once.
func (r *Readiness) ProbeOnce(ctx context.Context) {
	for i, p := range r.probes {
		if p.Kind == ProbeNone {
			continue
		}
		ok, why := p.check(ctx)
		r.mu.Lock()
		r.ready[i] = ok
		r.reasons[i] = ""
		if !ok {
			r.reasons[i] = p.Name + ": " + why
		}
		r.mu.Unlock()
	}
}

// SetDraining makes Ready false for good: a draining sidecar takes no new work.
func (r *Readiness) SetDraining() {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
}

// Ready reports readiness and, when not ready, why.
func (r *Readiness) Ready() (bool, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return false, []string{"draining"}
	}
	var why []string
	for i, ok := range r.ready {
		if !ok {
			why = append(why, r.reasons[i])
		}
	}
	return len(why) == 0, why
}

// UpstreamReady reports whether upstream i answered its last probe.
func (r *Readiness) UpstreamReady(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready[i]
}

// grpcEmptyFrame is one uncompressed, empty gRPC message.
var grpcEmptyFrame = []byte{0, 0, 0, 0, 0}

func (p Probe) check(ctx context.Context) (bool, string) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	scheme := "http"
	if p.TLS {
		scheme = "https"
	}
	if p.GRPC {
		return p.checkGRPC(ctx, scheme)
	}
	res, err := p.get(ctx, scheme, "/v2/health/ready")
	if err != nil {
		return false, "unreachable: " + err.Error()
	}
	if p.Kind == ProbeTCP {
		return true, ""
	}
	switch {
	case res.StatusCode == http.StatusOK:
		return true, ""
	case res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusMethodNotAllowed:
		return p.healthRoutes(ctx, scheme) // no KServe health route
	}
	return false, "KServe /v2/health/ready answered " + res.Status
}

// grpcUnimplemented is the grpc-status of a method the server does not have.
const grpcUnimplemented = "12"

// checkGRPC asks a gRPC upstream KServe's ServerReady, and one without it
// TorchServe's Ping, whose answer says "Unhealthy" in its health text while
// a model's workers stay dead (with status OK). An upstream with neither is
// ready once reachable.
func (p Probe) checkGRPC(ctx context.Context, scheme string) (bool, string) {
	st, body, err := p.unary(ctx, scheme, "/inference.GRPCInferenceService/ServerReady")
	switch {
	case err != nil:
		return false, "unreachable: " + err.Error()
	case p.Kind == ProbeTCP:
		return true, ""
	case st == "0":
		// ServerReadyResponse{ready: true} is field 1, varint 1.
		if len(body) >= 7 && body[5] == 0x08 && body[6] == 0x01 {
			return true, ""
		}
		return false, "KServe ServerReady says not ready"
	case st != grpcUnimplemented:
		return false, "KServe ServerReady failed with grpc-status " + st
	}
	st, body, err = p.unary(ctx, scheme, "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
	switch {
	case err != nil:
		return false, "unreachable: " + err.Error()
	case st == "0" && bytes.Contains(body, []byte("Unhealthy")):
		return false, "TorchServe Ping says Unhealthy"
	}
	return true, "" // TorchServe healthy, or neither server: reachable is all we can know
}

// unary calls a gRPC method with an empty request and returns the status
// and the first KiB of the response body (prefix included).
func (p Probe) unary(ctx context.Context, scheme, method string) (string, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+p.Upstream+method, bytes.NewReader(grpcEmptyFrame))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	res, err := p.Transport.RoundTrip(req)
	if err != nil {
		return "", nil, err
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
	res.Body.Close()
	st := res.Trailer.Get("Grpc-Status")
	if st == "" {
		st = res.Header.Get("Grpc-Status") // a trailers-only answer
	}
	return st, body, nil
}

// get asks an HTTP upstream for path and returns its answer, the body read
// (up to 1 KiB) and closed.
func (p Probe) get(ctx context.Context, scheme, path string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+p.Upstream+path, nil)
	res, err := p.Transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<10))
	res.Body.Close()
	return res, nil
}

// healthRoutes asks an HTTP upstream without KServe's health route for the
// others servers answer: GET /ping (TorchServe: 500 while its workers are
// unhealthy; vLLM and other SageMaker-style servers: 503 while draining or
// dead), then GET /health (vLLM's and TGI's readiness probe: 503 likewise).
// A 5xx from either is not ready; any other answer, a 404 included, says
// nothing, and an upstream that says nothing is ready once reachable, as
// that is all that can be known.
func (p Probe) healthRoutes(ctx context.Context, scheme string) (bool, string) {
	for _, path := range []string{"/ping", "/health"} {
		res, err := p.get(ctx, scheme, path)
		if err != nil {
			return false, "unreachable: " + err.Error()
		}
		if res.StatusCode >= 500 {
			return false, path + " answered " + res.Status
		}
	}
	return true, ""
}

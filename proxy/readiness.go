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
	ProbeAuto = "auto" // KServe v2 readiness if the upstream speaks it (else TorchServe's /ping over HTTP), else reachability
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
	var req *http.Request
	if p.GRPC {
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+p.Upstream+"/inference.GRPCInferenceService/ServerReady", bytes.NewReader(grpcEmptyFrame))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+p.Upstream+"/v2/health/ready", nil)
	}
	res, err := p.Transport.RoundTrip(req)
	if err != nil {
		return false, "unreachable: " + err.Error()
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
	res.Body.Close()
	if p.Kind == ProbeTCP {
		return true, ""
	}
	if p.GRPC {
		st := res.Trailer.Get("Grpc-Status")
		if st == "" {
			st = res.Header.Get("Grpc-Status")
		}
		switch st {
		case "0":
			// ServerReadyResponse{ready: true} is field 1, varint 1.
			if len(body) >= 7 && body[5] == 0x08 && body[6] == 0x01 {
				return true, ""
			}
			return false, "KServe ServerReady says not ready"
		case "12":
			return true, "" // not a KServe server: reachable is all we can know
		}
		return false, "KServe ServerReady failed with grpc-status " + st
	}
	switch {
	case res.StatusCode == http.StatusOK:
		return true, ""
	case res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusMethodNotAllowed:
		return p.torchServePing(ctx, scheme) // no KServe health route
	}
	return false, "KServe /v2/health/ready answered " + res.Status
}

// torchServePing asks an HTTP upstream without KServe's health route for
// TorchServe's: GET /ping answers 200 while its workers are healthy and 500
// when not. An upstream without that either is ready once reachable, as
// that is all that can be known.
func (p Probe) torchServePing(ctx context.Context, scheme string) (bool, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+p.Upstream+"/ping", nil)
	res, err := p.Transport.RoundTrip(req)
	if err != nil {
		return false, "unreachable: " + err.Error()
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<10))
	res.Body.Close()
	if res.StatusCode == http.StatusInternalServerError {
		return false, "TorchServe /ping answered " + res.Status
	}
	return true, ""
}

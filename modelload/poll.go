package modelload

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// PollOptions configures a Poller. Exactly one of HTTPBase and GRPCAddr is set.
type PollOptions struct {
	HTTPBase string        // e.g. "http://127.0.0.1:8000" → POST {base}/v2/repository/index
	GRPCAddr string        // or a gRPC upstream "127.0.0.1:8001" → RepositoryIndex
	TLS      *tls.Config   // for an https HTTPBase or a TLS gRPC upstream
	Interval time.Duration // between polls; default 5s
	Logger   *slog.Logger  // default slog.Default()
}

// errNoIndex says the upstream has no repository index (not Triton, or an
// older one): polling stops, the calls passing through still count.
var errNoIndex = errors.New("upstream has no model repository index")

// maxIndexBody bounds the bytes one poll reads of the index answer, REST
// or gRPC (whose default 4 MiB receive limit a repository of some 50 000
// models passes). The REST answer is read entry by entry, so memory holds
// one entry and the models the tracker follows, not the answer.
const maxIndexBody = 64 << 20

// Poller asks the upstream for its repository index (Triton's model
// repository extension) every interval and tells the Tracker which models
// are ready, so that readiness changes nobody asked about through the
// sidecar are seen too: a model Triton's poll mode loaded or unloaded. Only
// models a call has named are followed, so the index of a large repository
// takes no label slots.
type Poller struct {
	t        *Tracker
	interval time.Duration
	log      *slog.Logger
	target   string
	fetch    func(ctx context.Context) (map[string]bool, error)
	close    func() error
}

// NewPoller returns a Poller feeding t; nothing is contacted until a poll.
func (t *Tracker) NewPoller(o PollOptions) (*Poller, error) {
	if (o.HTTPBase == "") == (o.GRPCAddr == "") {
		return nil, errors.New("modelload: set exactly one of HTTPBase and GRPCAddr")
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &Poller{t: t, interval: o.Interval, log: o.Logger}
	if o.GRPCAddr != "" {
		creds := insecure.NewCredentials()
		if o.TLS != nil {
			creds = credentials.NewTLS(o.TLS)
		}
		conn, err := grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxIndexBody)))
		if err != nil {
			return nil, fmt.Errorf("modelload: gRPC client for %q: %w", o.GRPCAddr, err)
		}
		client := inference.NewGRPCInferenceServiceClient(conn)
		p.target, p.close = "grpc://"+o.GRPCAddr, conn.Close
		p.fetch = func(ctx context.Context) (map[string]bool, error) {
			resp, err := client.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
			if status.Code(err) == codes.Unimplemented {
				return nil, errNoIndex
			}
			if err != nil {
				return nil, fmt.Errorf("RepositoryIndex: %w", err)
			}
			out := map[string]bool{}
			for _, m := range resp.GetModels() {
				if t.follows(m.GetName()) {
					out[m.GetName()] = out[m.GetName()] || m.GetState() == "READY"
				}
			}
			return out, nil
		}
		return p, nil
	}
	tr := &http.Transport{TLSClientConfig: o.TLS, MaxIdleConnsPerHost: 1}
	hc := &http.Client{Transport: tr, Timeout: o.Interval}
	url := strings.TrimRight(o.HTTPBase, "/") + "/v2/repository/index"
	p.target, p.close = url, func() error { tr.CloseIdleConnections(); return nil }
	p.fetch = func(ctx context.Context) (map[string]bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
			return nil, errNoIndex // 404, 405, 400: not a server with the extension
		case resp.StatusCode != http.StatusOK:
			return nil, fmt.Errorf("index: status %d", resp.StatusCode)
		}
		return t.readIndex(&io.LimitedReader{R: resp.Body, N: maxIndexBody + 1})
	}
	return p, nil
}

// readIndex reads a REST repository index, [{"name", "state", ...}, ...],
// one entry at a time, keeping the models t follows. An answer that is no
// JSON array of objects is errNoIndex; one cut short (past maxIndexBody,
// or by the connection) is an index that failed to arrive, and polling goes
// on.
func (t *Tracker) readIndex(r *io.LimitedReader) (map[string]bool, error) {
	dec := json.NewDecoder(r)
	failed := func(err error) error {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return fmt.Errorf("%w: the answer is not an index: %v", errNoIndex, err)
		case r.N <= 0:
			return fmt.Errorf("index answer over %d MiB, not read: %w", maxIndexBody>>20, err)
		}
		return fmt.Errorf("read index: %w", err)
	}
	tok, err := dec.Token()
	var syntaxErr *json.SyntaxError
	if errors.Is(err, io.EOF) || errors.As(err, &syntaxErr) || err == nil && tok != json.Delim('[') {
		return nil, fmt.Errorf("%w: the answer is not an index (%v)", errNoIndex, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	out := map[string]bool{}
	for dec.More() {
		var m struct {
			Name  string `json:"name"`
			State string `json:"state"`
		}
		if err := dec.Decode(&m); err != nil {
			return nil, failed(err)
		}
		if t.follows(m.Name) {
			out[m.Name] = out[m.Name] || m.State == "READY"
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, failed(err)
	}
	return out, nil
}

// Poll asks once and hands the answer to the Tracker.
func (p *Poller) Poll(ctx context.Context) error {
	start := time.Now()
	ready, err := p.fetch(ctx)
	if err != nil {
		return err
	}
	p.t.observeIndex(ready, start, time.Now())
	return nil
}

// Run polls every interval until ctx ends, or until the upstream turns out
// to have no repository index. Failures are logged when they start and when
// they end.
func (p *Poller) Run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	failing := false
	for {
		pctx, cancel := context.WithTimeout(ctx, p.interval)
		err := p.Poll(pctx)
		cancel()
		switch {
		case errors.Is(err, errNoIndex):
			p.log.Info("model readiness polling off: the upstream has no repository index; loads and readiness calls passing through still count", "target", p.target)
			return
		case err != nil && !failing && ctx.Err() == nil:
			p.log.Warn("model readiness poll failing", "target", p.target, "err", err)
			failing = true
		case err == nil && failing:
			p.log.Info("model readiness poll recovered", "target", p.target)
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Close releases the connection.
func (p *Poller) Close() error { return p.close() }

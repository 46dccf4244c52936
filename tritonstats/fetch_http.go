package tritonstats

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxStatsBody bounds the statistics document read from the upstream; a
// server with thousands of model versions stays well below it.
const maxStatsBody = 32 << 20

// httpFetcher reads GET {base}/v2/models/stats. Its errors leave the URL to
// the Poller, which names the target.
type httpFetcher struct {
	url    string
	client *http.Client
}

func newHTTPFetcher(base string, tlsConf *tls.Config) (*httpFetcher, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("parse HTTP base %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("HTTP base %q: want http://host:port or https://host:port", base)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the upstream is the pod's own server, never behind a proxy
	tr.TLSClientConfig = tlsConf
	return &httpFetcher{
		url:    strings.TrimRight(base, "/") + "/v2/models/stats",
		client: &http.Client{Transport: tr, Timeout: time.Minute},
	}, nil
}

func (f *httpFetcher) target() string { return f.url }

func (f *httpFetcher) fetch(ctx context.Context) (map[modelKey]counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err // names the method and URL; Poller adds the target too
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatsBody+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %q", resp.StatusCode, snippet(body))
	}
	if len(body) > maxStatsBody {
		return nil, fmt.Errorf("body larger than %d bytes", maxStatsBody)
	}
	return parseStats(body)
}

func (f *httpFetcher) close() error {
	f.client.CloseIdleConnections()
	return nil
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

// The REST document. Servers differ on integer encoding: Triton writes JSON
// numbers, protobuf's JSON mapping of uint64 writes strings; both are read.
type restStats struct {
	ModelStats []restModel `json:"model_stats"`
}

type restModel struct {
	Name           flexString              `json:"name"`
	Version        flexString              `json:"version"`
	InferenceCount flexUint                `json:"inference_count"`
	ExecutionCount flexUint                `json:"execution_count"`
	InferenceStats map[string]restDuration `json:"inference_stats"`
}

type restDuration struct {
	Count flexUint `json:"count"`
	Ns    flexUint `json:"ns"`
}

func parseStats(body []byte) (map[modelKey]counters, error) {
	var doc restStats
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode statistics: %w", err)
	}
	out := make(map[modelKey]counters, len(doc.ModelStats))
	for _, m := range doc.ModelStats {
		c := counters{inferences: uint64(m.InferenceCount), executions: uint64(m.ExecutionCount)}
		for i, name := range Stages {
			d := m.InferenceStats[name]
			c.stages[i] = duration{uint64(d.Count), uint64(d.Ns)}
		}
		out[modelKey{string(m.Name), string(m.Version)}] = c
	}
	return out, nil
}

// flexUint is a uint64 written as a JSON number or a decimal string.
type flexUint uint64

func (u *flexUint) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("counter %s: want a non-negative integer", b)
	}
	*u = flexUint(v)
	return nil
}

// flexString is a string that some servers write as a number (versions).
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("name or version %s: want a string or a number", b)
	}
	*f = flexString(n.String())
	return nil
}

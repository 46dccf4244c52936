package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestSoakHTTP is TestSoakMixed for HTTP/1.1: soakCalls calls of every
// kind — GET, HEAD, POST with a known length or chunked, 0 B to 1 MiB,
// KServe v2 JSON infer calls, answers of known and unknown length, with
// trailers, error statuses — through the proxy on the plane under test
// (INFERWATCH_DATA_PLANE: on frame, the h1 loop) and straight to the
// upstream, checking that the client sees the same status, fields,
// trailers and bytes both ways and that every call was recorded.
func TestSoakHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("10^5 calls")
	}
	up := soakHTTPUpstream(t)
	h := newHarness(t, up, false)
	bufsOut := bodyBufsOut.Load()
	tr := &http.Transport{MaxIdleConnsPerHost: 32, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	n := soakCalls
	differ, first := soak(n, func(i int) error {
		r := rand.New(rand.NewPCG(uint64(i), 11))
		method, path, hdr, body, chunked := soakHTTPCall(r)
		a, errA := soakHTTPDo(c, method, "http://"+up+path, hdr, body, chunked)
		b, errB := soakHTTPDo(c, method, "http://"+h.addr+path, hdr, body, chunked)
		var err error
		switch {
		case errA != nil || errB != nil:
			err = fmt.Errorf("direct: %v, proxied: %v", errA, errB)
		case a.status != b.status:
			err = fmt.Errorf("status %d, proxied %d", a.status, b.status)
		case headerString(a.header) != headerString(b.header):
			err = fmt.Errorf("fields\n%s\nproxied\n%s", headerString(a.header), headerString(b.header))
		case headerString(a.trailer) != headerString(b.trailer):
			err = fmt.Errorf("trailers %q, proxied %q", a.trailer, b.trailer)
		case !bytes.Equal(a.body, b.body):
			err = fmt.Errorf("bodies of %d and %d bytes differ", len(a.body), len(b.body))
		}
		if err != nil {
			return fmt.Errorf("call %d %s %s: %w", i, method, path, err)
		}
		return nil
	})
	if differ > 0 {
		t.Errorf("%d of %d HTTP calls differed through the proxy (%s plane); first: %v", differ, n, testDataPlane(), first)
	}
	recs := h.waitRecords(n)
	if len(recs) != n {
		t.Errorf("%d records for %d calls", len(recs), n)
	}
	if dropped := h.pipeline.Dropped(); dropped > 0 {
		t.Errorf("%d records dropped", dropped)
	}
	// Every pooled body buffer came back once its readers and its decode
	// were through (a transport may close a body just after the record).
	for end := time.Now().Add(5 * time.Second); bodyBufsOut.Load() != bufsOut && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if out := bodyBufsOut.Load() - bufsOut; out != 0 {
		t.Errorf("%d pooled body buffers not given back", out)
	}
	t.Logf("%d HTTP calls through the %s plane, each identical to direct", n, testDataPlane())
}

// soakHTTPUpstream answers /soak/{seed} from the seed (status, size, framing,
// trailers) and says what body it received; /v2/models/{m}/infer echoes.
func soakHTTPUpstream(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/soak/{seed}", func(w http.ResponseWriter, r *http.Request) {
		got, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		seed, _ := strconv.ParseUint(r.PathValue("seed"), 10, 64)
		rr := rand.New(rand.NewPCG(seed, 3))
		sum := sha256.Sum256(got)
		w.Header().Set("X-Got", fmt.Sprintf("%d %s %s", len(got), hex.EncodeToString(sum[:8]), r.Header.Get("X-Soak")))
		status := []int{200, 200, 200, 201, 404, 500, 503}[rr.IntN(7)]
		size := []int{0, 1, 300, 5000, 70 << 10, 1 << 20}[rr.IntN(6)]
		if size == 1<<20 && rr.IntN(8) != 0 {
			size = 300
		}
		out := make([]byte, size)
		for i := range out {
			out[i] = byte(seed) + byte(i*7)
		}
		known := rr.IntN(2) == 0
		// Trailers only where they can be sent (chunked). A Trailer field
		// announcing nothing, on a response of known length or a HEAD, is
		// dropped by the proxy as hop-by-hop, as httputil.ReverseProxy does.
		trailer := !known && r.Method != http.MethodHead && rr.IntN(2) == 0
		if known {
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		if trailer {
			w.Header().Set("Trailer", "X-Sum")
		}
		w.WriteHeader(status)
		half := size / 2
		w.Write(out[:half])
		if !known {
			w.(http.Flusher).Flush() // unknown length: chunked on the wire
		}
		w.Write(out[half:])
		if trailer {
			w.Header().Set("X-Sum", strconv.Itoa(size))
		}
	})
	mux.HandleFunc("POST /v2/models/{m}/infer", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(bytes.Replace(body, []byte(`"inputs"`), []byte(`"outputs"`), 1))
	})
	l := listen(t)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// soakHTTPCall draws one call.
func soakHTTPCall(r *rand.Rand) (method, path string, hdr http.Header, body []byte, chunked bool) {
	hdr = http.Header{"X-Soak": {strconv.Itoa(r.IntN(1000))}}
	if r.IntN(5) == 0 {
		n := 1 + r.IntN(64)
		var b bytes.Buffer
		b.WriteString(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,` + strconv.Itoa(n) + `],"data":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%.3f", r.Float64())
		}
		b.WriteString(`]}]}`)
		return http.MethodPost, "/v2/models/m" + strconv.Itoa(r.IntN(3)) + "/infer", hdr, b.Bytes(), r.IntN(4) == 0
	}
	path = "/soak/" + strconv.FormatUint(r.Uint64()%1e9, 10)
	switch r.IntN(4) {
	case 0:
		return http.MethodGet, path, hdr, nil, false
	case 1:
		return http.MethodHead, path, hdr, nil, false
	}
	size := []int{0, 8, 9 << 10, 100 << 10, 1 << 20}[r.IntN(5)]
	if size == 1<<20 && r.IntN(8) != 0 {
		size = 8
	}
	body = make([]byte, size)
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	return http.MethodPost, path, hdr, body, r.IntN(3) == 0
}

// soakHTTPDo makes one call; a chunked body is sent with no length.
func soakHTTPDo(c *http.Client, method, url string, hdr http.Header, body []byte, chunked bool) (httpOutcome, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return httpOutcome{}, err
	}
	req.Header = hdr.Clone()
	res, err := c.Do(req)
	if err != nil {
		return httpOutcome{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return httpOutcome{}, err
	}
	return httpOutcome{res.StatusCode, res.Header, res.Trailer, b}, nil
}

package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// httpUpstream is the reference server the HTTP tests talk to, directly and
// through the proxy.
func httpUpstream(t *testing.T) (string, chan http.Header) {
	t.Helper()
	seen := make(chan http.Header, 64)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/{m}/infer", func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Server-Timing", `preprocess;dur=1.5, infer;dur=7;desc="gpu"`)
		if v := r.Header.Get("Inference-Header-Content-Length"); v != "" {
			// Answer in kind: the inputs come back as outputs.
			n, _ := strconv.Atoi(v)
			if n > len(body) {
				n = len(body)
			}
			hdr := strings.Replace(string(body[:n]), `"inputs"`, `"outputs"`, 1)
			body = append([]byte(hdr), body[n:]...)
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(hdr)))
			w.Header().Set("Content-Type", "application/octet-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if !json.Valid(body) && r.Header.Get("Inference-Header-Content-Length") == "" {
			w.WriteHeader(http.StatusBadRequest)
		}
		w.Write(body)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 5; i++ {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	mux.HandleFunc("GET /chunked", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		for i := 0; i < 5; i++ {
			fmt.Fprintf(w, "chunk-%d;", i)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	mux.HandleFunc("GET /hop", func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "1")
		w.Header().Set("X-End", "2")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "short and stout")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Unknown", r.URL.RequestURI())
		http.Error(w, "nothing here", http.StatusNotFound)
	})
	l := listen(t)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), seen
}

// httpOutcome is what an HTTP client observes.
type httpOutcome struct {
	status  int
	header  http.Header
	trailer http.Header
	body    []byte
}

func doHTTP(t *testing.T, c *http.Client, method, url string, hdr http.Header, body []byte) httpOutcome {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return httpOutcome{res.StatusCode, res.Header, res.Trailer, b}
}

func headerString(h http.Header) string {
	var keys []string
	for k := range h {
		if k == "Date" {
			continue
		}
		keys = append(keys, k+"="+strings.Join(h[k], "|"))
	}
	sort.Strings(keys)
	return strings.Join(keys, "\n")
}

func binaryInferBody() ([]byte, string) {
	hdr := `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","parameters":{"binary_data_size":32}}]}`
	body := append([]byte(hdr), bytes.Repeat([]byte{1, 2, 3, 4}, 8)...)
	return body, strconv.Itoa(len(hdr))
}

func TestHTTPTransparent(t *testing.T) {
	up, seen := httpUpstream(t)
	h := newHarness(t, up, false)
	h1 := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: p, DisableCompression: true}}

	jsonBody := []byte(`{"inputs":[{"name":"x","shape":[3,2],"datatype":"FP32","data":[1,2,3,4,5,6]}]}`)
	bin, binLen := binaryInferBody()
	tests := []struct {
		name, method, path string
		hdr                http.Header
		body               []byte
	}{
		{"v2 json", "POST", "/v2/models/mlp/infer", http.Header{"Content-Type": {"application/json"}}, jsonBody},
		{"v2 binary", "POST", "/v2/models/mlp/infer", http.Header{"Inference-Header-Content-Length": {binLen}, "Content-Type": {"application/octet-stream"}}, bin},
		{"v2 malformed json", "POST", "/v2/models/mlp/infer", http.Header{"Content-Type": {"application/json"}}, []byte(`{"inputs":[{"name":`)},
		{"chunked with trailers", "GET", "/chunked", nil, nil},
		{"sse", "POST", "/v1/chat/completions", http.Header{"Content-Type": {"application/json"}}, []byte(`{"model":"toy-llm","stream":true}`)},
		{"hop-by-hop", "GET", "/hop", http.Header{"Connection": {"X-Client-Hop"}, "X-Client-Hop": {"1"}}, nil},
		{"unknown 404", "GET", "/some/where?q=1", nil, nil},
	}
	for _, client := range []struct {
		name string
		c    *http.Client
	}{{"http1", h1}, {"h2c", h2c}} {
		for _, tt := range tests {
			if client.name == "h2c" && tt.name == "hop-by-hop" {
				continue // an HTTP/2 client may not send Connection at all
			}
			t.Run(client.name+"/"+tt.name, func(t *testing.T) {
				a := doHTTP(t, h1, tt.method, "http://"+up+tt.path, tt.hdr, tt.body)
				b := doHTTP(t, client.c, tt.method, "http://"+h.addr+tt.path, tt.hdr, tt.body)
				if a.status != b.status || !bytes.Equal(a.body, b.body) {
					t.Fatalf("direct %d %q, proxied %d %q", a.status, a.body, b.status, b.body)
				}
				if tt.name != "hop-by-hop" && headerString(a.header) != headerString(b.header) {
					t.Errorf("headers differ:\n%s\n---\n%s", headerString(a.header), headerString(b.header))
				}
				if headerString(a.trailer) != headerString(b.trailer) {
					t.Errorf("trailers differ:\n%s\n---\n%s", headerString(a.trailer), headerString(b.trailer))
				}
				if tt.name == "hop-by-hop" {
					if b.header.Get("X-Hop") != "" || b.header.Get("X-End") != "2" {
						t.Errorf("hop-by-hop response header passed or end-to-end one lost: %v", b.header)
					}
				}
			})
		}
	}
	// Through the proxy the upstream never sees a hop-by-hop header.
	for len(seen) > 0 {
		<-seen
	}
	doHTTP(t, h1, "GET", "http://"+h.addr+"/hop", http.Header{"Connection": {"X-Client-Hop"}, "X-Client-Hop": {"1"}, "Keep-Alive": {"timeout=5"}}, nil)
	if got := <-seen; got.Get("X-Client-Hop") != "" || got.Get("Keep-Alive") != "" {
		t.Errorf("upstream saw hop-by-hop headers: %v", got)
	}
	recs := h.waitRecords(2 * len(tests))
	var json1, bin1, bad, sse *record.Call
	for _, r := range recs {
		switch {
		case r.Method == "infer" && r.DecodeFail:
			bad = r
		case r.Method == "infer" && r.InputCount == 1 && r.Inputs[0].Shape[0] == 3:
			json1 = r
		case r.Method == "infer" && r.InputCount == 1:
			bin1 = r
		case r.API == record.APIOpenAI:
			sse = r
		}
	}
	if json1 == nil || json1.Model != "mlp" || json1.BatchSize != 3 || json1.Inputs[0].Bytes != 24 || len(json1.Stages) != 2 {
		t.Errorf("v2 JSON record: %+v", json1)
	}
	if bin1 == nil || bin1.Inputs[0].Bytes != 32 {
		t.Errorf("binary extension record: %+v", bin1)
	}
	if bad == nil || bad.Code != "400" {
		t.Errorf("malformed JSON not counted as a decode failure: %+v", bad)
	}
	if sse == nil || sse.Model != "toy-llm" || !sse.Stream {
		t.Errorf("OpenAI SSE record: %+v", sse)
	}
}

func TestHTTPStreamsAsItArrives(t *testing.T) {
	// The upstream sends the first event, then holds the rest until the
	// client has read it (or 10 s pass). Streamed, the client reads it while
	// the upstream still holds the stream open; buffered to the end, it
	// reads it only after the upstream gave up waiting and ended. No clock
	// of the client's is compared, so a loaded machine cannot fail it.
	readFirst := make(chan struct{})
	ended := make(chan struct{})
	l := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"i\":0}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-readFirst:
		case <-time.After(10 * time.Second):
		}
		for i := 1; i < 5; i++ {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})}
	go up.Serve(l)
	t.Cleanup(func() { up.Close() })
	h := newHarness(t, l.Addr().String(), false)
	req, _ := http.NewRequest("POST", "http://"+h.addr+"/v1/chat/completions", strings.NewReader(`{"model":"toy-llm","stream":true}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 64)
	n, _ := res.Body.Read(buf)
	select {
	case <-ended:
		t.Fatalf("first event %q read only after the upstream ended: not streamed", buf[:n])
	default:
	}
	close(readFirst)
	if !strings.HasPrefix(string(buf[:n]), "data: {\"i\":0}") {
		t.Fatalf("first read %q", buf[:n])
	}
	rest, err := io.ReadAll(res.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: {\"i\":4}\n\ndata: [DONE]\n\n") {
		t.Fatalf("rest of the stream %q, %v", rest, err)
	}
}

// TestHTTPClientLeavesMidCall: a client that closes its connection while
// the server is still working has the upstream request cancelled and the
// call recorded as the client's cancel, on both data planes (the frame
// plane's HTTP/1.1 loop watches through the sniffing wrapper's descriptor).
func TestHTTPClientLeavesMidCall(t *testing.T) {
	cancelled := make(chan struct{})
	l := listen(t)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})}
	go up.Serve(l)
	t.Cleanup(func() { up.Close() })
	h := newHarness(t, l.Addr().String(), false)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"inputs":[]}`
	fmt.Fprintf(c, "POST /v2/models/m/infer HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	time.Sleep(100 * time.Millisecond)
	c.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request went on after its client left")
	}
	if rec := h.waitRecords(1)[0]; rec.ErrorKind != record.ErrClientCancel {
		t.Errorf("error kind %q, want %q", rec.ErrorKind, record.ErrClientCancel)
	}
}

// TestHTTPCompressedBodiesNotDecodeFailures: a body under Content-Encoding
// (a gzip request, a server answering a client's Accept-Encoding in kind) is
// not JSON to the decoders, so it is forwarded untouched and not counted as
// a decode failure — on every call it would be, and the error rate with it.
func TestHTTPCompressedBodiesNotDecodeFailures(t *testing.T) {
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		w.Write(b)
		w.Close()
		return out.Bytes()
	}
	const reply = `{"model_name":"mlp","outputs":[{"name":"y","shape":[1],"datatype":"FP32","data":[1]}]}`
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/{m}/infer", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if body, err = io.ReadAll(zr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		if !json.Valid(body) {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz([]byte(reply)))
			return
		}
		io.WriteString(w, reply)
	})
	l := listen(t)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	h := newHarness(t, l.Addr().String(), false)

	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	clients := []struct {
		name string
		c    *http.Client
	}{
		{"http1", &http.Client{Transport: &http.Transport{DisableCompression: true}}},
		{"h2c", &http.Client{Transport: &http.Transport{Protocols: p, DisableCompression: true}}},
	}
	req := []byte(`{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`)
	tests := []struct {
		name      string
		hdr       http.Header
		body      []byte
		wantBatch int // the request decoded: a plain one is
	}{
		{"gzip request", http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, gz(req), 0},
		{"gzip response", http.Header{"Content-Type": {"application/json"}, "Accept-Encoding": {"gzip"}}, req, 1},
		{"both", http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}, "Accept-Encoding": {"gzip"}}, gz(req), 0},
	}
	for _, cl := range clients {
		for _, tt := range tests {
			o := doHTTP(t, cl.c, "POST", "http://"+h.addr+"/v2/models/mlp/infer", tt.hdr, tt.body)
			if o.status != http.StatusOK {
				t.Fatalf("%s/%s: status %d: %s", cl.name, tt.name, o.status, o.body)
			}
			if want := tt.hdr.Get("Accept-Encoding") != ""; (o.header.Get("Content-Encoding") == "gzip") != want {
				t.Fatalf("%s/%s: response Content-Encoding %q", cl.name, tt.name, o.header.Get("Content-Encoding"))
			}
		}
	}
	recs := h.waitRecords(len(clients) * len(tests))
	for i, r := range recs {
		tt := tests[i%len(tests)]
		if r.DecodeFail || r.ErrorKind != record.ErrNone || r.Code != "200" {
			t.Errorf("%s: decode failed %v, error %q, code %q", tt.name, r.DecodeFail, r.ErrorKind, r.Code)
		}
		if r.BatchSize != tt.wantBatch {
			t.Errorf("%s: batch %d, want %d", tt.name, r.BatchSize, tt.wantBatch)
		}
	}
}

// TestHTTPClientAbortsUpload: a client that leaves in the middle of a
// streamed request body cancelled its own call; the record must not blame
// the upstream (a 502 upstream_unavailable would page the model's owners).
func TestHTTPClientAbortsUpload(t *testing.T) {
	up, _ := httpUpstream(t)
	for _, tc := range []struct {
		name string
		head string
	}{
		{"content-length", "Content-Length: 200000\r\n"},
		{"chunked", "Transfer-Encoding: chunked\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, up, false)
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			body := strings.Repeat("a", 100000)
			if tc.name == "chunked" {
				body = fmt.Sprintf("%x\r\n%s", 200000, body)
			}
			fmt.Fprintf(c, "POST /v2/models/m/infer HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\n%s\r\n%s", tc.head, body)
			time.Sleep(100 * time.Millisecond)
			c.Close()
			rec := h.waitRecords(1)[0]
			if rec.ErrorKind != record.ErrClientCancel || rec.Code != "499" {
				t.Errorf("record: kind %q code %q, want %q 499", rec.ErrorKind, rec.Code, record.ErrClientCancel)
			}
		})
	}
}

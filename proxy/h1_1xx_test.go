package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// An upstream's interim answer (102 Processing, 103 Early Hints) is not
// its response: the client gets the final one, and the next call on the
// same upstream connection gets its own.
func TestHTTPUpstreamInterimResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusProcessing)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "final "+r.URL.Path)
	}))
	defer srv.Close()
	h := newHarness(t, strings.TrimPrefix(srv.URL, "http://"), false)
	c := &http.Client{}
	for _, path := range []string{"/a", "/b", "/c"} {
		res, err := c.Get("http://" + h.addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(b) != "final "+path {
			t.Errorf("GET %s: %d %q, want 200 %q", path, res.StatusCode, b, "final "+path)
		}
	}
	for _, rec := range h.waitRecords(3) {
		if rec.Code != "200" {
			t.Errorf("record code %q, want 200", rec.Code)
		}
	}
}

// TestHTTPExpectContinueUpstream: a client's Expect: 100-continue goes to
// the upstream, which answers 100 Continue as it reads the body and its
// final answer later. The call ends with that answer; it hung, waiting
// for a byte after the answer's head.
func TestHTTPExpectContinueUpstream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // net/http sends the 100 Continue here
		time.Sleep(50 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	defer srv.Close()
	h := newHarness(t, strings.TrimPrefix(srv.URL, "http://"), false)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"inputs":[]}`
	fmt.Fprintf(c, "POST /v2/models/m/infer HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	for err == nil && res.StatusCode == http.StatusContinue {
		res, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(b) != body {
		t.Fatalf("answer %d %q, want 200 %q", res.StatusCode, b, body)
	}
}

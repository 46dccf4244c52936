package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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

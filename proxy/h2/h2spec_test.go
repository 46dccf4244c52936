package h2_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/proxy/h2"
)

// nopObserver watches nothing: conformance is about the forwarder alone.
type nopObserver struct{}

func (nopObserver) Open(_ time.Time, f []hpack.HeaderField) (h2.Watcher, []hpack.HeaderField) {
	return nopWatcher{}, f
}

type nopWatcher struct{}

func (nopWatcher) RequestData([]byte) error                  { return nil }
func (nopWatcher) ResponseHeaders([]hpack.HeaderField, bool) {}
func (nopWatcher) ResponseData([]byte)                       {}
func (nopWatcher) Done(*h2.Events)                           {}

// startUpstream runs an h2c server that reads the request body and answers
// with a body after delay, as a model server would after its compute.
func startUpstream(t testing.TB, delay time.Duration) string {
	t.Helper()
	return startHandlerUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		time.Sleep(delay)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Trailer", "X-Request-Bytes")
		io.WriteString(w, "inferwatch upstream\n")
		w.Header().Set("X-Request-Bytes", strconv.FormatInt(n, 10))
	}))
}

// startHandlerUpstream runs an h2c server with handler h.
func startHandlerUpstream(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// startForwarder runs the frame plane in front of upstream and returns its
// address.
func startForwarder(t testing.TB, upstream string, obs h2.Observer, tweak ...func(*h2.Options)) (string, *h2.Server) {
	t.Helper()
	o := h2.Options{
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", upstream)
		},
		Observer: obs,
	}
	for _, f := range tweak {
		f(&o)
	}
	s, err := h2.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.ServeConn(c)
		}
	}()
	t.Cleanup(func() { l.Close(); s.Close() })
	return l.Addr().String(), s
}

// h2specBinary finds h2spec at $INFERWATCH_H2SPEC or <repo>/bin/h2spec
// (built from tools/h2spec by .ci/run).
func h2specBinary(t *testing.T) string {
	t.Helper()
	return testenv.ToolBinary(t, filepath.Join("..", ".."), "h2spec", "INFERWATCH_H2SPEC", "cd tools/h2spec && go build -o ../../bin/h2spec github.com/summerwind/h2spec/cmd/h2spec")
}

var h2specSummary = regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`)

// TestH2Spec runs the h2spec conformance suite (RFC 9113 and RFC 7541,
// every section) against the forwarder in front of a net/http h2c upstream:
// every test must pass.
func TestH2Spec(t *testing.T) {
	bin := h2specBinary(t)
	up := startUpstream(t, 20*time.Millisecond)
	addr, _ := startForwarder(t, up, nopObserver{})
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(bin, "-h", host, "-p", port, "-o", "5").CombinedOutput()
	m := h2specSummary.FindSubmatch(out)
	if m == nil {
		t.Fatalf("h2spec printed no summary (%v):\n%s", err, out)
	}
	t.Logf("h2spec: %s", m[0])
	if string(m[4]) != "0" || err != nil {
		t.Errorf("h2spec failed (%v):\n%s", err, out)
	}
}

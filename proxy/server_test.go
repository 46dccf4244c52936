package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// brokenListener fails every accept for good, as a socket broken
// underneath the server does.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errors.New("accept: broken") }

// TestServeReportsOneListenerFailing: with several routes, one listener
// stopping on its own must end Serve at once (Sidecar.Err, so the process
// drains and exits non-zero), not only once every other listener stops
// too — until Shutdown, that is never, and the dead route stayed unnoticed
// while /readyz said ready.
func TestServeReportsOneListenerFailing(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	s := NewServer(slog.New(slog.DiscardHandler),
		Listener{Name: "broken", Addr: "127.0.0.1:0", Handler: ok},
		Listener{Name: "fine", Addr: "127.0.0.1:0", Handler: ok})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	s.nls[0] = brokenListener{s.nls[0]}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		s.nls[0].Close()
	}()
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "listener broken") {
			t.Fatalf("Serve: %v, want the broken listener's error", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve still running 3s after a listener failed, while another still serves")
	}
}

package inject

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/inferwatch/inferwatch/admin"
	"github.com/inferwatch/inferwatch/proxy"
)

// ServeOptions says where the webhook listens.
type ServeOptions struct {
	Listen      string // TLS listener for the apiserver, e.g. :8443
	CertFile    string // reloaded when it changes (a rotated Secret), no restart
	KeyFile     string
	AdminListen string // /metrics, /healthz, /readyz; loopback by default
	// Events, when set, is where the injector posts a Kubernetes Event for
	// every pod it refused; nil: the annotation and the admission warning only.
	Events *APIServer
	// Instance names this replica in its Events (default: the host name,
	// which in a pod is the pod's name).
	Instance string
	// EventSeriesInterval is the least time between two writes of one
	// Event: a refusal repeated sooner is counted and the Event's series
	// updated later (0: DefaultSeriesInterval, 30 s).
	EventSeriesInterval time.Duration
	// Ready, when set, receives the bound addresses once both listen.
	Ready func(webhook, admin net.Addr)
}

// Serve runs the webhook until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, opts ServeOptions, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if opts.CertFile == "" || opts.KeyFile == "" {
		return fmt.Errorf("inject: tls-cert and tls-key: both are required (the apiserver calls webhooks over HTTPS only)")
	}
	wh := NewWebhook(cfg, logger)
	if opts.Events != nil {
		instance := opts.Instance
		if instance == "" {
			instance, _ = os.Hostname()
		}
		ev, err := NewEvents(*opts.Events, instance, opts.EventSeriesInterval, wh.Metrics, logger)
		if err != nil {
			return err
		}
		wh.Events = ev
		evCtx, stopEvents := context.WithCancel(ctx)
		evDone := make(chan struct{})
		go func() { ev.Run(evCtx); close(evDone) }()
		// At return, after the servers' shutdown below: the last counts
		// are flushed once no refusal can come.
		defer func() { stopEvents(); <-evDone }()
	}
	tlsCfg, err := proxy.ServerTLS(proxy.TLSFiles{CertFile: opts.CertFile, KeyFile: opts.KeyFile}, logger)
	if err != nil {
		return fmt.Errorf("inject: tls-cert/tls-key: %w", err)
	}
	tlsCfg.NextProtos = []string{"http/1.1"}
	wl, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("inject: listen %s: %w", opts.Listen, err)
	}
	al, err := net.Listen("tcp", opts.AdminListen)
	if err != nil {
		wl.Close()
		return fmt.Errorf("inject: admin-listen %s: %w", opts.AdminListen, err)
	}
	adm := admin.New(func(w io.Writer) { wh.Metrics.WritePrometheus(w) }, func() (bool, []string) { return true, nil })
	whSrv := &http.Server{Handler: wh, TLSConfig: tlsCfg, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
	admSrv := &http.Server{Handler: adm, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- whSrv.ServeTLS(wl, "", "") }()
	go func() { errc <- admSrv.Serve(al) }()
	logger.Info("injector listening", "webhook", wl.Addr().String(), "admin", al.Addr().String(), "image", cfg.Image)
	if opts.Ready != nil {
		opts.Ready(wl.Addr(), al.Addr())
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	whSrv.Shutdown(sctx)
	admSrv.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("inject: serve: %w", serveErr)
	}
	return nil
}

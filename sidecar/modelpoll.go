package sidecar

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/inferwatch/inferwatch/modelload"
	"github.com/inferwatch/inferwatch/proxy"
)

// newModelPollers makes a model readiness poller (Triton's repository
// index) for each route that polls its upstream's statistics: the same
// upstreams, at the same interval, switched off by the same setting.
func (s *Sidecar) newModelPollers(poll []bool) error {
	for i, r := range s.cfg.Routes {
		if !poll[i] {
			continue
		}
		var tc *tls.Config
		if t := r.UpstreamTLS; t != nil {
			var err error
			if tc, err = proxy.ClientTLS(proxy.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}, t.ServerName, t.InsecureSkipVerify, s.logger); err != nil {
				return fmt.Errorf("route %s: upstream_tls: %w", r.Name, err)
			}
		}
		o := modelload.PollOptions{TLS: tc, Interval: r.TritonStats.Interval.D(), Logger: s.logger}
		if r.Protocol == "grpc" {
			o.GRPCAddr = r.Upstream
		} else {
			scheme := "http"
			if tc != nil {
				scheme = "https"
			}
			o.HTTPBase = scheme + "://" + r.Upstream
		}
		p, err := s.models.NewPoller(o)
		if err != nil {
			return fmt.Errorf("route %s: %w", r.Name, err)
		}
		s.modelPollers = append(s.modelPollers, p)
	}
	return nil
}

// runModelPollers starts the pollers; they stop with ctx.
func (s *Sidecar) runModelPollers(ctx context.Context) {
	for _, p := range s.modelPollers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.Run(ctx)
		}()
	}
}

// closeModelPollers releases their connections.
func (s *Sidecar) closeModelPollers() {
	for _, p := range s.modelPollers {
		p.Close()
	}
}

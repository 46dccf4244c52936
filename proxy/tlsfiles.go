package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// TLSFiles names the PEM files of one side of a TLS connection.
type TLSFiles struct {
	CertFile string // certificate chain
	KeyFile  string // private key
	CAFile   string // listener: client CA (mTLS); upstream: CA that signs the server
}

// certStatInterval bounds how often a handshake checks the files for changes.
const certStatInterval = time.Second

// certFiles loads a key pair and a CA pool and reloads them when the files'
// modification times change, so rotated certificates (a Kubernetes secret
// update) apply to new connections without a restart. A reload that fails
// keeps the previous material and logs why.
type certFiles struct {
	files  TLSFiles
	logger *slog.Logger

	mu       sync.Mutex
	checked  time.Time
	mtimes   [3]time.Time
	cert     *tls.Certificate
	pool     *x509.CertPool
	reloaded int
}

func newCertFiles(f TLSFiles, logger *slog.Logger) (*certFiles, error) {
	c := &certFiles{files: f, logger: logger}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certFiles) stat() [3]time.Time {
	var m [3]time.Time
	for i, p := range []string{c.files.CertFile, c.files.KeyFile, c.files.CAFile} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			m[i] = st.ModTime()
		}
	}
	return m
}

func (c *certFiles) load() error {
	m := c.stat()
	var cert *tls.Certificate
	if c.files.CertFile != "" || c.files.KeyFile != "" {
		kp, err := tls.LoadX509KeyPair(c.files.CertFile, c.files.KeyFile)
		if err != nil {
			return fmt.Errorf("load key pair %s, %s: %w", c.files.CertFile, c.files.KeyFile, err)
		}
		cert = &kp
	}
	var pool *x509.CertPool
	if c.files.CAFile != "" {
		pem, err := os.ReadFile(c.files.CAFile)
		if err != nil {
			return fmt.Errorf("read CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("CA file %s: no PEM certificates", c.files.CAFile)
		}
	}
	c.cert, c.pool, c.mtimes = cert, pool, m
	c.reloaded++
	return nil
}

// current returns the material, reloading it first if the files changed.
func (c *certFiles) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= certStatInterval {
		c.checked = now
		if c.stat() != c.mtimes {
			if err := c.load(); err != nil {
				c.logger.Warn("TLS files changed but did not load; keeping the previous ones", "err", err)
				c.mtimes = c.stat() // do not retry until they change again
			} else {
				c.logger.Info("TLS files reloaded", "cert", c.files.CertFile)
			}
		}
	}
	return c.cert, c.pool
}

// ServerTLS returns a listener config that serves the current certificate
// and, with a CA file, requires and verifies client certificates (mTLS).
func ServerTLS(f TLSFiles, logger *slog.Logger) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, fmt.Errorf("listener TLS needs both cert_file and key_file")
	}
	cf, err := newCertFiles(f, logger)
	if err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := cf.current()
		cfg := base.Clone()
		cfg.GetConfigForClient = nil
		cfg.Certificates = []tls.Certificate{*cert}
		if pool != nil {
			cfg.ClientCAs = pool
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return cfg, nil
	}
	return base, nil
}

// ClientTLS returns an upstream config: CA to verify the server (system roots
// when empty), read once at start, and a client certificate for mTLS when
// given, reloaded as the listener's is. A rotated upstream CA takes a
// restart: verifying against a reloaded pool would mean doing Go's
// hostname check by hand, which is not worth the risk for a file that
// changes once a year.
func ClientTLS(f TLSFiles, serverName string, insecure bool, logger *slog.Logger) (*tls.Config, error) {
	cf, err := newCertFiles(f, logger)
	if err != nil {
		return nil, err
	}
	_, pool := cf.current()
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		RootCAs:            pool,
		ServerName:         serverName,
		InsecureSkipVerify: insecure, // only when the operator asked for it
	}
	if f.CertFile != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := cf.current()
			return cert, nil
		}
	}
	return cfg, nil
}

package inject

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeCert writes a self-signed serving certificate for 127.0.0.1 with the
// given serial and returns its pool.
func writeCert(t testing.TB, dir string, serial int64) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "inferwatch-injector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"inferwatch-injector.inferwatch.svc"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// Write beside, then rename: what a kubelet's Secret volume update looks like to a reader.
	for name, blk := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: kb}} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

type running struct {
	webhook, admin string
	stop           func()
}

func startServer(t testing.TB, dir string) running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan [2]net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeOptions{
			Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
			CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
			Ready: func(w, a net.Addr) { ready <- [2]net.Addr{w, a} },
		}, DefaultConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	select {
	case a := <-ready:
		return running{a[0].String(), a[1].String(), func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}}
	case err := <-done:
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	return running{}
}

func client(pool *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true,
	}}
}

// TestServeTLSReloadMetrics: the webhook answers over TLS, picks up a rotated
// certificate without a restart, and counts reviews on /metrics.
func TestServeTLSReloadMetrics(t *testing.T) {
	dir := t.TempDir()
	pool1 := writeCert(t, dir, 1)
	srv := startServer(t, dir)
	defer srv.stop()
	review, err := os.ReadFile("testdata/reviews/triton.json")
	if err != nil {
		t.Fatal(err)
	}
	post := func(c *http.Client) (*http.Response, []byte, error) {
		resp, err := c.Post("https://"+srv.webhook+PathOptIn, "application/json", bytes.NewReader(review))
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	resp, body, err := post(client(pool1))
	if err != nil || resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"patch"`)) {
		t.Fatalf("first review: %v %v %s", err, resp, body)
	}
	if serial := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); serial != 1 {
		t.Errorf("serial %d, want 1", serial)
	}

	time.Sleep(1100 * time.Millisecond) // the reload check runs at most once a second, and mtimes must differ
	pool2 := writeCert(t, dir, 2)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _, err = post(client(pool2))
		if err == nil && resp.TLS.PeerCertificates[0].SerialNumber.Int64() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated certificate never served: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, _, err := post(client(pool1)); err == nil {
		t.Errorf("old CA still accepted after rotation")
	}

	get := func(path string) string {
		r, err := http.Get("http://" + srv.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 {
			t.Errorf("%s: %d", path, r.StatusCode)
		}
		return string(b)
	}
	m := get("/metrics")
	if !strings.Contains(m, `inferwatch_injector_reviews_total{path="/inject",action="injected"}`) {
		t.Errorf("/metrics lacks the review counter:\n%s", m)
	}
	if get("/healthz") != "ok\n" || get("/readyz") != "ready\n" {
		t.Errorf("health endpoints")
	}
	r, err := client(pool2).Get("https://" + srv.webhook + "/healthz")
	if err != nil || r.StatusCode != 200 {
		t.Errorf("webhook /healthz over TLS: %v", err)
	}
}

func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name  string
		opts  ServeOptions
		cfg   Config
		field string
	}{
		{"no cert", ServeOptions{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"}, DefaultConfig(), "tls-cert"},
		{"missing cert", ServeOptions{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", CertFile: dir + "/nope", KeyFile: dir + "/tls.key"}, DefaultConfig(), "tls-cert"},
		{"bad image", ServeOptions{}, Config{}, "image"},
		{"bad admin", ServeOptions{Listen: "127.0.0.1:0", AdminListen: "nowhere:x", CertFile: dir + "/tls.crt", KeyFile: dir + "/tls.key"}, DefaultConfig(), "admin-listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Serve(context.Background(), tc.opts, tc.cfg, log)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// BenchmarkReviewBurst sends bursts of 1000 reviews (all fixtures in turn)
// over TLS from 16 concurrent clients and reports the p99 latency of one
// review as the apiserver sees it.
func BenchmarkReviewBurst(b *testing.B) {
	dir := b.TempDir()
	pool := writeCert(b, dir, 1)
	srv := startServer(b, dir)
	defer srv.stop()
	var bodies [][]byte
	for _, c := range goldenCases {
		raw, err := os.ReadFile(filepath.Join("testdata/reviews", c.name+".json"))
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, raw)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 16}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	const burst, workers = 1000, 16
	var all []time.Duration
	b.ResetTimer()
	for range b.N {
		lat := make([]time.Duration, burst)
		var wg sync.WaitGroup
		next := make(chan int, burst)
		for i := range burst {
			next <- i
		}
		close(next)
		var errOnce sync.Once
		var firstErr error
		for range workers {
			wg.Go(func() {
				for i := range next {
					t0 := time.Now()
					resp, err := c.Post("https://"+srv.webhook+PathOptIn, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					if err != nil {
						errOnce.Do(func() { firstErr = err })
					}
					lat[i] = time.Since(t0)
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		all = append(all, lat...)
	}
	b.StopTimer()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)*50/100].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkReview is the injector's own work per review (decode, plan,
// encode), without TLS, HTTP or a client sharing the CPUs.
func BenchmarkReview(b *testing.B) {
	raw, err := os.ReadFile("testdata/reviews/triton.json")
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := Review(cfg, OptIn, raw); err != nil {
			b.Fatal(err)
		}
	}
}

package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "inferwatch test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestGRPCOverTLS runs gRPC over TLS on both hops (ALPN h2 at the listener,
// TLS to the upstream) on the plane under test: the calls are the same as
// direct and recorded.
func TestGRPCOverTLS(t *testing.T) {
	certFile, keyFile, pool := writeCert(t)
	logger := testLogger(t)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	up := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)), grpc.UnknownServiceHandler(anyService))
	inference.RegisterGRPCInferenceServiceServer(up, kserveEcho{})
	ul := listen(t)
	go up.Serve(ul)
	defer up.Stop()

	clientTLS, err := ClientTLS(TLSFiles{CAFile: certFile}, "127.0.0.1", false, logger)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ServerTLS(TLSFiles{CertFile: certFile, KeyFile: keyFile}, logger)
	if err != nil {
		t.Fatal(err)
	}
	var got = make(chan *record.Call, 16)
	pipeline := record.NewPipeline(64, record.SinkFunc(func(c *record.Call) { got <- c }), nil)
	defer pipeline.Close()
	tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP2, TLS: clientTLS})
	h := NewHandler(Options{Route: "tls", Upstream: ul.Addr().String(), TLS: true, Transport: tr, Pipeline: pipeline, Logger: logger})
	l := Listener{Name: "tls", Addr: "127.0.0.1:0", Handler: h, TLS: serverTLS}
	if testDataPlane() == "frame" {
		if l.Frames, err = NewFramePlane(h, tr, ul.Addr().String(), 0); err != nil {
			t.Fatal(err)
		}
	}
	srv := NewServer(logger, l)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Shutdown(context.Background())

	creds := grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "127.0.0.1"))
	direct, err := grpc.NewClient(ul.Addr().String(), creds)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	proxied, err := grpc.NewClient(srv.Addrs()[0].String(), creds)
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	for _, c := range []struct {
		method string
		in     [][]byte
	}{
		{"/inference.GRPCInferenceService/ModelInfer", [][]byte{inferRequest("m1", 64<<10)}},
		{"/acme.Echo/Stream", [][]byte{[]byte("a"), make([]byte, 300<<10)}},
	} {
		md := metadata.Pairs("x-tls", "yes")
		a := doCall(context.Background(), direct, c.method, md, c.in)
		b := doCall(context.Background(), proxied, c.method, md, c.in)
		if err := a.equal(b); err != nil {
			t.Errorf("%s over TLS (%s plane): %v", c.method, testDataPlane(), err)
		}
		select {
		case rec := <-got:
			if rec.Code != "OK" || rec.Protocol != record.ProtocolGRPC {
				t.Errorf("%s: record code %q protocol %q", c.method, rec.Code, rec.Protocol)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no record", c.method)
		}
	}
}

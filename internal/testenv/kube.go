package testenv

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// KubeUser is an identity the apiserver accepts by static bearer token.
type KubeUser struct {
	Name   string // e.g. system:serviceaccount:inferwatch:iw-injector
	Token  string
	Groups []string
}

// Kube is a kube-apiserver (with its etcd) a test started on loopback.
type Kube struct {
	URL    string // https://127.0.0.1:port
	CAFile string // PEM certificate the apiserver serves (self-signed)
	admin  string // token of a system:masters user
	client *http.Client
}

// KubeBinaries finds etcd and kube-apiserver at $INFERWATCH_ETCD and
// $INFERWATCH_KUBE_APISERVER or in <repo>/bin, where .ci/run builds them
// from tools/kube; missing, the test is skipped locally and fails in CI.
// repoRoot is the path of the repository from the test's directory.
func KubeBinaries(t testing.TB, repoRoot string) (etcd, apiserver string) {
	t.Helper()
	find := func(env, name, pkg string) string {
		return ToolBinary(t, repoRoot, name, env, fmt.Sprintf("cd tools/kube && go build -o ../../bin/%s %s; tools/README.md", name, pkg))
	}
	return find("INFERWATCH_ETCD", "etcd", "go.etcd.io/etcd/server/v3"),
		find("INFERWATCH_KUBE_APISERVER", "kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver")
}

// StartKube runs etcd and kube-apiserver on loopback ports under dir: a
// self-signed serving certificate, a service-account key, RBAC
// authorization, static bearer tokens for users (plus an admin in
// system:masters), and the default admission plugins but ServiceAccount
// (no controller-manager creates the default accounts). It waits until
// /readyz answers and stops both when the test ends.
func StartKube(t testing.TB, etcdBin, apiserverBin, dir string, users ...KubeUser) *Kube {
	t.Helper()
	clientAddr, peerAddr := FreeAddr(t), FreeAddr(t)
	etcd := Start(t, etcdBin,
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://"+clientAddr,
		"--advertise-client-urls=http://"+clientAddr,
		"--listen-peer-urls=http://"+peerAddr,
		"--initial-advertise-peer-urls=http://"+peerAddr,
		"--initial-cluster=default=http://"+peerAddr,
		"--unsafe-no-fsync", // a test's data need not survive a power cut
		"--log-level=warn",
	)
	WaitHTTP(t, etcd, "http://"+clientAddr+"/health", 60*time.Second)

	certFile, keyFile := filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	pool := WriteSelfSigned(t, certFile, keyFile, "kube-apiserver")
	saKey := filepath.Join(dir, "sa.key")
	writeKey(t, saKey)
	admin := randomToken(t)
	var tokens strings.Builder
	fmt.Fprintf(&tokens, "%s,admin,admin,\"system:masters\"\n", admin)
	for _, u := range users {
		fmt.Fprintf(&tokens, "%s,%s,%s,\"%s\"\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	api := Start(t, apiserverBin,
		"--etcd-servers=http://"+clientAddr,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+port,
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		"--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	)
	k := &Kube{
		URL: "https://" + addr, CAFile: certFile, admin: admin,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}
	deadline := time.Now().Add(3 * time.Minute) // the first start on a loaded machine installs the bootstrap policy
	for {
		status, body, err := k.Do("GET", "/readyz", nil)
		if err == nil && status == http.StatusOK {
			break
		}
		if api.Exited() {
			t.Fatalf("kube-apiserver exited before it was ready")
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready within 3m: %d %s %v", status, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return k
}

// Do sends one request as the admin; body, when not nil, is JSON-encoded
// (a []byte is sent as it is).
func (k *Kube) Do(method, path string, body any) (status int, resp []byte, err error) {
	return k.DoAs(k.admin, method, path, body)
}

// DoAs is Do with another user's token.
func (k *Kube) DoAs(token, method, path string, body any) (status int, resp []byte, err error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, fmt.Errorf("encode %s body: %w", path, err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, k.URL+path, r)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := k.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, nil, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return res.StatusCode, b, nil
}

// Create POSTs obj to path as the admin and fails the test unless the
// apiserver answers 201; it returns the stored object.
func (k *Kube) Create(t testing.TB, path string, obj any) []byte {
	t.Helper()
	status, b, err := k.Do("POST", path, obj)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("POST %s: %d %s %v", path, status, b, err)
	}
	return b
}

// Path joins API path segments, escaping each.
func Path(segments ...string) string {
	for i, s := range segments {
		segments[i] = url.PathEscape(s)
	}
	return "/" + strings.Join(segments, "/")
}

func randomToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// RandomToken returns a fresh bearer token for a KubeUser.
func RandomToken(t testing.TB) string { return randomToken(t) }

func writeKey(t testing.TB, path string) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return key
}

// WriteSelfSigned writes a self-signed serving certificate for 127.0.0.1
// and localhost and returns a pool holding it.
func WriteSelfSigned(t testing.TB, certFile, keyFile, cn string) *x509.CertPool {
	t.Helper()
	key := writeKey(t, keyFile)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

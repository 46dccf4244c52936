package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDiagnoseFlagsFromVariables: as every command's -h says, diagnose's
// flags can be given as INFERWATCH_* variables (INFERWATCH_ADMIN as for
// `inferwatch traces`); they were ignored.
func TestDiagnoseFlagsFromVariables(t *testing.T) {
	admin := fakeAdmin(t)
	t.Setenv("INFERWATCH_ADMIN", admin.URL)
	t.Setenv("INFERWATCH_FROM", "5m")
	var out bytes.Buffer
	if err := runDiagnose([]string{"--timeout", "5s"}, &out, io.Discard); err != nil {
		t.Fatalf("diagnose with INFERWATCH_ADMIN=%s INFERWATCH_FROM=5m: %v", admin.URL, err)
	}
	if !strings.Contains(out.String(), "1. cpu_throttling") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestDiagnoseAdminAnswers: a non-JSON refusal of the admin server (its
// 403 to a peer off loopback says why and what to do) reaches the user
// whole; it was reduced to "403 Forbidden". And --admin takes host:port,
// as --admin-listen prints it and `inferwatch traces --admin` takes it.
func TestDiagnoseAdminAnswers(t *testing.T) {
	const why = "inferwatch admin: /debug/diagnose is served to loopback peers only (kubectl port-forward, or admin_remote_api: true / --admin-remote-api to serve it to all)"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, why, http.StatusForbidden)
	}))
	defer srv.Close()
	err := runDiagnose([]string{"--admin", srv.URL, "--timeout", "5s"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), why) {
		t.Errorf("err = %v, want the 403 and the admin's reason", err)
	}

	admin := fakeAdmin(t)
	hostPort := strings.TrimPrefix(admin.URL, "http://")
	var out bytes.Buffer
	if err := runDiagnose([]string{"--admin", hostPort, "--from", "5m", "--timeout", "5s"}, &out, io.Discard); err != nil {
		t.Fatalf("--admin %s: %v", hostPort, err)
	}
	if !strings.Contains(out.String(), "1. cpu_throttling") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestDiagnoseTimeoutChecked: --timeout 0 meant no limit on the sidecar
// (a hung admin port hung the command) yet an LLM deadline already past
// ("no prose: context deadline exceeded"); a timeout that is not positive
// is refused, naming the flag.
func TestDiagnoseTimeoutChecked(t *testing.T) {
	admin := fakeAdmin(t)
	for _, v := range []string{"0", "-1s"} {
		err := runDiagnose([]string{"--admin", admin.URL, "--from", "5m", "--timeout", v}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--timeout") {
			t.Errorf("--timeout %s: err %v, want one naming --timeout", v, err)
		}
	}
}

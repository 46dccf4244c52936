package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/inferwatch/inferwatch/internal/cmdline"
)

// TestListFlagsOverrideConfig: a repeatable flag (or its INFERWATCH_*
// variable) wins over the YAML file's list, as README's precedence says of
// every flag. --alertmanager-url and --upstream-pid were appended to the
// file's lists instead: the file's Alertmanager kept getting the alerts and
// the file's PIDs stayed watched beside the flag's.
func TestListFlagsOverrideConfig(t *testing.T) {
	yaml := filepath.Join(t.TempDir(), "inferwatch.yaml")
	if err := os.WriteFile(yaml, []byte("alerting:\n  alertmanager_urls: [http://yaml:9093]\nhost:\n  upstream_pids: [7]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	routes := []string{"--config=" + yaml, "--http-listen=:0", "--http-upstream=127.0.0.1:1"}
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		am, pids string
	}{
		{name: "file alone", am: "[http://yaml:9093]", pids: "[7]"},
		{name: "flags", args: []string{"--alertmanager-url=http://flag:9093", "--upstream-pid=42"}, am: "[http://flag:9093]", pids: "[42]"},
		{name: "variables", env: map[string]string{"INFERWATCH_ALERTMANAGER_URL": "http://a:9093,http://b:9093", "INFERWATCH_UPSTREAM_PID": "42"},
			am: "[http://a:9093 http://b:9093]", pids: "[42]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			build := proxyFlags(fs)
			if err := cmdline.Parse(fs, append(append([]string{}, routes...), tc.args...)); err != nil {
				t.Fatal(err)
			}
			cfg, err := build()
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(cfg.Alerting.AlertmanagerURLs); got != tc.am {
				t.Errorf("alertmanager URLs %s, want %s", got, tc.am)
			}
			if got := fmt.Sprint(cfg.Host.UpstreamPIDs); got != tc.pids {
				t.Errorf("upstream PIDs %s, want %s", got, tc.pids)
			}
		})
	}
}

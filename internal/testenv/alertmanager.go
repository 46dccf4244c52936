package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// StartAlertmanager runs Alertmanager on addr with state in dir, routing
// every alert to receiverURL (group_wait and group_interval 1s,
// repeat_interval 1h, resolved notifications on) with clustering off, and
// waits until it is ready. Calling it again with the same dir restarts it
// on the same state.
func StartAlertmanager(t testing.TB, bin, dir, addr, receiverURL string) *Process {
	t.Helper()
	config := filepath.Join(dir, "alertmanager.yml")
	cfg := fmt.Sprintf(`route:
  receiver: test
  group_by: [alertname, model]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %q
        send_resolved: true
`, receiverURL)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Start(t, bin,
		"--config.file="+config,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=", // no gossip: a single, isolated instance
		"--log.level=warn",
	)
	WaitHTTP(t, p, "http://"+addr+"/-/ready", 15*time.Second)
	return p
}

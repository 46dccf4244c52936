package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// FastRules writes into dir a copy of the rules file with every group
// evaluated each second instead of at its own interval, so a test need not
// wait minutes; the expressions and their range windows are unchanged.
func FastRules(t testing.TB, rulesFile, dir string) string {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("parse %s: %v", rulesFile, err)
	}
	groups, _ := doc["groups"].([]any)
	if len(groups) == 0 {
		t.Fatalf("%s: no groups", rulesFile)
	}
	for _, g := range groups {
		g.(map[string]any)["interval"] = "1s"
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartPrometheus runs the Prometheus binary on a free loopback port,
// scraping target every second and evaluating rules every second, waits
// until it is ready and stops it when the test ends. It returns its address.
func StartPrometheus(t testing.TB, bin, dir, target, rules string) string {
	t.Helper()
	addr := FreeAddr(t)
	config := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: inferwatch
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Start(t, bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	WaitHTTP(t, p, "http://"+addr+"/-/ready", 20*time.Second)
	return addr
}

package helm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/internal/testenv"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
)

// TestPodMonitorScrapeConfigLoads: the interval and timeout each rendered
// PodMonitor endpoint carries become a Prometheus scrape config, which
// Prometheus refuses outright when the timeout exceeds the interval
// ("scrape timeout greater than scrape interval"). A faster interval than
// the default timeout must still render a config Prometheus loads.
func TestPodMonitorScrapeConfigLoads(t *testing.T) {
	promtool := testenv.RequireBinary(t, "promtool")
	for _, tc := range []struct {
		set         []string
		wantTimeout string // of every endpoint
	}{
		{[]string{"monitoring.podMonitor.interval=5s"}, "5s"},
		{[]string{"monitoring.podMonitor.interval=1m30s", "monitoring.podMonitor.scrapeTimeout=1m"}, "1m"},
		{nil, "10s"},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "iw", chart, "--set", "monitoring.podMonitor.enabled=true"}, setArgs(tc.set)...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var jobs []map[string]any
			for _, doc := range strings.Split(out, "\n---") {
				var m map[string]any
				if err := yaml.Unmarshal([]byte(doc), &m); err != nil || m["kind"] != "PodMonitor" {
					continue
				}
				raw, _ := json.Marshal(m)
				var pm monitoringv1.PodMonitor
				if err := json.Unmarshal(raw, &pm); err != nil {
					t.Fatal(err)
				}
				for i, ep := range pm.Spec.PodMetricsEndpoints {
					if string(ep.ScrapeTimeout) != tc.wantTimeout {
						t.Errorf("PodMonitor %s endpoint %d: scrapeTimeout %q, want %q", pm.Name, i, ep.ScrapeTimeout, tc.wantTimeout)
					}
					jobs = append(jobs, map[string]any{
						"job_name":        fmt.Sprintf("%s-%d", pm.Name, i),
						"scrape_interval": string(ep.Interval),
						"scrape_timeout":  string(ep.ScrapeTimeout),
						"static_configs":  []any{map[string]any{"targets": []string{"pod:9901"}}},
					})
				}
			}
			if len(jobs) != 2 {
				t.Fatalf("%d PodMonitor endpoints rendered, want 2", len(jobs))
			}
			b, _ := yaml.Marshal(map[string]any{"scrape_configs": jobs})
			f := filepath.Join(t.TempDir(), "prometheus.yml")
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(promtool, "check", "config", f).CombinedOutput(); err != nil {
				t.Errorf("Prometheus refuses the PodMonitors' scrape config: %v\n%s", err, out)
			}
		})
	}
}

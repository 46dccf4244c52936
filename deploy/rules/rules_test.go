package rules

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

const (
	rulesFile = "inferwatch-rules.yaml"
	testsFile = "inferwatch-rules.test.yaml"
)

// ruleFile is the part of the Prometheus rule-file format the tests read.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Record        string            `yaml:"record"`
			Alert         string            `yaml:"alert"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse %s: %v", rulesFile, err)
	}
	return f
}

// runTool runs a binary with a deadline and fails the test with its output
// if it does not succeed.
func runTool(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestPromtool(t *testing.T) {
	promtool := testenv.RequireBinary(t, "promtool")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"check rules", []string{"check", "rules", rulesFile}, "SUCCESS"},
		{"test rules", []string{"test", "rules", testsFile}, "SUCCESS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out := runTool(t, promtool, tt.args...); !strings.Contains(out, tt.want) {
				t.Errorf("promtool %s says\n%s", strings.Join(tt.args, " "), out)
			}
		})
	}
}

// TestVmalertDryRun loads the rules into vmalert (Debian's
// victoria-metrics package ships it), which parses every expression as
// MetricsQL and every annotation template.
func TestVmalertDryRun(t *testing.T) {
	vmalert := testenv.RequireBinary(t, "vmalert")
	tests := []struct {
		name    string
		rules   string
		wantErr bool
	}{
		{"inferwatch rules", rulesFile, false},
		// Proves the dry run validates expressions at all.
		{"broken expression", writeTemp(t, "groups:\n  - name: broken\n    rules:\n      - record: x\n        expr: sum(rate(y[1m])\n"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, vmalert, "-rule="+tt.rules, "-dryRun", "-loggerLevel=ERROR").CombinedOutput()
			if (err != nil) != tt.wantErr {
				t.Errorf("vmalert -dryRun -rule=%s: error %v, want error %v\n%s", tt.rules, err, tt.wantErr, out)
			}
		})
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "rules-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// TestRuleConventions keeps the file in step with package alerting and with
// what both engines load.
func TestRuleConventions(t *testing.T) {
	f := loadRules(t)
	alerts := map[string]int{}
	records := map[string]bool{}
	for _, g := range f.Groups {
		if g.Interval != "1m" {
			t.Errorf("group %s: interval %q; the window arithmetic (for: (N-1)m) needs 1m", g.Name, g.Interval)
		}
		for _, r := range g.Rules {
			if r.KeepFiringFor != "" {
				t.Errorf("%s%s: keep_firing_for is Prometheus-only", r.Alert, r.Record)
			}
			if r.Record != "" {
				records[r.Record] = true
				continue
			}
			alerts[r.Alert]++
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs a severity label and summary and description annotations", r.Alert)
			}
		}
	}
	for _, name := range []string{
		alerting.RuleLatencyMeanOverSLA,
		alerting.RuleP99OverBaseline,
		alerting.RuleLatencyStdDevJump,
		alerting.RuleThroughputLatencySlopeChange,
		alerting.RuleTTFTOverSLO,
		"MemoryLeakSuspected",
		"MemoryLeakWatchBlind",
	} {
		if alerts[name] == 0 {
			t.Errorf("no alert %s: the sidecar's rule names and these must match", name)
		}
	}
	for _, name := range []string{
		"model:inferwatch_request_duration_seconds:p99_1m",
		"model:inferwatch_request_duration_seconds:p50_1m",
		"model:inferwatch_request_duration_seconds:mean_1m",
		"model:inferwatch_request_duration_seconds_count:rate1m",
		"model:inferwatch_request_duration_seconds:p99_1m_median_1h",
	} {
		if !records[name] {
			t.Errorf("no recording rule %s (docs/rules.md names it)", name)
		}
	}
	// Every alert in the rules file is exercised by the unit tests.
	tests, err := os.ReadFile(testsFile)
	if err != nil {
		t.Fatal(err)
	}
	for name := range alerts {
		if !bytes.Contains(tests, []byte("alertname: "+name)) {
			t.Errorf("alert %s has no promtool test", name)
		}
	}
	if names := slices.Sorted(maps.Keys(alerts)); len(names) != 7 {
		t.Errorf("alerts %v, want the four latency rules, LLMTimeToFirstTokenOverSLO, MemoryLeakSuspected and MemoryLeakWatchBlind", names)
	}
}

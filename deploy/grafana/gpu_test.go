package grafana

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"gopkg.in/yaml.v3"
)

// TestGPUPanelsKeepDevicesApart evaluates the GPU panels of inferwatch.json
// with promtool over the fleet they face: a GPU's NVML index is only unique
// on its node (each pod with one GPU from the device plugin sees it as
// gpu="0"), and two sidecars sharing one GPU both report it. Each device,
// known by its uuid, must be a line of its own with its own value: not the
// sum or the average of every pod's "GPU 0", nor one GPU counted twice.
func TestGPUPanelsKeepDevicesApart(t *testing.T) {
	bin := testenv.RequireBinary(t, "promtool")
	raw, err := os.ReadFile("inferwatch.json")
	if err != nil {
		t.Fatal(err)
	}
	_, exprs := queries(t, raw)
	const (
		util = `panel "GPU utilisation (SM and memory)" A`
		mem  = `panel "GPU memory used" A`
	)
	for _, k := range []string{util, mem} {
		if exprs[k] == "" {
			t.Fatalf("no query %s", k)
		}
	}
	// Pods a and b on two nodes, each with its own GPU 0; pods c and d
	// share GPU-c (time-slicing), both sidecars reporting it.
	series := []string{
		`inferwatch_gpu_memory_used_bytes{namespace="ml",pod="a",gpu="0",uuid="GPU-a"} 10`,
		`inferwatch_gpu_memory_used_bytes{namespace="ml",pod="b",gpu="0",uuid="GPU-b"} 30`,
		`inferwatch_gpu_memory_used_bytes{namespace="ml",pod="c",gpu="0",uuid="GPU-c"} 50`,
		`inferwatch_gpu_memory_used_bytes{namespace="ml",pod="d",gpu="0",uuid="GPU-c"} 50`,
		`inferwatch_gpu_utilization_ratio{namespace="ml",pod="a",gpu="0",uuid="GPU-a",kind="sm"} 0.1`,
		`inferwatch_gpu_utilization_ratio{namespace="ml",pod="b",gpu="0",uuid="GPU-b",kind="sm"} 0.9`,
		`inferwatch_gpu_utilization_ratio{namespace="ml",pod="c",gpu="0",uuid="GPU-c",kind="sm"} 0.5`,
		`inferwatch_gpu_utilization_ratio{namespace="ml",pod="d",gpu="0",uuid="GPU-c",kind="sm"} 0.5`,
	}
	var input []map[string]string
	for _, s := range series {
		name, value, _ := strings.Cut(s, " ")
		input = append(input, map[string]string{"series": name, "values": value + "x5"})
	}
	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	test := func(expr string, want []sample) map[string]any {
		return map[string]any{"expr": expr, "eval_time": "2m", "exp_samples": want}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "none.yaml"), []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(map[string]any{
		"rule_files": []string{"none.yaml"},
		"tests": []any{map[string]any{
			"interval":     "1m",
			"input_series": input,
			"promql_expr_test": []any{
				test(exprs[mem], []sample{
					{`{gpu="0",uuid="GPU-a"}`, 10}, {`{gpu="0",uuid="GPU-b"}`, 30}, {`{gpu="0",uuid="GPU-c"}`, 50}}),
				test(exprs[util], []sample{
					{`{gpu="0",uuid="GPU-a",kind="sm"}`, 0.1}, {`{gpu="0",uuid="GPU-b",kind="sm"}`, 0.9}, {`{gpu="0",uuid="GPU-c",kind="sm"}`, 0.5}}),
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "gpu.test.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "test", "rules", f)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

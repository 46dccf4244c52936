package helm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"gopkg.in/yaml.v3"
)

// operatorTypes is the Go package the Prometheus Operator's CRDs are
// generated from; go.mod pins its module (the version strict decoding uses).
const operatorTypes = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

// resources maps a rendered kind to its API group/version path and plural;
// cluster-scoped kinds have no namespace in their path.
var resources = map[string]struct {
	prefix, plural string
	cluster        bool
}{
	"ConfigMap":                    {"/api/v1", "configmaps", false},
	"Service":                      {"/api/v1", "services", false},
	"ServiceAccount":               {"/api/v1", "serviceaccounts", false},
	"Deployment":                   {"/apis/apps/v1", "deployments", false},
	"Job":                          {"/apis/batch/v1", "jobs", false},
	"PodDisruptionBudget":          {"/apis/policy/v1", "poddisruptionbudgets", false},
	"Role":                         {"/apis/rbac.authorization.k8s.io/v1", "roles", false},
	"RoleBinding":                  {"/apis/rbac.authorization.k8s.io/v1", "rolebindings", false},
	"ClusterRole":                  {"/apis/rbac.authorization.k8s.io/v1", "clusterroles", true},
	"ClusterRoleBinding":           {"/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", true},
	"MutatingWebhookConfiguration": {"/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", true},
	"PodMonitor":                   {"/apis/monitoring.coreos.com/v1", "podmonitors", false},
	"PrometheusRule":               {"/apis/monitoring.coreos.com/v1", "prometheusrules", false},
}

// TestChartOnAPIServer: a real kube-apiserver accepts every object every
// value set renders, in a server-side dry run with strict field validation:
// its own validation of names, labels, pod templates, webhooks and RBAC,
// and, for the Prometheus Operator's kinds, the OpenAPI schema of CRDs that
// controller-gen generates from the operator's own types (durations, port
// names, rule groups). cert-manager's kinds have no CRD here; checkObjects
// covers them.
func TestChartOnAPIServer(t *testing.T) {
	etcdBin, apiBin := testenv.KubeBinaries(t, filepath.Join("..", ".."))
	crds := operatorCRDs(t, "podmonitors", "prometheusrules")
	kube := testenv.StartKube(t, etcdBin, apiBin, t.TempDir())
	for _, ns := range []string{"inferwatch", "grafana"} {
		kube.Create(t, "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
	}
	for _, crd := range crds {
		kube.Create(t, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
	}
	type render struct {
		name, release string
		set           []string
	}
	var renders []render
	for _, vs := range valueSets {
		renders = append(renders, render{vs.name, "iw", vs.set})
	}
	// The longest release name helm allows (53): every derived name must
	// still be one the apiserver takes (a Job's becomes a 63-byte label).
	monitoring := valueSets[len(valueSets)-1]
	renders = append(renders, render{"long-release-name", strings.Repeat("r", 53), monitoring.set})
	for _, vs := range renders {
		t.Run(vs.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", vs.release, chart, "--namespace", "inferwatch"}, setArgs(vs.set)...)...)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, doc := range strings.Split(out, "\n---") {
				var m map[string]any
				if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
					t.Fatalf("rendered YAML does not parse: %v", err)
				}
				if m == nil || m["apiVersion"] == "cert-manager.io/v1" {
					continue
				}
				dryRun(t, kube, m)
				n++
			}
			t.Logf("%d objects accepted", n)
		})
	}
}

// dryRun creates m on the apiserver without storing it. A 404 is waited out
// for a while: a CRD's resource is served a moment after it is created.
func dryRun(t *testing.T, kube *testenv.Kube, m map[string]any) {
	t.Helper()
	kind, _ := m["kind"].(string)
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	r, ok := resources[kind]
	if !ok {
		t.Errorf("%s %s: a kind this test has no resource path for", kind, name)
		return
	}
	path := r.prefix
	if !r.cluster {
		ns, _ := meta["namespace"].(string)
		if ns == "" {
			t.Errorf("%s %s: rendered without a namespace", kind, name)
			return
		}
		path += testenv.Path("namespaces", ns)
	}
	path += "/" + r.plural + "?dryRun=All&fieldValidation=Strict"
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status, resp, err := kube.Do("POST", path, body)
		switch {
		case err != nil:
			t.Errorf("%s %s: %v", kind, name, err)
		case status == http.StatusNotFound && time.Now().Before(deadline):
			continue
		case status != http.StatusCreated:
			t.Errorf("%s %s refused: %d %s", kind, name, status, resp)
		}
		return
	}
}

// operatorCRDs generates the Prometheus Operator's CRDs from operatorTypes
// with controller-gen (bin/controller-gen, built from tools/crd) and returns
// the named ones as objects to create.
func operatorCRDs(t *testing.T, plurals ...string) []map[string]any {
	t.Helper()
	bin := testenv.ToolBinary(t, filepath.Join("..", ".."), "controller-gen", "INFERWATCH_CONTROLLER_GEN",
		"cd tools/crd && go build -o ../../bin/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen")
	dir := t.TempDir()
	cmd := exec.Command(bin, "crd", "paths="+operatorTypes, "output:crd:dir="+dir)
	cmd.Dir = filepath.Join("..", "..") // the project's module, which requires operatorTypes' module
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, out)
	}
	var crds []map[string]any
	for _, p := range plurals {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("monitoring.coreos.com_%s.yaml", p)))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s CRD: %v", p, err)
		}
		crds = append(crds, m)
	}
	return crds
}

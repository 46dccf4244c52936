package helm

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/inject"
	"github.com/inferwatch/inferwatch/internal/testenv"
	"gopkg.in/yaml.v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	sigsjson "sigs.k8s.io/json"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml from helm template")

const chart = "inferwatch"

// helmBinary finds helm at $INFERWATCH_HELM or <repo>/bin/helm.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("INFERWATCH_HELM"); p != "" {
		return p
	}
	p, _ := filepath.Abs(filepath.Join("..", "..", "bin", "helm"))
	if _, err := os.Stat(p); err != nil {
		testenv.Unavailable(t, "no helm at %s (cd tools/helm && go build -o ../../bin/helm helm.sh/helm/v4/cmd/helm): %v", p, err)
	}
	return p
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// valueSets are rendered and compared with testdata/<name>.yaml.
var valueSets = []struct {
	name string
	set  []string
	mode string
}{
	{"default", nil, "bootstrap"},
	{"cert-manager", []string{"certs.mode=cert-manager"}, "cert-manager"},
	{"cert-manager-issuer", []string{"certs.mode=cert-manager", "certs.certManager.issuerRef.name=corp-ca", "certs.certManager.issuerRef.kind=ClusterIssuer", "failurePolicy=Fail", "replicas=3", "sidecar.pushURL=http://vm.monitoring:8428/api/v1/import/prometheus"}, "cert-manager"},
}

func setArgs(set []string) []string {
	var a []string
	for _, s := range set {
		a = append(a, "--set", s)
	}
	return a
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"lint", "--strict", chart}, setArgs(vs.set)...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestTemplate renders each value set, compares it with its golden file and
// decodes and checks every object.
func TestTemplate(t *testing.T) {
	seen := map[string]bool{}
	for _, vs := range valueSets {
		// The value set owns its golden file even where helm is missing and
		// the render is skipped: the check for stale files below is about
		// files no value set names, not about renders that did not run.
		path := filepath.Join("testdata", vs.name+".yaml")
		seen[filepath.Base(path)] = true
		t.Run(vs.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "iw", chart, "--namespace", "inferwatch"}, setArgs(vs.set)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if want, err := os.ReadFile(path); err != nil || string(want) != out {
				t.Errorf("%s is stale or the chart changed (go test ./deploy/helm -update, then review the diff): %v", path, err)
			}
			checkObjects(t, vs.mode, vs.set, out)
		})
	}
	if *update {
		return
	}
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("stale golden %s: no value set renders it", f)
		}
	}
}

func checkObjects(t *testing.T, mode string, set []string, manifest string) {
	t.Helper()
	kinds := map[string]int{}
	var dep appsv1.Deployment
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	var svc corev1.Service
	var certSecret string
	var roles, injectorRules []rbacv1.PolicyRule // the certificate Jobs', the injector's
	for _, doc := range strings.Split(manifest, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if m == nil {
			continue
		}
		raw, _ := json.Marshal(m)
		kind, _ := m["kind"].(string)
		kinds[kind]++
		var obj any
		var role *rbacv1.Role
		switch kind {
		case "Deployment":
			obj = &dep
		case "Service":
			obj = &svc
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "MutatingWebhookConfiguration":
			obj = &mwc
		case "Role", "ClusterRole":
			role = &rbacv1.Role{}
			obj = role
		case "RoleBinding", "ClusterRoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "Job":
			obj = &batchv1.Job{}
		case "Issuer", "Certificate":
			// cert-manager's CRDs have no k8s.io/api type; check what we rely on.
			if m["apiVersion"] != "cert-manager.io/v1" {
				t.Errorf("%s apiVersion %v", kind, m["apiVersion"])
			}
			if kind == "Certificate" {
				spec, _ := m["spec"].(map[string]any)
				certSecret, _ = spec["secretName"].(string)
			}
			continue
		default:
			t.Errorf("rendered an object of unexpected kind %q", kind)
			continue
		}
		strict, err := sigsjson.UnmarshalStrict(raw, obj)
		if err != nil || len(strict) > 0 {
			t.Errorf("%s does not strict-decode into its k8s.io/api type: %v %v", kind, err, strict)
		}
		if role != nil {
			if strings.HasSuffix(role.Name, "-certgen") {
				roles = append(roles, role.Rules...)
			} else {
				injectorRules = append(injectorRules, role.Rules...)
			}
		}
	}
	accounts := 1 // the webhook's
	if mode == "bootstrap" {
		accounts = 2 // and the certificate Jobs'
	}
	for k, n := range map[string]int{"Deployment": 1, "Service": 1, "ServiceAccount": accounts, "PodDisruptionBudget": 1, "MutatingWebhookConfiguration": 1} {
		if kinds[k] != n {
			t.Errorf("%d objects of kind %s, want %d", kinds[k], k, n)
		}
	}
	want := int32(2)
	for _, s := range set {
		if v, ok := strings.CutPrefix(s, "replicas="); ok {
			fmt.Sscan(v, &want)
		}
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != want {
		t.Errorf("replicas %v, want %d", dep.Spec.Replicas, want)
	}
	// The injector's only API calls are creating Events and patching their
	// series: its token is mounted and its role allows exactly that.
	if dep.Spec.Template.Spec.AutomountServiceAccountToken == nil || !*dep.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Errorf("webhook pod mounts no service account token, so it cannot post Events")
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}
	if !reflect.DeepEqual(injectorRules, wantRules) {
		t.Errorf("injector RBAC rules %+v, want exactly %+v", injectorRules, wantRules)
	}
	// The webhook entries point at the injector's paths on the Service.
	var paths []string
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != svc.Name || w.ClientConfig.Service.Path == nil {
			t.Fatalf("webhook %s does not call the chart's Service", w.Name)
		}
		paths = append(paths, *w.ClientConfig.Service.Path)
		if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
			t.Errorf("webhook %s: sideEffects/admissionReviewVersions", w.Name)
		}
		excluded := false
		for _, e := range w.NamespaceSelector.MatchExpressions {
			excluded = excluded || (e.Key == "kubernetes.io/metadata.name" && slices.Contains(e.Values, "inferwatch"))
		}
		if !excluded {
			t.Errorf("webhook %s would send the injector's own namespace", w.Name)
		}
	}
	slices.Sort(paths)
	if !slices.Equal(paths, []string{inject.PathOptIn, inject.PathNamespace}) {
		t.Errorf("webhook paths %v, want the injector's %s and %s", paths, inject.PathOptIn, inject.PathNamespace)
	}
	// The Deployment mounts the Secret the certificates land in, at the paths its args name.
	c := dep.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--tls-cert=/tls/tls.crt") || !slices.Contains(c.Args, "--tls-key=/tls/tls.key") || c.Args[0] != "inject" {
		t.Errorf("injector args %v", c.Args)
	}
	vol := dep.Spec.Template.Spec.Volumes[0]
	switch mode {
	case "cert-manager":
		if certSecret == "" || vol.Secret.SecretName != certSecret {
			t.Errorf("Deployment mounts secret %q, Certificate writes %q", vol.Secret.SecretName, certSecret)
		}
		if mwc.Annotations["cert-manager.io/inject-ca-from"] != "inferwatch/"+dep.Name {
			t.Errorf("no CA injection annotation: %v", mwc.Annotations)
		}
		if kinds["Job"] != 0 || len(roles) != 0 {
			t.Errorf("cert-manager mode renders %d Jobs and %d RBAC rules", kinds["Job"], len(roles))
		}
	case "bootstrap":
		if kinds["Job"] != 2 {
			t.Errorf("%d certificate Jobs, want 2", kinds["Job"])
		}
		// Least privilege: no wildcards, get/update only on named objects.
		for _, r := range roles {
			if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
				t.Errorf("wildcard rule %+v", r)
			}
			if !slices.Equal(r.Verbs, []string{"create"}) && len(r.ResourceNames) == 0 {
				t.Errorf("rule %+v is not limited to named objects", r)
			}
		}
	}
}

// TestSchemaRejects: each bad value fails helm template on values.schema.json
// with a message naming the value.
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct{ set, field string }{
		{"replicas=0", "replicas"},
		{"failurePolicy=Sometimes", "failurePolicy"},
		{"certs.mode=vault", "mode"},
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"image.repository=", "repository"},
		{"sidecar.memoryLimit=lots", "memoryLimit"},
		{"sidecar.pushURL=vm:8428", "pushURL"},
		{"sidecar.extraArgs[0]=oops", "extraArgs"},
		{"excludedNamespaces[0]=Bad_NS", "excludedNamespaces"},
		{"timeoutSeconds=60", "timeoutSeconds"},
		{"certs.certManager.issuerRef.kind=Vault", "kind"},
		{"replica=2", "replica"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := helm(t, "template", "iw", chart, "--set", tc.set)
			if err == nil {
				t.Fatalf("accepted %s", tc.set)
			}
			if !strings.Contains(out, "schema") || !strings.Contains(out, tc.field) {
				t.Errorf("error does not name %s on the schema:\n%s", tc.field, out)
			}
		})
	}
}

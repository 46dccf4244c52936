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
	"time"

	"github.com/inferwatch/inferwatch/inject"
	"github.com/inferwatch/inferwatch/internal/testenv"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
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
	return testenv.ToolBinary(t, filepath.Join("..", ".."), "helm", "INFERWATCH_HELM", "cd tools/helm && go build -o ../../bin/helm helm.sh/helm/v4/cmd/helm")
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
	{"monitoring", []string{"monitoring.podMonitor.enabled=true", "monitoring.podMonitor.labels.release=kube-prometheus-stack",
		"monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.app\\.kubernetes\\.io/name=mine",
		"monitoring.dashboard.enabled=true", "monitoring.dashboard.namespace=grafana",
		"monitoring.dashboard.annotations.grafana_folder=ML",
		"monitoring.baseline.enabled=true", "monitoring.baseline.url=http://vmselect.monitoring:8481/select/0/prometheus",
		"monitoring.baseline.importURL=http://vminsert.monitoring:8480/insert/0/prometheus"}, "bootstrap"},
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
	var dashboard corev1.ConfigMap
	var baselineDep appsv1.Deployment
	var podMonitors []monitoringv1.PodMonitor
	var rule monitoringv1.PrometheusRule
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
			if meta, _ := m["metadata"].(map[string]any); strings.HasSuffix(fmt.Sprint(meta["name"]), "-baseline") {
				obj = &baselineDep
			}
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
		case "ConfigMap":
			obj = &dashboard
		case "PodMonitor":
			podMonitors = append(podMonitors, monitoringv1.PodMonitor{})
			obj = &podMonitors[len(podMonitors)-1]
		case "PrometheusRule":
			obj = &rule
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
			t.Errorf("%s does not strict-decode into its k8s.io/api (or Prometheus Operator) type: %v %v", kind, err, strict)
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
	deployments := 1
	if slices.Contains(set, "monitoring.baseline.enabled=true") {
		deployments = 2
		checkBaseline(t, &baselineDep)
	}
	for k, n := range map[string]int{"Deployment": deployments, "Service": 1, "ServiceAccount": accounts, "PodDisruptionBudget": 1, "MutatingWebhookConfiguration": 1} {
		if kinds[k] != n {
			t.Errorf("%d objects of kind %s, want %d", kinds[k], k, n)
		}
	}
	checkMonitoring(t, set, kinds, &dep, podMonitors, &rule, &dashboard)
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

// checkMonitoring: each monitoring object is rendered exactly when enabled,
// and says what the rest of the project does. One PodMonitor scrapes the
// port the injector names on every sidecar, often enough for the rules'
// 1-minute rates, the other the injector's own pods and metrics port; the
// PrometheusRule holds deploy/rules' groups unchanged, which promtool loads;
// the ConfigMap holds deploy/grafana's dashboards, byte for byte.
func checkMonitoring(t *testing.T, set []string, kinds map[string]int, dep *appsv1.Deployment, pms []monitoringv1.PodMonitor, rule *monitoringv1.PrometheusRule, cm *corev1.ConfigMap) {
	t.Helper()
	for kind, value := range map[string]string{"PodMonitor": "podMonitor", "PrometheusRule": "prometheusRule", "ConfigMap": "dashboard"} {
		want := 0
		if slices.Contains(set, "monitoring."+value+".enabled=true") {
			want = 1
			if kind == "PodMonitor" {
				want = 2
			}
		}
		if kinds[kind] != want {
			t.Errorf("%d objects of kind %s, want %d", kinds[kind], kind, want)
		}
	}
	if len(pms) == 2 {
		sidecars, injector := pms[0], pms[1]
		if injector.Spec.NamespaceSelector.Any {
			sidecars, injector = injector, sidecars
		}
		eps := sidecars.Spec.PodMetricsEndpoints
		if len(eps) != 1 || portName(eps) != inject.AdminPortName || eps[0].Path != "/metrics" {
			t.Errorf("sidecars' PodMonitor: %d endpoints, the first on port %s path %q; want one, the sidecar's %s port, /metrics",
				len(eps), portName(eps), pathOf(eps), inject.AdminPortName)
		} else if d, err := time.ParseDuration(string(eps[0].Interval)); err != nil || d > 30*time.Second {
			t.Errorf("PodMonitor interval %q: the rules' rate(...[1m]) needs two samples a minute (docs/rules.md)", eps[0].Interval)
		}
		if want := map[string]string{inject.LabelInjected: "true"}; !reflect.DeepEqual(sidecars.Spec.Selector.MatchLabels, want) {
			t.Errorf("sidecars' PodMonitor selects %v, want the injector's label %v", sidecars.Spec.Selector.MatchLabels, want)
		}
		if !sidecars.Spec.NamespaceSelector.Any || sidecars.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("sidecars' PodMonitor: namespaceSelector %+v, labels %v", sidecars.Spec.NamespaceSelector, sidecars.Labels)
		}
		// The injector's: its namespace, its pods' labels, a port its container names.
		eps = injector.Spec.PodMetricsEndpoints
		ports := map[string]bool{}
		for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
			ports[p.Name] = true
		}
		matches := len(injector.Spec.Selector.MatchLabels) > 0
		for k, v := range injector.Spec.Selector.MatchLabels {
			matches = matches && dep.Spec.Template.Labels[k] == v
		}
		if !matches || !slices.Equal(injector.Spec.NamespaceSelector.MatchNames, []string{dep.Namespace}) || len(eps) != 1 || !ports[portName(eps)] {
			t.Errorf("injector's PodMonitor: selector %v in %v, port %s; the injector's pods are %v in %s with ports %v",
				injector.Spec.Selector.MatchLabels, injector.Spec.NamespaceSelector.MatchNames, portName(eps), dep.Spec.Template.Labels, dep.Namespace, ports)
		}
	}
	if kinds["PrometheusRule"] == 1 {
		// A user's label on a key the chart sets does not override it.
		if rule.Labels["app.kubernetes.io/name"] != "inferwatch" {
			t.Errorf("PrometheusRule labels %v: the chart's app.kubernetes.io/name lost to a value's", rule.Labels)
		}
		src, err := os.ReadFile(filepath.Join("..", "rules", "inferwatch-rules.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var want, got any
		if err := yaml.Unmarshal(src, &want); err != nil {
			t.Fatal(err)
		}
		rendered, _ := json.Marshal(rule.Spec)
		if err := yaml.Unmarshal(rendered, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(t, want), normalize(t, got)) {
			t.Errorf("PrometheusRule spec differs from deploy/rules/inferwatch-rules.yaml")
		}
		f := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(f, rendered, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(testenv.RequireBinary(t, "promtool"), "check", "rules", f).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules on the PrometheusRule's spec: %v\n%s", err, out)
		}
	}
	if kinds["ConfigMap"] == 1 {
		files, _ := filepath.Glob(filepath.Join("..", "grafana", "*.json"))
		if len(cm.Data) != len(files) {
			t.Errorf("dashboard ConfigMap holds %d dashboards, deploy/grafana %d", len(cm.Data), len(files))
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := cm.Data[filepath.Base(f)]; got != strings.TrimSuffix(string(src), "\n") {
				t.Errorf("dashboard ConfigMap's %s holds %d bytes that differ from %s (%d)", filepath.Base(f), len(got), f, len(src))
			}
		}
		if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "grafana" || cm.Annotations["grafana_folder"] != "ML" {
			t.Errorf("dashboard ConfigMap: namespace %q, labels %v, annotations %v", cm.Namespace, cm.Labels, cm.Annotations)
		}
	}
}

func portName(eps []monitoringv1.PodMetricsEndpoint) string {
	if len(eps) == 0 || eps[0].Port == nil {
		return "(none)"
	}
	return *eps[0].Port
}

func pathOf(eps []monitoringv1.PodMetricsEndpoint) string {
	if len(eps) == 0 {
		return ""
	}
	return eps[0].Path
}

// checkBaseline: the baseline Deployment runs `inferwatch baseline` alone,
// one replica, unprivileged and without a service account token.
func checkBaseline(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.Containers[0].Args) == 0 || spec.Containers[0].Args[0] != "baseline" {
		t.Fatalf("baseline Deployment %q: containers %+v", d.Name, spec.Containers)
	}
	c := spec.Containers[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken ||
		c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation ||
		spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("baseline Deployment: replicas %v, token %v, security %+v / %+v", d.Spec.Replicas, spec.AutomountServiceAccountToken, spec.SecurityContext, c.SecurityContext)
	}
}

// normalize round-trips a decoded YAML document through JSON, so that the
// file's and the rendered object's numbers and maps compare alike.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChartCopies: the chart ships copies of the rules and the dashboard
// (helm reads no file outside the chart); they must be the files themselves.
func TestChartCopies(t *testing.T) {
	for _, f := range []struct{ src, copy string }{
		{"../rules/inferwatch-rules.yaml", "inferwatch/files/inferwatch-rules.yaml"},
		{"../grafana/inferwatch.json", "inferwatch/files/inferwatch.json"},
		{"../grafana/inferwatch-fleet.json", "inferwatch/files/inferwatch-fleet.json"},
	} {
		a, err := os.ReadFile(f.src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(f.copy)
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s is not a copy of %s (go generate ./deploy/helm): %v", f.copy, f.src, err)
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
		{"monitoring.podMonitor.interval=15", "interval"},
		{"monitoring.podMonitor.namespaces[0]=Team_A", "namespaces"},
		{"monitoring.dashboard.enabled=yes", "enabled"},
		{"monitoring.prometheusRule.label.x=y", "label"},
		{"monitoring.baseline.enabled=true", "url"},
		{"monitoring.baseline.group=name space", "group"},
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

// TestFreeTextValuesQuoted: values passed on as the injector's flags reach
// it whole, whatever they hold: unquoted, "otel: 4317" rendered as a map
// and " #c" was cut off as a comment.
func TestFreeTextValuesQuoted(t *testing.T) {
	out, err := helm(t, "template", "iw", chart, "--set", "sidecar.otlpEndpoint=otel: 4317", "--set", "sidecar.extraArgs={--a=b #c}")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var args []string
	for _, doc := range strings.Split(out, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		raw, _ := json.Marshal(m)
		var dep appsv1.Deployment
		if err := json.Unmarshal(raw, &dep); err != nil || dep.Kind != "Deployment" || strings.HasSuffix(dep.Name, "-baseline") {
			continue
		}
		args = dep.Spec.Template.Spec.Containers[0].Args
	}
	for _, want := range []string{"--otlp-endpoint=otel: 4317", "--sidecar-args=--a=b #c"} {
		if !slices.Contains(args, want) {
			t.Errorf("injector args lack %q: %q", want, args)
		}
	}
}

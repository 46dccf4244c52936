package inject

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/inferwatch/inferwatch/internal/testenv"
	"gopkg.in/yaml.v3"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chartRender is the Helm chart's golden default render: the test registers
// its webhook configuration and its RBAC with the real apiserver.
const chartRender = "../deploy/helm/testdata/default.yaml"

// seriesInterval is the injector's Event series interval in
// TestKubeAPIServer, and ownedRefusals how many times it refuses the
// ReplicaSet-style pod.
const (
	seriesInterval = time.Second
	ownedRefusals  = 4
)

// TestKubeAPIServer: a real kube-apiserver (built from k8s.io/kubernetes in
// tools/kube, over a real etcd) admits the recorded pods through the
// injector, registered with the chart's MutatingWebhookConfiguration over
// HTTPS. The stored pods must be the recorded ones with the golden patches
// applied (and the apiserver's defaults), and the pods the injector cannot
// handle must run uninjected, annotated, with a Warning Event posted under
// the chart's RBAC; the same refusal repeated (replicas of one ReplicaSet)
// is counted on that one Event's series, not posted again.
func TestKubeAPIServer(t *testing.T) {
	etcdBin, apiBin := testenv.KubeBinaries(t, "..")
	dir := t.TempDir()
	chart := chartObjects(t)
	sa := chart["ClusterRoleBinding"]["subjects"].([]any)[0].(map[string]any)
	injectorUser := testenv.KubeUser{
		Name:   fmt.Sprintf("system:serviceaccount:%s:%s", sa["namespace"], sa["name"]),
		Token:  testenv.RandomToken(t),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sa["namespace"].(string)},
	}
	kube := testenv.StartKube(t, etcdBin, apiBin, dir, injectorUser)

	// The injector, over HTTPS with a self-signed certificate, posting its
	// Events with the service account's token.
	tokenFile := filepath.Join(dir, "injector.token")
	if err := os.WriteFile(tokenFile, []byte(injectorUser.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	whDir := filepath.Join(dir, "webhook")
	os.Mkdir(whDir, 0o700)
	writeCert(t, whDir, 1)
	caPEM, err := os.ReadFile(filepath.Join(whDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	ready := make(chan [2]net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeOptions{
			Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
			CertFile: filepath.Join(whDir, "tls.crt"), KeyFile: filepath.Join(whDir, "tls.key"),
			Events:   &APIServer{URL: kube.URL, TokenFile: tokenFile, CAFile: kube.CAFile},
			Instance: "iw-injector-test",
			// Repeated refusals are PATCHed onto their Event at most once
			// a second (30 s in production).
			EventSeriesInterval: seriesInterval,
			Ready:               func(w, a net.Addr) { ready <- [2]net.Addr{w, a} },
		}, DefaultConfig(), slog.New(slog.NewTextHandler(logs, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if t.Failed() {
			t.Logf("injector log:\n%s", logs)
		}
	})
	var addrs [2]net.Addr
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}

	// Namespaces: the chart's own, one for opted-in pods, one labelled for
	// injection, and default (already there).
	for _, ns := range []struct{ name, label string }{{"inferwatch", ""}, {"models", ""}, {"kserve-test", "enabled"}} {
		obj := corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns.name}}
		if ns.label != "" {
			obj.Labels = map[string]string{LabelNamespace: ns.label}
		}
		kube.Create(t, "/api/v1/namespaces", obj)
	}
	// The chart's RBAC for the injector, then wait until it is in force.
	kube.Create(t, "/apis/rbac.authorization.k8s.io/v1/clusterroles", chart["ClusterRole"])
	kube.Create(t, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", chart["ClusterRoleBinding"])
	waitAllowed(t, kube, injectorUser.Token, "models")
	// The chart's webhook configuration, calling this injector by URL.
	mwc := chart["MutatingWebhookConfiguration"]
	for _, w := range mwc["webhooks"].([]any) {
		cc := w.(map[string]any)["clientConfig"].(map[string]any)
		path := cc["service"].(map[string]any)["path"].(string)
		w.(map[string]any)["clientConfig"] = map[string]any{
			"url":      "https://" + addrs[0].String() + path,
			"caBundle": base64.StdEncoding.EncodeToString(caPEM),
		}
	}
	kube.Create(t, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mwc)
	triton := reviewObject(t, "triton")
	waitWebhook(t, kube, triton)

	// A dry run of a pod the injector refuses: annotated in the answer, but
	// no Event (the Events are posted in order, so one from this dry run
	// would be counted below before the real ones are found).
	dry := reviewObject(t, "not-understood")
	status, b, err := kube.Do("POST", testenv.Path("api", "v1", "namespaces", dry.Namespace, "pods")+"?dryRun=All", dry)
	if err != nil || status != http.StatusCreated || !strings.Contains(string(b), statusSkippedPrefx) {
		t.Fatalf("dry-run create of the not-understood pod: %d %s %v", status, b, err)
	}
	// A copy of the not-understood pod as a ReplicaSet would create it: no
	// name yet at admission, so its Event regards the ReplicaSet.
	owned := reviewObject(t, "not-understood")
	owned.Name, owned.GenerateName = "", "custom-rs-"
	ctrl := true
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "custom-rs", UID: "5b3c1a52-8d7e-4b8f-9c1d-2e3f4a5b6c7d", Controller: &ctrl}}

	cases := []struct {
		name   string
		pod    *corev1.Pod
		golden string // the recorded review whose golden patch the stored pod must show
		action string
		regard string // kind/name an Event must regard (skipped pods)
	}{
		{"triton", triton, "triton", "injected", ""},
		{"triton-dra", reviewObject(t, "triton-dra"), "triton-dra", "injected", ""},
		{"triton-process-facts", reviewObject(t, "triton-process-facts"), "triton-process-facts", "injected", ""},
		{"kserve-predictor", reviewObject(t, "kserve-predictor"), "kserve-predictor", "injected", ""},
		// eBPF: hostPID, the tracefs hostPath volume and its mount, added
		// capabilities — the apiserver's validation of all of them.
		{"kserve-raw-ebpf", reviewObject(t, "kserve-raw-ebpf"), "kserve-raw-ebpf", "injected", ""},
		{"tfserving", reviewObject(t, "tfserving"), "tfserving", "injected", ""},
		{"tfserving-grpc-only", reviewObject(t, "tfserving-grpc-only"), "tfserving-grpc-only", "injected", ""},
		{"unannotated", reviewObject(t, "unannotated"), "unannotated", "ignored", ""},
		{"already-injected", reviewObject(t, "already-injected"), "already-injected", "ignored", ""},
		{"not-understood", reviewObject(t, "not-understood"), "not-understood", "skipped", "Pod/custom"},
		{"not-understood-owned", owned, "", "skipped", "ReplicaSet/custom-rs"},
		// The sidecar's Linux-only security context would have the pod
		// refused; skipped, it is created as written.
		{"triton-windows", reviewObject(t, "triton-windows"), "triton-windows", "skipped", "Pod/triton-win"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.pod.Namespace
			b := kube.Create(t, testenv.Path("api", "v1", "namespaces", ns, "pods"), tc.pod)
			var stored corev1.Pod
			if err := json.Unmarshal(b, &stored); err != nil {
				t.Fatalf("stored pod does not decode: %v", err)
			}
			// Read it back rather than trust the create answer.
			status, b, err := kube.Do("GET", testenv.Path("api", "v1", "namespaces", ns, "pods", stored.Name), nil)
			if err != nil || status != http.StatusOK {
				t.Fatalf("GET pod %s: %d %s %v", stored.Name, status, b, err)
			}
			stored = corev1.Pod{}
			if err := json.Unmarshal(b, &stored); err != nil {
				t.Fatal(err)
			}
			sidecars := 0
			for _, c := range stored.Spec.Containers {
				if c.Name == ContainerName {
					sidecars++
				}
			}
			st := stored.Annotations[AnnStatus]
			switch tc.action {
			case "injected":
				if sidecars != 1 || st != StatusInjected {
					t.Errorf("%d sidecars, status %q: want 1 and %q", sidecars, st, StatusInjected)
				}
			case "ignored":
				if sidecars > 1 || len(stored.Spec.Containers) != len(tc.pod.Spec.Containers) || st != tc.pod.Annotations[AnnStatus] {
					t.Errorf("ignored pod changed: %d containers (%d sidecars), status %q; sent %d, %q",
						len(stored.Spec.Containers), sidecars, st, len(tc.pod.Spec.Containers), tc.pod.Annotations[AnnStatus])
				}
			case "skipped":
				if sidecars != 0 || !strings.HasPrefix(st, statusSkippedPrefx) {
					t.Errorf("%d sidecars, status %q: want none and %q...", sidecars, st, statusSkippedPrefx)
				}
			}
			if tc.golden != "" {
				want := goldenPod(t, tc.golden)
				comparePods(t, want, &stored)
			}
			if tc.regard != "" {
				ev := waitEvent(t, kube, ns, tc.regard)
				why := strings.TrimPrefix(st, statusSkippedPrefx)
				if ev.Type != corev1.EventTypeWarning || ev.Reason != EventReason || ev.ReportingController != eventController ||
					ev.ReportingInstance != "iw-injector-test" || !strings.HasSuffix(ev.Note, ": "+why) {
					t.Errorf("Event %+v does not say why (%q) as the injector", ev, why)
				}
			}
		})
	}
	// More replicas of the ReplicaSet, refused like the first: still one
	// Event, its series counting every refusal once the injector has
	// PATCHed it (at most once a seriesInterval).
	for i := 1; i < ownedRefusals; i++ {
		b := kube.Create(t, testenv.Path("api", "v1", "namespaces", owned.Namespace, "pods"), owned)
		var stored corev1.Pod
		if err := json.Unmarshal(b, &stored); err != nil || !strings.HasPrefix(stored.Annotations[AnnStatus], statusSkippedPrefx) {
			t.Fatalf("replica %d: status %q, want %q... (%v)", i+1, stored.Annotations[AnnStatus], statusSkippedPrefx, err)
		}
	}
	series := waitSeries(t, kube, owned.Namespace, "ReplicaSet/custom-rs", ownedRefusals)
	if series.Series.LastObservedTime.Before(&series.EventTime) {
		t.Errorf("series lastObservedTime %v before the Event's time %v", series.Series.LastObservedTime, series.EventTime)
	}
	// Only the refused pods got Events (not the dry run, not the
	// repeats), all in models.
	refused := 0
	for _, tc := range cases {
		if tc.regard != "" {
			refused++
		}
	}
	status, b, err = kube.Do("GET", "/apis/events.k8s.io/v1/events", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("list Events: %d %v", status, err)
	}
	var list eventsv1.EventList
	json.Unmarshal(b, &list)
	n := 0
	for _, ev := range list.Items {
		if ev.ReportingController == eventController {
			n++
		}
	}
	if n != refused {
		t.Errorf("%d injector Events, want %d (the refused pods only)", n, refused)
	}
	// What NOTES.txt and the README tell a user to run finds them:
	// kubectl get events -n models --field-selector reason=InferwatchNotInjected
	status, b, err = kube.Do("GET", "/api/v1/namespaces/models/events?fieldSelector=reason%3D"+EventReason, nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("list core/v1 Events by reason: %d %s %v", status, b, err)
	}
	var core corev1.EventList
	json.Unmarshal(b, &core)
	if len(core.Items) != refused {
		t.Errorf("%d core/v1 Events with reason %s in models, want %d: %s", len(core.Items), EventReason, refused, b)
	}
	// The injector counts what it posted.
	resp, err := http.Get("http://" + addrs[1].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		fmt.Sprintf(`inferwatch_injector_events_total{result="posted"} %d`, refused),
		`inferwatch_injector_events_total{result="failed"} 0`,
		`inferwatch_injector_events_total{result="dropped"} 0`,
		fmt.Sprintf(`inferwatch_injector_events_total{result="coalesced"} %d`, ownedRefusals-1),
	} {
		if !strings.Contains(string(m), line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, m)
		}
	}
	// At least one PATCH, at most one a repeat (how many depends on how
	// the repeats fell on the interval).
	var patched int
	for _, l := range strings.Split(string(m), "\n") {
		if v, ok := strings.CutPrefix(l, `inferwatch_injector_events_total{result="patched"} `); ok {
			fmt.Sscan(v, &patched)
		}
	}
	if patched < 1 || patched > ownedRefusals-1 {
		t.Errorf("patched %d, want 1 to %d:\n%s", patched, ownedRefusals-1, m)
	}
}

// chartObjects decodes the chart's golden render, keeping the injector's
// own objects (not the certificate Jobs' hooks) by kind.
func chartObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	b, err := os.ReadFile(chartRender)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(string(b), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%s: %v", chartRender, err)
		}
		if m == nil {
			continue
		}
		meta, _ := m["metadata"].(map[string]any)
		if ann, _ := meta["annotations"].(map[string]any); ann["helm.sh/hook"] != nil {
			continue
		}
		out[m["kind"].(string)] = m
	}
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"} {
		if out[k] == nil {
			t.Fatalf("%s has no %s", chartRender, k)
		}
	}
	return out
}

func readReview(t *testing.T, name string) admissionv1.AdmissionReview {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/reviews", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &rv); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return rv
}

// reviewObject is the pod a recorded review carries, ready to create.
func reviewObject(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	rv := readReview(t, name)
	var pod corev1.Pod
	if err := json.Unmarshal(rv.Request.Object.Raw, &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = rv.Request.Namespace
	}
	return &pod
}

// goldenPod is the recorded pod with its golden patch applied.
func goldenPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	rv := readReview(t, name)
	raw := []byte(rv.Request.Object.Raw)
	b, err := os.ReadFile(filepath.Join("testdata/golden", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(g.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatalf("golden patch %s does not apply: %v", name, err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// comparePods checks what the injector decides (containers, their
// commands, ports, probes, env, resources, security) and its status
// annotation; the apiserver's defaults (termination paths, probe timings
// left unset, ...) are not compared.
func comparePods(t *testing.T, want, got *corev1.Pod) {
	t.Helper()
	if w, g := want.Annotations[AnnStatus], got.Annotations[AnnStatus]; w != g {
		t.Errorf("status annotation %q, want %q", g, w)
	}
	if len(got.Spec.Containers) != len(want.Spec.Containers) {
		t.Fatalf("%d containers, want %d", len(got.Spec.Containers), len(want.Spec.Containers))
	}
	handler := func(p *corev1.Probe) any {
		if p == nil {
			return nil
		}
		return p.ProbeHandler
	}
	for i, w := range want.Spec.Containers {
		g := got.Spec.Containers[i]
		apiDefaults(&w)
		for _, f := range []struct {
			field     string
			want, got any
		}{
			{"name", w.Name, g.Name},
			{"image", w.Image, g.Image},
			{"command", w.Command, g.Command},
			{"args", w.Args, g.Args},
			{"ports", w.Ports, g.Ports},
			{"env", w.Env, g.Env},
			{"limits", quantities(w.Resources.Limits), quantities(g.Resources.Limits)},
			{"requests", quantities(w.Resources.Requests), quantities(g.Resources.Requests)},
			{"readinessProbe", handler(w.ReadinessProbe), handler(g.ReadinessProbe)},
			{"livenessProbe", handler(w.LivenessProbe), handler(g.LivenessProbe)},
			{"startupProbe", handler(w.StartupProbe), handler(g.StartupProbe)},
			{"securityContext", w.SecurityContext, g.SecurityContext},
		} {
			if !reflect.DeepEqual(f.want, f.got) {
				t.Errorf("container %s: %s\n got %+v\nwant %+v", w.Name, f.field, f.got, f.want)
			}
		}
	}
}

// waitAllowed waits until RBAC lets the token create and patch Events in
// ns (the authorizer's caches follow the new binding a moment later).
func waitAllowed(t *testing.T, kube *testenv.Kube, token, ns string) {
	t.Helper()
	for _, verb := range []string{"create", "patch"} {
		waitAllowedVerb(t, kube, token, ns, verb)
	}
}

func waitAllowedVerb(t *testing.T, kube *testenv.Kube, token, ns, verb string) {
	t.Helper()
	review := map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": map[string]any{"group": "events.k8s.io", "resource": "events", "verb": verb, "namespace": ns}},
	}
	deadline := time.Now().Add(time.Minute)
	for {
		status, b, err := kube.DoAs(token, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
		var r struct {
			Status struct{ Allowed bool } `json:"status"`
		}
		if err == nil && status == http.StatusCreated && json.Unmarshal(b, &r) == nil && r.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart's RBAC does not let the injector %s Events: %d %s %v", verb, status, b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitWebhook dry-runs the Triton pod until the apiserver has picked up the
// webhook configuration and the injector answers (dry runs post no Events).
func waitWebhook(t *testing.T, kube *testenv.Kube, pod *corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		status, b, err := kube.Do("POST", testenv.Path("api", "v1", "namespaces", pod.Namespace, "pods")+"?dryRun=All", pod)
		var got corev1.Pod
		if err == nil && status == http.StatusCreated && json.Unmarshal(b, &got) == nil && got.Annotations[AnnStatus] == StatusInjected {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook was not called within a minute: %d %s %v", status, b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitEvent polls ns until an injector Event regards kindName.
func waitEvent(t *testing.T, kube *testenv.Kube, ns, kindName string) eventsv1.Event {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		status, b, err := kube.Do("GET", testenv.Path("apis", "events.k8s.io", "v1", "namespaces", ns, "events"), nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("list Events: %d %s %v", status, b, err)
		}
		var list eventsv1.EventList
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if ev.ReportingController == eventController && ev.Regarding.Kind+"/"+ev.Regarding.Name == kindName {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no injector Event regarding %s in %s within a minute: %s", kindName, ns, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitSeries polls ns until the injector's Event regarding kindName has a
// series of count, read back from the apiserver; a count above it fails.
func waitSeries(t *testing.T, kube *testenv.Kube, ns, kindName string, count int32) eventsv1.Event {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ev := waitEvent(t, kube, ns, kindName)
		if ev.Series != nil && ev.Series.Count > count {
			t.Fatalf("Event %s series count %d, want %d", ev.Name, ev.Series.Count, count)
		}
		if ev.Series != nil && ev.Series.Count == count {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Event regarding %s has series %+v, not count %d, a minute on", kindName, ev.Series, count)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiDefaults applies to c the apiserver's defaults for the fields
// comparePods compares.
func apiDefaults(c *corev1.Container) {
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.APIVersion == "" {
			e.ValueFrom.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p != nil && p.HTTPGet != nil && p.HTTPGet.Scheme == "" {
			p.HTTPGet.Scheme = corev1.URISchemeHTTP
		}
	}
	// A limit without a request makes the request.
	for k, v := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[k]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[k] = v
		}
	}
}

// quantities makes a ResourceList comparable (a Quantity caches its text).
func quantities(l corev1.ResourceList) map[corev1.ResourceName]string {
	if len(l) == 0 {
		return nil
	}
	m := map[corev1.ResourceName]string{}
	for k, v := range l {
		m[k] = v.String()
	}
	return m
}

// lockedBuffer collects a log written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

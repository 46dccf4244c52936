package inject

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the injector's output")

// goldenCases are the recorded AdmissionReviews (testdata/reviews) and what
// each must lead to. Every golden file must belong to a case.
var goldenCases = []struct {
	name   string
	mode   Mode
	action string
}{
	{"triton", OptIn, "injected"},
	{"triton-unlabelled", OptIn, "injected"},    // no labels map: the label op adds one
	{"triton-dra", OptIn, "injected"},           // the GPU through a DRA claim, which the sidecar shares
	{"triton-process-facts", OptIn, "injected"}, // shareProcessNamespace, the upstream by its socket's user
	{"kserve-predictor", Namespace, "injected"},
	{"kserve-raw-ebpf", OptIn, "injected"},
	{"kserve-raw-custom", OptIn, "skipped"},    // no command or args: flags in args would replace its image's CMD
	{"tfserving", OptIn, "injected"},           // the official image: its entrypoint's REST and gRPC ports
	{"tfserving-grpc-only", OptIn, "injected"}, // tensorflow_model_server run directly, no REST API: gRPC alone
	{"triton-windows", OptIn, "skipped"},       // a Linux sidecar cannot run in it, and its security context would be refused
	{"unannotated", OptIn, "ignored"},
	{"already-injected", OptIn, "ignored"},
	{"not-understood", OptIn, "skipped"},
	{"bad-annotation", OptIn, "skipped"},
	{"malformed", OptIn, "skipped"},
}

// golden is what a golden file holds: the response with its patch decoded.
type golden struct {
	Response *admissionv1.AdmissionResponse `json:"response"`
	Patch    json.RawMessage                `json:"patch,omitempty"`
}

func TestGoldenReviews(t *testing.T) {
	cfg := DefaultConfig()
	seen := map[string]bool{}
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata/reviews", tc.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			out, action, status, err := Review(cfg, tc.mode, in)
			if err != nil || status != http.StatusOK {
				t.Fatalf("Review: status %d, %v", status, err)
			}
			if action != tc.action {
				t.Errorf("action %q, want %q", action, tc.action)
			}
			var rv admissionv1.AdmissionReview
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(out, &rv); err != nil {
				t.Fatal(err)
			}
			if rv.APIVersion != "admission.k8s.io/v1" || rv.Kind != "AdmissionReview" || rv.Response == nil || !rv.Response.Allowed {
				t.Fatalf("response not an allowed admission.k8s.io/v1 review: %s", out)
			}
			var req admissionv1.AdmissionReview
			json.Unmarshal(in, &req)
			if rv.Response.UID != req.Request.UID {
				t.Errorf("uid %q, want %q", rv.Response.UID, req.Request.UID)
			}
			g := golden{Response: rv.Response}
			if rv.Response.Patch != nil {
				var ind bytes.Buffer
				json.Indent(&ind, rv.Response.Patch, "", "  ")
				g.Patch = ind.Bytes()
				if *rv.Response.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Errorf("patch type %q", *rv.Response.PatchType)
				}
			}
			patch := rv.Response.Patch
			resp := *rv.Response
			resp.Patch, resp.PatchType = nil, nil
			g.Response = &resp
			got, _ := json.MarshalIndent(g, "", "  ")
			got = append(got, '\n')
			path := filepath.Join("testdata/golden", tc.name+".json")
			seen[filepath.Base(path)] = true
			if *update {
				os.MkdirAll("testdata/golden", 0o755)
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test ./inject -run TestGoldenReviews -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s is stale or the injector changed (go test ./inject -update, then review the diff)\ngot:\n%s", path, got)
				}
			}
			if tc.action == "ignored" && patch != nil {
				t.Errorf("ignored pod got a patch")
			}
			if tc.action == "skipped" {
				if len(rv.Response.Warnings) == 0 {
					t.Errorf("skipped pod has no warning")
				}
				if tc.name != "malformed" && !strings.Contains(string(patch), AnnStatus[len(Prefix):]) {
					t.Errorf("skipped pod's patch does not annotate why: %s", patch)
				}
			}
			if patch == nil || tc.name == "malformed" {
				return
			}
			checkPatched(t, tc.mode, req.Request.Object.Raw, patch, tc.action == "injected")
		})
	}
	if *update {
		return
	}
	files, _ := filepath.Glob("testdata/golden/*.json")
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("stale golden %s: no case produces it (delete it or add its case)", f)
		}
	}
}

// checkPatched applies the patch as the apiserver would and checks the pod.
func checkPatched(t *testing.T, mode Mode, raw, patch []byte, injected bool) {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch does not decode as RFC 6902: %v", err)
	}
	doc, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch does not apply: %v", err)
	}
	var pod corev1.Pod
	strictErrs, err := sigsjson.UnmarshalStrict(doc, &pod)
	if err != nil || len(strictErrs) > 0 {
		t.Fatalf("patched pod does not strict-decode into corev1.Pod: %v %v", err, strictErrs)
	}
	names := map[string]bool{}
	portNames := map[string]bool{}
	ports := map[int32]string{}
	for _, c := range pod.Spec.Containers {
		if names[c.Name] {
			t.Errorf("container name %q twice", c.Name)
		}
		names[c.Name] = true
		for _, cp := range c.Ports {
			if other, ok := ports[cp.ContainerPort]; ok {
				t.Errorf("port %d in %q and %q", cp.ContainerPort, other, c.Name)
			}
			ports[cp.ContainerPort] = c.Name
			if cp.Name != "" {
				if portNames[cp.Name] {
					t.Errorf("port name %q twice", cp.Name)
				}
				portNames[cp.Name] = true
				if len(cp.Name) > 15 {
					t.Errorf("port name %q over 15 characters", cp.Name)
				}
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		for kind, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if pr == nil {
				continue
			}
			var port intstr.IntOrString
			switch {
			case pr.HTTPGet != nil:
				port = pr.HTTPGet.Port
			case pr.TCPSocket != nil:
				port = pr.TCPSocket.Port
			case pr.GRPC != nil:
				port = intstr.FromInt32(pr.GRPC.Port)
			default:
				continue
			}
			if port.Type == intstr.String {
				if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port.StrVal }) {
					t.Errorf("%s %s probe on port name %q that the container does not have", c.Name, kind, port.StrVal)
				}
			} else if owner, ok := ports[port.IntVal]; !ok || owner != c.Name {
				t.Errorf("%s %s probe on port %d, which belongs to %q", c.Name, kind, port.IntVal, owner)
			}
		}
	}
	if injected {
		if !names[ContainerName] || pod.Annotations[AnnStatus] != StatusInjected {
			t.Errorf("no sidecar or no status annotation: %v %v", names, pod.Annotations)
		}
		if pod.Labels[LabelInjected] != "true" {
			t.Errorf("injected pod's labels %v lack %s=true", pod.Labels, LabelInjected)
		}
		side := pod.Spec.Containers[len(pod.Spec.Containers)-1]
		sc := side.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("sidecar security context too loose: %+v", sc)
		}
		ebpf := pod.Annotations[AnnEBPF] == "true"
		if !ebpf && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || len(sc.Capabilities.Add) > 0) {
			t.Errorf("sidecar without eBPF is not non-root without capabilities: %+v", sc)
		}
		if ebpf != slices.Contains(side.Args, "--no-bpf") == false {
			t.Errorf("eBPF %v but args %v", ebpf, side.Args)
		}
		env := map[string]string{}
		for _, e := range side.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		for _, want := range []string{"POD_NAME", "POD_NAMESPACE", "NODE_NAME", "POD_IP"} {
			if env[want] == "" {
				t.Errorf("sidecar lacks downward-API env %s", want)
			}
		}
		// Every upstream the sidecar forwards to is a port some other container declares.
		for _, a := range side.Args {
			if _, up, ok := strings.Cut(a, "-upstream=127.0.0.1:"); ok {
				var n int32
				fmt.Sscan(up, &n)
				if owner := ports[n]; owner == "" || owner == ContainerName {
					t.Errorf("sidecar upstream %d is not a port of the server (owner %q)", n, owner)
				}
			}
		}
	}
	// A second pass (reinvocation) adds nothing.
	again := Mutate(DefaultConfig(), mode, &pod)
	if len(again.Patch) != 0 {
		t.Errorf("second pass patched again (%s): %+v", again.Reason, again.Patch)
	}
}

// TestBadRequests: bodies that are not reviews are refused with a status.
func TestBadRequests(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"not json", `{"apiVersion":`, http.StatusBadRequest},
		{"wrong kind", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, http.StatusBadRequest},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"no uid", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, status, err := Review(DefaultConfig(), OptIn, []byte(tc.body))
			if err == nil || status != tc.status {
				t.Errorf("status %d err %v, want %d and an error", status, err, tc.status)
			}
		})
	}
}

// TestAnnotationErrors: each bad annotation skips the pod naming the annotation.
func TestAnnotationErrors(t *testing.T) {
	raw, err := os.ReadFile("testdata/reviews/triton.json")
	if err != nil {
		t.Fatal(err)
	}
	var rv admissionv1.AdmissionReview
	json.Unmarshal(raw, &rv)
	var base corev1.Pod
	json.Unmarshal(rv.Request.Object.Raw, &base)
	for _, tc := range []struct{ key, value string }{
		{AnnSLA, "m"},
		{AnnSLA, "m=-1s"},
		{AnnTraceTarget, "many"},
		{AnnTraceTarget, "NaN"}, // the sidecar refuses these (config: target_per_second)
		{AnnTraceTarget, "+Inf"},
		{AnnPushURL, "victoria:8428"},
		{AnnPushURL, "tcp://victoria:8428/api/v1/import/prometheus"}, // the sidecar pushes over http(s) only
		{AnnCPURequest, "lots"},
		{AnnMemoryRequest, "1Gi"}, // above the 512Mi limit the fixture sets
		{AnnPorts, "http=8000,udp=9"},
		{AnnPorts, "http=70000"},
		{AnnPorts, "http=8000,http=8002"}, // one listener per protocol in the sidecar
		{AnnPorts, "http=8000,grpc=8000"},
		{AnnEBPF, "yes"},
		{AnnContainer, "nope"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			pod := base.DeepCopy()
			pod.Annotations[tc.key] = tc.value
			out := Mutate(DefaultConfig(), OptIn, pod)
			if out.Action != "skipped" || !strings.Contains(out.Reason, tc.key) {
				t.Errorf("action %q reason %q, want skipped naming %s", out.Action, out.Reason, tc.key)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"ok", func(*Config) {}, ""},
		{"image", func(c *Config) { c.Image = "" }, "image"},
		{"cpu", func(c *Config) { c.CPURequest = "x" }, "cpu-request"},
		{"push", func(c *Config) { c.PushURL = "vm:8428" }, "push-url"},
		{"push scheme", func(c *Config) { c.PushURL = "tcp://vm:8428/api/v1/import/prometheus" }, "push-url"},
		{"pull", func(c *Config) { c.ImagePullPolicy = "Sometimes" }, "image-pull-policy"},
		// Above the limit, every pod would be skipped, blamed on annotations it lacks.
		{"memory request above limit", func(c *Config) { c.MemoryRequest = "512Mi" }, "memory-request"},
		{"cpu request above limit", func(c *Config) { c.CPULimit = "50m" }, "cpu-request"},
		{"no limit", func(c *Config) { c.MemoryRequest, c.MemoryLimit = "1Gi", "" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if (err == nil) != (tc.field == "") || (err != nil && !strings.Contains(err.Error(), tc.field)) {
				t.Errorf("err %v, want one naming %q", err, tc.field)
			}
		})
	}
}

func TestGoldenCasesCoverFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/reviews/*.json")
	var names, want []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	for _, c := range goldenCases {
		want = append(want, c.name)
	}
	sort.Strings(names)
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Errorf("fixtures %v, cases %v", names, want)
	}
}

package examples

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/inferwatch/inferwatch/inject"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
)

// docs splits a manifest into JSON documents.
func docs(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range strings.Split(string(b), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			j, _ := json.Marshal(m)
			out = append(out, j)
		}
	}
	return out
}

func strict(t *testing.T, raw []byte, v any) {
	t.Helper()
	errs, err := sigsjson.UnmarshalStrict(raw, v)
	if err != nil || len(errs) > 0 {
		t.Fatalf("does not strict-decode into %T: %v %v", v, err, errs)
	}
}

// TestTritonExampleInjected: the example's pod template, injected, has the
// sidecar on the ports the Service targets and Triton moved off them.
func TestTritonExampleInjected(t *testing.T) {
	got, side := injectExample(t, "triton/triton.yaml")
	triton := got.Spec.Containers[0]
	if !slices.Contains(triton.Args, "--http-port=18000") || !slices.Contains(triton.Args, "--grpc-port=18001") {
		t.Errorf("triton args %v", triton.Args)
	}
	if triton.ReadinessProbe.HTTPGet.Port.IntVal != 18000 {
		t.Errorf("triton readiness on %v", triton.ReadinessProbe.HTTPGet.Port)
	}
	if !slices.Contains(side.Args, "--sla=densenet_onnx=50ms") {
		t.Errorf("sidecar args %v lack the SLA", side.Args)
	}
}

// TestTFServingExampleInjected: the example's pod template (the official
// image, no command), injected, has the sidecar on the ports the Service
// targets, TF Serving's flags appended after its entrypoint's, and the
// probes on the moved ports.
func TestTFServingExampleInjected(t *testing.T) {
	got, side := injectExample(t, "tfserving/tfserving.yaml")
	tf := got.Spec.Containers[0]
	if n := len(tf.Args); n < 2 || tf.Args[n-2] != "--rest_api_port=18501" || tf.Args[n-1] != "--port=18500" || len(tf.Command) != 0 {
		t.Errorf("tf-serving command %v, args %v: want the image's entrypoint, the new ports last", tf.Command, tf.Args)
	}
	if tf.ReadinessProbe.HTTPGet.Port.IntVal != 18501 || tf.LivenessProbe.TCPSocket.Port.IntVal != 18500 {
		t.Errorf("tf-serving probes on %v and %v", tf.ReadinessProbe.HTTPGet.Port, tf.LivenessProbe.TCPSocket.Port)
	}
	for _, a := range []string{"--http-listen=:8501", "--grpc-listen=:8500", "--api-hint=tfserving", "--no-triton-stats", "--sla=resnet=80ms"} {
		if !slices.Contains(side.Args, a) {
			t.Errorf("sidecar args %v lack %s", side.Args, a)
		}
	}
}

// injectExample runs the pod template of the Deployment in the manifest at
// path (a Deployment, then its Service) through the injector (opt-in),
// checks that every port the Service targets lands on the sidecar, and
// returns the patched pod and its sidecar container.
func injectExample(t *testing.T, path string) (corev1.Pod, corev1.Container) {
	t.Helper()
	d := docs(t, path)
	var dep appsv1.Deployment
	var svc corev1.Service
	strict(t, d[0], &dep)
	strict(t, d[1], &svc)
	pod := corev1.Pod{ObjectMeta: dep.Spec.Template.ObjectMeta, Spec: dep.Spec.Template.Spec}
	pod.Namespace = dep.Namespace
	out := inject.Mutate(inject.DefaultConfig(), inject.OptIn, &pod)
	if out.Action != "injected" {
		t.Fatalf("not injected: %s %s", out.Action, out.Reason)
	}
	raw, _ := json.Marshal(pod)
	patch, err := inject.MarshalPatch(out.Patch)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := p.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	strict(t, doc, &got)
	side := got.Spec.Containers[len(got.Spec.Containers)-1]
	if side.Name != inject.ContainerName {
		t.Fatalf("last container %q", side.Name)
	}
	for _, sp := range svc.Spec.Ports {
		if !slices.ContainsFunc(side.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == sp.TargetPort.StrVal }) {
			t.Errorf("Service port %s targets %q, which the sidecar does not have", sp.Name, sp.TargetPort.StrVal)
		}
	}
	return got, side
}

// TestKServeExample: the namespace is labelled for the injector's namespace
// path and the InferenceService carries only annotations the injector knows.
func TestKServeExample(t *testing.T) {
	d := docs(t, "kserve/inferenceservice.yaml")
	var ns corev1.Namespace
	strict(t, d[0], &ns)
	if ns.Labels[inject.LabelNamespace] != "enabled" {
		t.Errorf("namespace labels %v", ns.Labels)
	}
	var isvc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	json.Unmarshal(d[1], &isvc)
	if isvc.APIVersion != "serving.kserve.io/v1beta1" || isvc.Kind != "InferenceService" {
		t.Errorf("%s %s", isvc.APIVersion, isvc.Kind)
	}
	known := []string{inject.AnnSLA, inject.AnnInject, inject.AnnPorts, inject.AnnTraceTarget, inject.AnnPushURL}
	for k := range isvc.Metadata.Annotations {
		if strings.HasPrefix(k, inject.Prefix) && !slices.Contains(known, k) {
			t.Errorf("annotation %s is not one the injector reads", k)
		}
	}
}

// TestReadmePortForwardReachable: `kubectl port-forward` connects to
// 127.0.0.1 inside the pod's network namespace (the runtime dials
// localhost), so a README that port-forwards to a sidecar port must name
// one the injected sidecar listens on loopback or on all interfaces; a
// listener bound to $(POD_IP) alone refuses it.
func TestReadmePortForwardReachable(t *testing.T) {
	re := regexp.MustCompile("kubectl port-forward[^`]*?svc/[a-z0-9-]+ (?:[0-9]+:)?([0-9]+)")
	for _, ex := range []string{"triton/triton.yaml", "tfserving/tfserving.yaml"} {
		readme, err := os.ReadFile(filepath.Join(filepath.Dir(ex), "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		_, side := injectExample(t, ex)
		for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
			port := m[1]
			for _, a := range side.Args {
				flag, addr, ok := strings.Cut(a, "=")
				if !ok || !strings.HasSuffix(flag, "-listen") {
					continue
				}
				host, p, err := net.SplitHostPort(addr)
				if err != nil || p != port {
					continue
				}
				switch host {
				case "", "0.0.0.0", "::", "127.0.0.1", "localhost":
				default:
					t.Errorf("%s README: %q reaches the sidecar's %s, which listens on %s only: port-forward (it dials localhost in the pod) is refused", ex, m[0], flag, host)
				}
			}
		}
	}
}

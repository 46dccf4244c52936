package inject

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestTFServingRecognised(t *testing.T) {
	tests := []struct {
		name    string
		c       corev1.Container
		kind    serverKind
		restOff bool
	}{
		{"the official image", corev1.Container{Image: "tensorflow/serving:2.15.1"}, kindTFServing, false},
		{"the official image, GPU tag, a registry", corev1.Container{Image: "docker.io/tensorflow/serving:latest-gpu"}, kindTFServing, false},
		{"the official image by digest", corev1.Container{Image: "tensorflow/serving@sha256:0123"}, kindTFServing, false},
		{"a registry with a port", corev1.Container{Image: "registry:5000/tensorflow/serving"}, kindTFServing, false},
		{"the official image, REST turned off", corev1.Container{Image: "tensorflow/serving", Args: []string{"--rest_api_port=0"}}, kindTFServing, true},
		{"the official image with its own command", corev1.Container{Image: "tensorflow/serving", Command: []string{"/bin/sh", "-c", "serve"}}, kindUnknown, false},
		{"another image named like it", corev1.Container{Image: "acme/tensorflow-serving-proxy:1"}, kindUnknown, false},
		{"the binary, no REST flag (off by default)", corev1.Container{Command: []string{"tensorflow_model_server"}, Args: []string{"--port=8500"}}, kindTFServing, true},
		{"the binary with REST on", corev1.Container{Command: []string{"/usr/bin/tensorflow_model_server", "--rest_api_port=8501"}}, kindTFServing, false},
		{"the entrypoint script", corev1.Container{Command: []string{"/usr/bin/tf_serving_entrypoint.sh"}}, kindTFServing, false},
		{"the binary, the last --port wins", corev1.Container{Command: []string{"tensorflow_model_server", "--port=9000", "--port=9100"}}, kindTFServing, true},
		{"the entrypoint script, the last flag wins", corev1.Container{Command: []string{"/usr/bin/tf_serving_entrypoint.sh"}, Args: []string{"--rest_api_port=8501", "--rest_api_port=0"}}, kindTFServing, true},
	}
	for _, tt := range tests {
		if got := kindOf(&tt.c); got != tt.kind {
			t.Errorf("%s: kind %d, want %d", tt.name, got, tt.kind)
		}
		if tt.kind == kindTFServing {
			if got := restOff(&tt.c); got != tt.restOff {
				t.Errorf("%s: REST off %v, want %v", tt.name, got, tt.restOff)
			}
		}
	}
}

// TestCurrentPortLastFlag: a flag given twice is the last one, as the
// servers' parsers keep it, whichever form it takes.
func TestCurrentPortLastFlag(t *testing.T) {
	for _, tt := range []struct {
		c    corev1.Container
		kind serverKind
		want int32
	}{
		{corev1.Container{Command: []string{"tensorflow_model_server", "--port=9000"}, Args: []string{"--port=9100"}}, kindTFServing, 9100},
		{corev1.Container{Command: []string{"tritonserver", "--grpc-port", "9001", "--grpc-port=9002"}}, kindTriton, 9002},
		{corev1.Container{Command: []string{"tritonserver"}}, kindTriton, 8001},
		{corev1.Container{Command: []string{"tritonserver", "--grpc-port=x"}}, kindTriton, 8001},
	} {
		if got := currentPort(&tt.c, tt.kind, "grpc", map[serverKind]int32{kindTFServing: 8500, kindTriton: 8001}[tt.kind]); got != tt.want {
			t.Errorf("%v: port %d, want %d", append(tt.c.Command, tt.c.Args...), got, tt.want)
		}
	}
}

// tritonPod is the recorded Triton pod (testdata/reviews/triton.json).
func tritonPod(t *testing.T) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile("testdata/reviews/triton.json")
	if err != nil {
		t.Fatal(err)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &rv); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(rv.Request.Object.Raw, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// patched applies an outcome's patch to pod as the apiserver would.
func patched(t *testing.T, pod *corev1.Pod, ops []PatchOp) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := MarshalPatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(b)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch does not apply: %v", err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(doc, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestEBPFSharedProcessNamespace: the apiserver refuses a pod with both
// hostPID and shareProcessNamespace ("ShareProcessNamespace and HostPID
// cannot both be enabled", pkg/apis/core/validation), so an eBPF pod that
// shares its PID namespace must not be given hostPID: it is skipped, saying
// why, and runs as written.
func TestEBPFSharedProcessNamespace(t *testing.T) {
	for _, share := range []bool{false, true} {
		pod := tritonPod(t)
		pod.Annotations[AnnEBPF] = "true"
		pod.Spec.ShareProcessNamespace = &share
		out := Mutate(DefaultConfig(), OptIn, pod)
		got := patched(t, pod, out.Patch)
		if got.Spec.HostPID && got.Spec.ShareProcessNamespace != nil && *got.Spec.ShareProcessNamespace {
			t.Errorf("shareProcessNamespace %v: patched pod has hostPID and shareProcessNamespace, which the apiserver refuses", share)
		}
		if want := map[bool]string{false: "injected", true: "skipped"}[share]; out.Action != want {
			t.Errorf("shareProcessNamespace %v: action %q (%s), want %q", share, out.Action, out.Reason, want)
		}
		if share && !strings.Contains(out.Reason, "shareProcessNamespace") {
			t.Errorf("reason %q does not name shareProcessNamespace", out.Reason)
		}
	}
}

// TestKServeContainerRecognised: in kserve-container, only KServe's Python
// model servers take --http_port/--grpc_port. KServe's own TorchServe
// runtime (args torchserve --start ..., ports in config.properties) and
// MLServer runtime (no args, ports from MLSERVER_HTTP_PORT/_GRPC_PORT) do
// not: moved by those flags they would keep 8080 and the sidecar could not
// bind it, so the pod would never be Ready. They are left alone.
func TestKServeContainerRecognised(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    corev1.Container
		kind serverKind
	}{
		{"sklearnserver", corev1.Container{Name: "kserve-container", Args: []string{"--model_name=iris", "--model_dir=/mnt/models", "--http_port=8080"}}, kindKServe},
		{"a custom kserve.Model, no args (recognised; moved only as TestKServeNoArgs says)", corev1.Container{Name: "kserve-container", Image: "acme/custom-model:v1"}, kindKServe},
		{"Triton runtime", corev1.Container{Name: "kserve-container", Args: []string{"tritonserver", "--model-store=/mnt/models"}}, kindTriton},
		{"TorchServe runtime", corev1.Container{Name: "kserve-container", Args: []string{"torchserve", "--start", "--model-store=/mnt/models/model-store", "--ts-config=/mnt/models/config/config.properties"}}, kindUnknown},
		{"MLServer runtime", corev1.Container{Name: "kserve-container", Image: "docker.io/seldonio/mlserver:1.6.1", Env: []corev1.EnvVar{{Name: "MLSERVER_HTTP_PORT", Value: "8080"}, {Name: "MLSERVER_GRPC_PORT", Value: "9000"}}}, kindUnknown},
	} {
		if got := kindOf(&tt.c); got != tt.kind {
			t.Errorf("%s: kind %d, want %d", tt.name, got, tt.kind)
		}
		if tt.kind != kindUnknown {
			continue
		}
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{tt.c}}}
		pod.Annotations = map[string]string{AnnInject: "true"}
		if out := Mutate(DefaultConfig(), OptIn, pod); out.Action != "skipped" {
			t.Errorf("%s: action %q, want skipped", tt.name, out.Action)
		}
	}
}

// TestNativeSidecarPorts: an init container with restartPolicy Always (a
// native sidecar, Kubernetes 1.29+) runs beside the others for the pod's
// life, in its network namespace: a port it declares is as taken as one of
// a regular container. A plain init container has exited before the
// sidecar starts.
func TestNativeSidecarPorts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tt := range []struct {
		name   string
		init   corev1.Container
		action string
	}{
		{"native sidecar on the admin port", corev1.Container{Name: "envoy", Image: "envoyproxy/envoy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: AdminPort}}}, "skipped"},
		{"plain init container on the admin port", corev1.Container{Name: "warmup", Image: "warmup", Ports: []corev1.ContainerPort{{ContainerPort: AdminPort}}}, "injected"},
	} {
		pod := tritonPod(t)
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, tt.init)
		out := Mutate(DefaultConfig(), OptIn, pod)
		if out.Action != tt.action || (tt.action == "skipped" && !strings.Contains(out.Reason, tt.init.Name)) {
			t.Errorf("%s: action %q reason %q, want %s naming %s", tt.name, out.Action, out.Reason, tt.action, tt.init.Name)
		}
	}
}

// TestInitContainerNamedLikeTheSidecar: container names are unique across
// containers and init containers; a pod with an init container named as
// the sidecar is left alone rather than given a second one, which the
// apiserver would refuse.
func TestInitContainerNamedLikeTheSidecar(t *testing.T) {
	pod := tritonPod(t)
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: ContainerName, Image: "fetch-model"})
	if out := Mutate(DefaultConfig(), OptIn, pod); out.Action != "ignored" || !strings.Contains(out.Reason, ContainerName) {
		t.Errorf("action %q reason %q, want ignored naming %s", out.Action, out.Reason, ContainerName)
	}
}

// TestServerNewPortTaken: the port the server moves to (port + 10000) must
// be free in the pod's network; a container other than the server already
// declaring it would leave the server, or that container, unable to bind.
func TestServerNewPortTaken(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tt := range []struct {
		name string
		edit func(*corev1.Pod)
	}{
		{"a container on 18001", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "exporter", Image: "exporter", Ports: []corev1.ContainerPort{{ContainerPort: 18001}}})
		}},
		{"a native sidecar on 18000", func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "exporter", Image: "exporter", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 18000}}})
		}},
	} {
		pod := tritonPod(t)
		tt.edit(pod)
		out := Mutate(DefaultConfig(), OptIn, pod)
		if out.Action != "skipped" || !strings.Contains(out.Reason, "exporter") {
			t.Errorf("%s: action %q reason %q, want skipped naming exporter", tt.name, out.Action, out.Reason)
		}
	}
}

// TestQueueProxyPortTaken: under Knative's queue-proxy the sidecar listens
// on 8090, a port no container gave up; a model server already there
// (USER_PORT 8090) would leave the sidecar unable to bind, or forwarding to
// itself, and the pod never Ready.
func TestQueueProxyPortTaken(t *testing.T) {
	raw, err := os.ReadFile("testdata/reviews/kserve-predictor.json")
	if err != nil {
		t.Fatal(err)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &rv); err != nil {
		t.Fatal(err)
	}
	var base corev1.Pod
	if err := json.Unmarshal(rv.Request.Object.Raw, &base); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		port   string
		action string
	}{
		{"the server on 8080", "8080", "injected"},
		{"the server on 8090", "8090", "skipped"},
	} {
		pod := base.DeepCopy()
		srv, qp := &pod.Spec.Containers[0], &pod.Spec.Containers[1]
		n, _ := strconv.Atoi(tt.port)
		srv.Ports[0].ContainerPort = int32(n)
		for i := range qp.Env {
			if qp.Env[i].Name == "USER_PORT" {
				qp.Env[i].Value = tt.port
			}
		}
		out := Mutate(DefaultConfig(), Namespace, pod)
		if out.Action != tt.action || (tt.action == "skipped" && !strings.Contains(out.Reason, "8090")) {
			t.Errorf("%s: action %q reason %q, want %s", tt.name, out.Action, out.Reason, tt.action)
		}
	}
}

// TestPodLevelRequests: with pod-level resources (spec.resources, beta and
// on by default since Kubernetes 1.34) the apiserver refuses a pod whose
// containers together request more than the pod ("must be greater than or
// equal to aggregate container requests"). The sidecar's requests must fit
// in what the pod has left, or the pod would not be created at all.
func TestPodLevelRequests(t *testing.T) {
	for _, tt := range []struct {
		name     string
		cpu, mem string // the pod's requests; the server requests 2 CPUs and 8Gi
		action   string
	}{
		{"room for the sidecar", "3", "9Gi", "injected"},
		{"no room for its CPU", "2", "9Gi", "skipped"},
		{"no room for its memory", "3", "8Gi", "skipped"},
	} {
		pod := tritonPod(t)
		pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}
		pod.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(tt.cpu), corev1.ResourceMemory: resource.MustParse(tt.mem)}}
		out := Mutate(DefaultConfig(), OptIn, pod)
		if out.Action != tt.action || (tt.action == "skipped" && !strings.Contains(out.Reason, "spec.resources")) {
			t.Errorf("%s: action %q reason %q, want %s", tt.name, out.Action, out.Reason, tt.action)
		}
	}
}

// TestHostPortFollowsThePort: a hostPort maps the node's port to the port
// number clients use, which the sidecar takes over; it goes with the port
// to the sidecar, not with the server to its moved port, where the node's
// traffic would reach the server unmeasured.
func TestHostPortFollowsThePort(t *testing.T) {
	pod := tritonPod(t)
	srv := &pod.Spec.Containers[0]
	for i := range srv.Ports {
		if srv.Ports[i].ContainerPort == 8000 {
			srv.Ports[i].HostPort, srv.Ports[i].HostIP = 30080, "10.0.0.5"
		}
	}
	out := Mutate(DefaultConfig(), OptIn, pod)
	if out.Action != "injected" {
		t.Fatalf("action %q: %s", out.Action, out.Reason)
	}
	var server, side *corev1.Container
	for _, op := range out.Patch {
		switch c := op.Value.(type) {
		case corev1.Container: // the added sidecar
			side = &c
		case *corev1.Container: // the server, replaced
			server = c
		}
	}
	if server == nil || side == nil {
		t.Fatalf("patch lacks the server or the sidecar: %+v", out.Patch)
	}
	for _, p := range server.Ports {
		if p.HostPort != 0 || p.HostIP != "" {
			t.Errorf("server port %d keeps hostPort %d %q", p.ContainerPort, p.HostPort, p.HostIP)
		}
	}
	found := false
	for _, p := range side.Ports {
		if p.ContainerPort == 8000 {
			found = p.HostPort == 30080 && p.HostIP == "10.0.0.5"
		} else if p.HostPort != 0 {
			t.Errorf("sidecar port %d has hostPort %d", p.ContainerPort, p.HostPort)
		}
	}
	if !found {
		t.Errorf("sidecar ports %+v: want 8000 with hostPort 30080 on 10.0.0.5", side.Ports)
	}
}

// TestWindowsPods: the sidecar is a Linux container, and the apiserver
// refuses its security context in a pod whose spec.os.name is windows
// (TestKubeAPIServer's triton-windows). A pod bound to Windows nodes
// is skipped, saying how it is bound; one that may run on Linux is not.
func TestWindowsPods(t *testing.T) {
	osTerm := func(values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: values}}}
	}
	required := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	for _, tt := range []struct {
		name   string
		edit   func(*corev1.PodSpec)
		action string
		why    string // in the reason when skipped
	}{
		{"spec.os.name windows", func(s *corev1.PodSpec) { s.OS = &corev1.PodOS{Name: corev1.Windows} }, "skipped", "spec.os.name: windows"},
		{"spec.os.name linux", func(s *corev1.PodSpec) { s.OS = &corev1.PodOS{Name: corev1.Linux} }, "injected", ""},
		{"nodeSelector windows", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{corev1.LabelOSStable: "windows"} }, "skipped", "nodeSelector kubernetes.io/os: windows"},
		{"nodeSelector linux", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"} }, "injected", ""},
		{"required affinity windows", func(s *corev1.PodSpec) { s.Affinity = required(osTerm("windows")) }, "skipped", "required node affinity"},
		{"required affinity windows, both terms", func(s *corev1.PodSpec) { s.Affinity = required(osTerm("windows"), osTerm("windows")) }, "skipped", "required node affinity"},
		{"required affinity windows or linux", func(s *corev1.PodSpec) { s.Affinity = required(osTerm("windows", "linux")) }, "injected", ""},
		{"required affinity, a term that allows linux", func(s *corev1.PodSpec) { s.Affinity = required(osTerm("windows"), corev1.NodeSelectorTerm{}) }, "injected", ""},
		{"beta nodeSelector windows", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"beta.kubernetes.io/os": "windows"} }, "skipped", "nodeSelector beta.kubernetes.io/os: windows"},
		{"beta nodeSelector linux", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"beta.kubernetes.io/os": "linux"} }, "injected", ""},
		{"required affinity NotIn linux", func(s *corev1.PodSpec) {
			s.Affinity = required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"linux"}}}})
		}, "skipped", "required node affinity"},
		{"required affinity NotIn windows", func(s *corev1.PodSpec) {
			s.Affinity = required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"windows"}}}})
		}, "injected", ""},
		{"preferred affinity windows", func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: osTerm("windows")}}}}
		}, "injected", ""},
	} {
		pod := tritonPod(t)
		tt.edit(&pod.Spec)
		out := Mutate(DefaultConfig(), OptIn, pod)
		if out.Action != tt.action || !strings.Contains(out.Reason, tt.why) {
			t.Errorf("%s: action %q reason %q, want %s naming %q", tt.name, out.Action, out.Reason, tt.action, tt.why)
			continue
		}
		if got := patched(t, pod, out.Patch); tt.action == "skipped" && (len(got.Spec.Containers) != len(pod.Spec.Containers) || !strings.HasPrefix(got.Annotations[AnnStatus], statusSkippedPrefx)) {
			t.Errorf("%s: skipped pod has %d containers (sent %d), status %q", tt.name, len(got.Spec.Containers), len(pod.Spec.Containers), got.Annotations[AnnStatus])
		}
	}
}

// TestKServeNoArgs: a KServe model server moves by --http_port/--grpc_port
// in its args, and args given to a container without any replace its
// image's CMD. A custom image that starts the server with CMD (no
// ENTRYPOINT) would run the flag as its program, so a kserve-container with
// neither command nor args is skipped unless its image is one of KServe's,
// whose ENTRYPOINT takes the flags. Args already there show how the image
// starts: the flags go after them.
func TestKServeNoArgs(t *testing.T) {
	moved := []string{"--http_port=18080", "--grpc_port=18081"}
	for _, tt := range []struct {
		name     string
		image    string
		args     []string
		wantArgs []string // nil: skipped
	}{
		{"custom image, neither command nor args", "example.com/acme/custom-model:v1", nil, nil},
		{"an image named like KServe's", "acme/kserve-sklearnserver:1", nil, nil},
		{"custom image, its CMD in args", "example.com/acme/custom-model:v1", []string{"python", "model.py"}, []string{"python", "model.py", moved[0], moved[1]}},
		{"custom image, flags for its ENTRYPOINT", "example.com/acme/custom-model:v1", []string{"--model_name=m"}, []string{"--model_name=m", moved[0], moved[1]}},
		{"KServe's sklearnserver", "kserve/sklearnserver:v0.14.0", nil, moved},
		{"KServe's huggingfaceserver from a registry, by digest", "docker.io/kserve/huggingfaceserver@sha256:0123", nil, moved},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "kserve-container", Image: tt.image, Args: tt.args,
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {Name: "grpc", ContainerPort: 8081}},
		}}}}
		pod.Annotations = map[string]string{AnnInject: "true"}
		out := Mutate(DefaultConfig(), OptIn, pod)
		got := patched(t, pod, out.Patch).Spec.Containers[0]
		if tt.wantArgs == nil {
			if out.Action != "skipped" || !strings.Contains(out.Reason, "neither command nor args") || got.Args != nil {
				t.Errorf("%s: action %q reason %q args %q, want skipped, saying why, args untouched", tt.name, out.Action, out.Reason, got.Args)
			}
			continue
		}
		if out.Action != "injected" || !slices.Equal(got.Args, tt.wantArgs) {
			t.Errorf("%s: action %q (%s), args %q, want injected with %q", tt.name, out.Action, out.Reason, got.Args, tt.wantArgs)
		}
	}
}

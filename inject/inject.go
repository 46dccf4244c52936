// Package inject is the sidecar injector: given a Pod that a mutating
// admission webhook received, it decides whether the pod wants inferwatch,
// works out which ports of which container carry inference traffic (Triton's
// 8000/8001, KServe's 8080/8081, TensorFlow Serving's 8501/8500, KServe's
// queue-proxy, or ports named by annotation), moves the server off those
// ports, puts the sidecar on them, rewires the server's probes, and returns
// the JSON patch that does it.
//
// The traffic method is port takeover (Knative queue-proxy style): no init
// container, no iptables, no NET_ADMIN, so injected pods pass the
// "restricted" Pod Security Standard. A pod it does not understand is left
// running as written (fail-open) with an annotation and a Kubernetes Event
// saying why (events.go).
//
// Types are k8s.io/api's corev1, admissionv1 and eventsv1; quantities and
// intstr come from k8s.io/apimachinery. No client-go and no
// controller-runtime: the injector's only API calls, creating an Event and
// patching its series when the refusal repeats (series.go), are a POST and
// a merge PATCH with net/http, so its RBAC is exactly create and patch on
// events.
package inject

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Annotation and label keys.
const (
	Prefix = "inferwatch.io/"
	// AnnInject on a pod: "true" opts in, "false" opts out (also in a
	// namespace labelled for injection).
	AnnInject = Prefix + "inject"
	// LabelNamespace on a namespace, value "enabled": every pod is injected
	// unless it says inferwatch.io/inject: "false" (the webhook's
	// namespaceSelector sends those pods to PathNamespace).
	LabelNamespace = Prefix + "inject"
	// AnnStatus is written by the injector: "injected" or "skipped: why".
	AnnStatus = Prefix + "status"
	// LabelInjected, value "true", is put on every pod the injector gave a
	// sidecar, so a PodMonitor (or kubectl get -l) can select them.
	LabelInjected = Prefix + "injected"
	// AnnPorts names the inference ports as protocol=port pairs, e.g.
	// "http=8000,grpc=8001"; it overrides the defaults of the recognised server.
	AnnPorts = Prefix + "ports"
	// AnnContainer names the server container when the pod has several.
	AnnContainer     = Prefix + "container"
	AnnSLA           = Prefix + "sla"                     // model=duration,...
	AnnTraceTarget   = Prefix + "trace-target-per-second" // float
	AnnPushURL       = Prefix + "push-url"                // VictoriaMetrics import URL
	AnnOTLPEndpoint  = Prefix + "otlp-endpoint"
	AnnCPURequest    = Prefix + "cpu-request"
	AnnMemoryRequest = Prefix + "memory-request"
	AnnCPULimit      = Prefix + "cpu-limit"
	AnnMemoryLimit   = Prefix + "memory-limit"
	AnnEBPF          = Prefix + "ebpf" // "true": load the eBPF probes (root + named capabilities)
	// AnnProcessFacts "true": the pod shares one PID namespace, so that a
	// sidecar without eBPF sees the server's processes (RSS, leak trend).
	AnnProcessFacts    = Prefix + "process-facts"
	AnnImage           = Prefix + "image"
	ContainerName      = "inferwatch"
	StatusInjected     = "injected"
	statusSkippedPrefx = "skipped: "
)

// Sidecar ports of its own.
const (
	AdminPort = 9901
	// AdminPortName names AdminPort on the sidecar container: its probes
	// and the chart's PodMonitor find the port by it.
	AdminPortName = "iw-admin"
	// queueProxyPort is where the sidecar listens when it sits between
	// KServe's (Knative's) queue-proxy and the model server.
	queueProxyPort = 8090
	// portShift moves a server port p to p+portShift when the sidecar takes p.
	portShift = 10000
)

// Config holds the injector's defaults (from its flags / Helm values).
type Config struct {
	Image           string
	ImagePullPolicy corev1.PullPolicy
	CPURequest      string
	MemoryRequest   string
	CPULimit        string
	MemoryLimit     string
	PushURL         string
	OTLPEndpoint    string
	ExtraArgs       []string
}

// DefaultConfig is what the chart's values default to.
func DefaultConfig() Config {
	return Config{
		Image:           "ghcr.io/inferwatch/inferwatch:latest",
		ImagePullPolicy: corev1.PullIfNotPresent,
		CPURequest:      "100m",
		MemoryRequest:   "64Mi",
		MemoryLimit:     "256Mi",
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Image == "" {
		return fmt.Errorf("inject: image: must not be empty")
	}
	quantities := map[string]string{"cpu-request": c.CPURequest, "memory-request": c.MemoryRequest, "cpu-limit": c.CPULimit, "memory-limit": c.MemoryLimit}
	for name, q := range quantities {
		if q == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q); err != nil {
			return fmt.Errorf("inject: %s: %q is not a quantity: %w", name, q, err)
		}
	}
	// A default request above its default limit would skip every pod that
	// does not override them, blamed on annotations it never set.
	for _, rl := range [][2]string{{"cpu-request", "cpu-limit"}, {"memory-request", "memory-limit"}} {
		req, lim := quantities[rl[0]], quantities[rl[1]]
		if req == "" || lim == "" {
			continue
		}
		// Both parsed above.
		if r, l := resource.MustParse(req), resource.MustParse(lim); r.Cmp(l) > 0 {
			return fmt.Errorf("inject: %s: %s is above %s %s", rl[0], req, rl[1], lim)
		}
	}
	for name, u := range map[string]string{"push-url": c.PushURL} {
		if u == "" {
			continue
		}
		if !httpURL(u) {
			return fmt.Errorf("inject: %s: %q is not an http(s) URL", name, u)
		}
	}
	switch c.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("inject: image-pull-policy: %q is not Always, IfNotPresent or Never", c.ImagePullPolicy)
	}
	return nil
}

// TracefsVolume is the volume an eBPF sidecar reads the node's tracefs
// from (tracefsPath, read-only), for its OOM probe.
const TracefsVolume = "inferwatch-tracefs"

const tracefsPath = "/sys/kernel/tracing"

// CgroupVolume is the node's cgroup tree (cgroupPath), which an eBPF
// sidecar reads read-only at cgroupMountPath: the server's cgroup is
// another container's, which the sidecar's own view of the tree leaves out,
// and its cpu.stat is where CFS throttling is counted.
const CgroupVolume = "inferwatch-cgroup"

const (
	cgroupPath      = "/sys/fs/cgroup"
	cgroupMountPath = "/host/sys/fs/cgroup"
)

// Mode says how the webhook path wants unannotated pods treated.
type Mode int

const (
	// OptIn injects only pods annotated inferwatch.io/inject: "true".
	OptIn Mode = iota
	// Namespace injects every pod unless annotated "false" (the namespace
	// carries the label; the webhook configuration checked it).
	Namespace
)

// Outcome is what Mutate decided.
type Outcome struct {
	// Action: "injected", "skipped" (annotated why, fail-open), "ignored"
	// (not opted in, or already injected: no patch at all).
	Action string
	Reason string
	Patch  []PatchOp
}

// PatchOp is one RFC 6902 operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// route is one inference port the sidecar takes over.
type route struct {
	proto    string // "http" or "grpc"
	listen   int32  // where the sidecar listens (the port clients use)
	upstream int32  // where the server listens afterwards
	name     string // container port name the sidecar's port carries
	hostPort int32  // the server port's hostPort, which goes with the port to the sidecar
	hostIP   string
}

// Mutate decides for one pod and returns the patch.
func Mutate(cfg Config, mode Mode, pod *corev1.Pod) Outcome {
	ann := pod.Annotations
	want := ann[AnnInject]
	switch {
	case want == "false":
		return Outcome{Action: "ignored", Reason: "opted out"}
	case mode == OptIn && want != "true":
		return Outcome{Action: "ignored", Reason: "not opted in"}
	}
	if ann[AnnStatus] != "" {
		return Outcome{Action: "ignored", Reason: "already processed: " + ann[AnnStatus]}
	}
	// Init containers too: names are unique across both lists, and the
	// apiserver would refuse the pod with a second one.
	for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
		if c.Name == ContainerName {
			return Outcome{Action: "ignored", Reason: "already has a container named " + ContainerName}
		}
	}
	out, err := plan(cfg, pod)
	if err != nil {
		return Outcome{Action: "skipped", Reason: err.Error(), Patch: []PatchOp{statusOp(pod, statusSkippedPrefx+err.Error())}}
	}
	return out
}

func statusOp(pod *corev1.Pod, v string) PatchOp {
	if pod.Annotations == nil {
		return PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnStatus: v}}
	}
	return PatchOp{Op: "add", Path: "/metadata/annotations/" + escape(AnnStatus), Value: v}
}

func labelOp(pod *corev1.Pod) PatchOp {
	if pod.Labels == nil {
		return PatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{LabelInjected: "true"}}
	}
	return PatchOp{Op: "add", Path: "/metadata/labels/" + escape(LabelInjected), Value: "true"}
}

func escape(s string) string { return pointerEscaper.Replace(s) }

// pointerEscaper escapes a JSON Pointer reference token (RFC 6901). Built
// once: a Replacer built per call cost about 5% of a review.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// serverKind says how to move a server's ports.
type serverKind int

const (
	kindUnknown serverKind = iota
	kindTriton
	kindKServe    // KServe's Python model servers: --http_port / --grpc_port
	kindTFServing // tensorflow_model_server: --rest_api_port / --port
)

// tfEntrypoint is the official TensorFlow Serving image's entrypoint: it runs
// tensorflow_model_server --port=8500 --rest_api_port=8501 and the
// container's args after those, so a flag in the args overrides its own
// (TensorFlow's flag parser sets a flag at each occurrence, in order).
const tfEntrypoint = "tf_serving_entrypoint.sh"

// tfImage reports whether image is the official TensorFlow Serving image
// (any registry, tag or digest), whose entrypoint is tfEntrypoint.
func tfImage(image string) bool {
	return isImage(image, "tensorflow/serving")
}

// kserveImages are KServe's Python model server images whose ENTRYPOINT
// (python -m <server>) takes --http_port/--grpc_port as args.
var kserveImages = []string{"kserve/sklearnserver", "kserve/xgbserver", "kserve/lgbserver", "kserve/huggingfaceserver"}

// isImage reports whether image is repo from any registry, by any tag or
// digest.
func isImage(image, repo string) bool {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image == repo || strings.HasSuffix(image, "/"+repo)
}

func kindOf(c *corev1.Container) serverKind {
	cmd := append(slices.Clone(c.Command), c.Args...)
	for i, a := range cmd {
		if i > 1 {
			break
		}
		switch path.Base(a) {
		case "tritonserver":
			return kindTriton
		case "tensorflow_model_server", tfEntrypoint:
			return kindTFServing
		}
	}
	if len(c.Command) == 0 && tfImage(c.Image) {
		return kindTFServing
	}
	if c.Name == "kserve-container" && len(c.Command) == 0 && !notKServePython(c) {
		// KServe's Python runtimes (sklearn, xgboost, custom kserve.Model)
		// take --http_port/--grpc_port from args with the image's entrypoint.
		return kindKServe
	}
	return kindUnknown
}

// notKServePython reports a kserve-container that runs one of KServe's
// runtimes whose ports are not --http_port/--grpc_port: TorchServe (its
// runtime's args start with torchserve; ports in config.properties) and
// MLServer (ports from MLSERVER_HTTP_PORT/MLSERVER_GRPC_PORT). Given those
// flags they keep 8080, where the sidecar then cannot listen.
func notKServePython(c *corev1.Container) bool {
	for _, a := range c.Args[:min(len(c.Args), 2)] {
		if b := path.Base(a); b == "torchserve" || b == "mlserver" {
			return true
		}
	}
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "MLSERVER_HTTP_PORT" || e.Name == "MLSERVER_GRPC_PORT"
	})
}

// plan builds the patch or says why it cannot.
func plan(cfg Config, pod *corev1.Pod) (Outcome, error) {
	ann := pod.Annotations
	if pod.Spec.HostNetwork {
		return Outcome{}, fmt.Errorf("hostNetwork pods are not injected (port takeover would take the node's ports)")
	}
	if why := windowsOnly(pod); why != "" {
		// The sidecar is a Linux binary, and the apiserver refuses its
		// Linux security context (capabilities, seccomp, runAsUser, ...)
		// in a pod whose spec.os.name is windows: injected, the pod would
		// not be created at all.
		return Outcome{}, fmt.Errorf("the pod runs on Windows nodes only (%s), and the sidecar is a Linux container", why)
	}
	args, err := annotationArgs(cfg, ann)
	if err != nil {
		return Outcome{}, err
	}
	res, err := resources(cfg, ann)
	if err != nil {
		return Outcome{}, err
	}
	if err := fitsPodRequests(pod, res); err != nil {
		return Outcome{}, err
	}
	ebpf := ann[AnnEBPF] == "true"
	if v, ok := ann[AnnEBPF]; ok && v != "true" && v != "false" {
		return Outcome{}, fmt.Errorf("%s: %q is not true or false", AnnEBPF, v)
	}
	if ebpf && pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		// The probes need hostPID, and the apiserver refuses a pod with
		// both: patched, the pod would not be created at all.
		return Outcome{}, fmt.Errorf("%s: the pod sets shareProcessNamespace, and the hostPID the eBPF probes need cannot be set with it", AnnEBPF)
	}
	processFacts := ann[AnnProcessFacts] == "true"
	if v, ok := ann[AnnProcessFacts]; ok && v != "true" && v != "false" {
		return Outcome{}, fmt.Errorf("%s: %q is not true or false", AnnProcessFacts, v)
	}
	// eBPF pods see the node's processes already (hostPID).
	processFacts = processFacts && !ebpf && !pod.Spec.HostPID
	if processFacts {
		// The server usually runs as another user, whose descriptors
		// (where its listening socket is found) the sidecar cannot read:
		// it goes by the socket's user instead.
		args = append(args, "--upstream-by-socket-user")
	}
	image := cfg.Image
	if v := ann[AnnImage]; v != "" {
		image = v
	}

	var ops []PatchOp
	var routes []route
	server := -1 // the model server's container
	qp := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "queue-proxy" })
	if qp >= 0 {
		// KServe serverless: queue-proxy → sidecar → model server. The server
		// keeps its port; queue-proxy's USER_PORT moves to the sidecar.
		q := pod.Spec.Containers[qp].DeepCopy()
		ei := slices.IndexFunc(q.Env, func(e corev1.EnvVar) bool { return e.Name == "USER_PORT" })
		if ei < 0 {
			return Outcome{}, fmt.Errorf("queue-proxy container has no USER_PORT env")
		}
		up, err := strconv.Atoi(q.Env[ei].Value)
		if err != nil || up <= 0 || up > 65535 {
			return Outcome{}, fmt.Errorf("queue-proxy USER_PORT %q is not a port", q.Env[ei].Value)
		}
		if up == queueProxyPort {
			// The server stays where it is: the sidecar could not listen
			// there too. (Knative lets only one container declare ports,
			// the server, so this is the conflict checkFree cannot see.)
			return Outcome{}, fmt.Errorf("queue-proxy USER_PORT is %d, the port the sidecar listens on between queue-proxy and the model server", up)
		}
		proto := "http"
		server = serverIndex(pod, qp)
		if s := pod.Spec.Containers[server]; len(s.Ports) > 0 && s.Ports[0].Name == "h2c" {
			proto = "grpc"
		}
		routes = append(routes, route{proto: proto, listen: queueProxyPort, upstream: int32(up), name: "iw-" + proto})
		q.Env[ei].Value = strconv.Itoa(queueProxyPort)
		ops = append(ops, PatchOp{Op: "replace", Path: fmt.Sprintf("/spec/containers/%d", qp), Value: q})
	} else {
		si, err := pickServer(pod)
		if err != nil {
			return Outcome{}, err
		}
		srv := pod.Spec.Containers[si].DeepCopy()
		server = si
		kind := kindOf(srv)
		ports, err := inferencePorts(ann, kind)
		if err != nil {
			return Outcome{}, err
		}
		if kind == kindUnknown {
			return Outcome{}, fmt.Errorf("container %q: command %q is not one whose ports the injector knows how to move (tritonserver, KServe model server in kserve-container, tensorflow_model_server or the tensorflow/serving image)", srv.Name, strings.Join(append(slices.Clone(srv.Command), srv.Args...), " "))
		}
		if kind == kindKServe && len(srv.Args) == 0 && !slices.ContainsFunc(kserveImages, func(r string) bool { return isImage(srv.Image, r) }) {
			// Args given to a container without any replace its image's
			// CMD: an image that starts its server by CMD, not ENTRYPOINT,
			// would run --http_port as its program. The server reads its
			// ports from those flags only, so there is no other way to
			// move it.
			return Outcome{}, fmt.Errorf("container %q has neither command nor args: moving its ports takes --http_port/--grpc_port args, which would replace the CMD of image %q (run as the program where it has no ENTRYPOINT); give the container args: the image's CMD, or its ENTRYPOINT's flags", srv.Name, srv.Image)
		}
		if kind == kindTFServing {
			// /v1/models/{m}:predict is TF Serving's; it has no Triton
			// statistics to poll. An annotation can still say otherwise.
			args = append([]string{"--api-hint=tfserving", "--no-triton-stats"}, args...)
			if _, named := ann[AnnPorts]; !named && restOff(srv) {
				ports = slices.DeleteFunc(ports, func(p protoPort) bool { return p.proto == "http" })
			}
		}
		for _, p := range ports {
			p.port = currentPort(srv, kind, p.proto, p.port)
			r := route{proto: p.proto, listen: p.port, upstream: p.port + portShift}
			if err := movePort(srv, &r); err != nil {
				return Outcome{}, fmt.Errorf("container %q: %w", srv.Name, err)
			}
			routes = append(routes, r)
		}
		setServerFlags(srv, kind, routes)
		ops = append(ops, PatchOp{Op: "replace", Path: fmt.Sprintf("/spec/containers/%d", si), Value: srv})
	}
	if err := checkFree(pod, routes, pod.Spec.Containers[server].Name); err != nil {
		return Outcome{}, err
	}

	side := sidecar(image, cfg, routes, args, res, ebpf)
	// NVML in the sidecar needs the server's GPUs in its container. A
	// device plugin gives a device to the container that requests it
	// only; a DRA claim can be shared by the pod's containers, and the
	// driver then makes the same devices (and libnvidia-ml) visible in
	// both.
	side.Resources.Claims = slices.Clone(pod.Spec.Containers[server].Resources.Claims)
	// The leak projection's limit: the server's cgroup is another
	// container's, which the sidecar cannot read in its own cgroup
	// namespace; the kubelet gives its limit (node allocatable without one).
	side.Env = append(side.Env, corev1.EnvVar{Name: "INFERWATCH_UPSTREAM_MEMORY_LIMIT", ValueFrom: &corev1.EnvVarSource{
		ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: pod.Spec.Containers[server].Name, Resource: "limits.memory", Divisor: resource.MustParse("1")}}})
	if ebpf {
		// The OOM probe is a classic tracepoint, found through tracefs,
		// which a container has not mounted and cannot mount without
		// CAP_SYS_ADMIN: the node's, read-only. A node without tracefs
		// there leaves the directory empty and the probe off, said why.
		// The node's cgroup tree beside it, for the server's throttling. A
		// v1 node mounts each hierarchy below it: read-only recursively
		// where the runtime can, or those stay writable to the sidecar.
		dir := corev1.HostPathDirectory
		rro := corev1.RecursiveReadOnlyIfPossible
		for _, hp := range []struct {
			name, path, at string
			rro            *corev1.RecursiveReadOnlyMode
		}{{TracefsVolume, tracefsPath, tracefsPath, nil}, {CgroupVolume, cgroupPath, cgroupMountPath, &rro}} {
			if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == hp.name }) {
				return Outcome{}, fmt.Errorf("the pod already has a volume named %s", hp.name)
			}
			vol := corev1.Volume{Name: hp.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hp.path, Type: &dir}}}
			if len(pod.Spec.Volumes) == 0 && !slices.ContainsFunc(ops, func(op PatchOp) bool { return op.Path == "/spec/volumes" }) {
				ops = append(ops, PatchOp{Op: "add", Path: "/spec/volumes", Value: []corev1.Volume{vol}})
			} else {
				ops = append(ops, PatchOp{Op: "add", Path: "/spec/volumes/-", Value: vol})
			}
			side.VolumeMounts = append(side.VolumeMounts, corev1.VolumeMount{Name: hp.name, MountPath: hp.at, ReadOnly: true, RecursiveReadOnly: hp.rro})
		}
	}
	ops = append(ops, PatchOp{Op: "add", Path: "/spec/containers/-", Value: side})
	if processFacts && (pod.Spec.ShareProcessNamespace == nil || !*pod.Spec.ShareProcessNamespace) {
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/shareProcessNamespace", Value: true})
	}
	if ebpf && !pod.Spec.HostPID {
		// The probes follow the server's processes by the kernel's PIDs, and
		// a pod's own PID namespace (shareProcessNamespace included)
		// numbers them differently: the sidecar must see the host's.
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/hostPID", Value: true})
	}
	ops = append(ops, statusOp(pod, StatusInjected), labelOp(pod))
	return Outcome{Action: "injected", Patch: ops}, nil
}

// windowsOnly says where the pod is bound to Windows nodes: spec.os.name,
// the nodeSelector (kubernetes.io/os, or the deprecated beta.kubernetes.io/os
// older manifests carry), or a required node affinity all of whose terms
// rule Linux out (os In a list without linux, or NotIn one with it). ""
// when it may run on Linux.
func windowsOnly(pod *corev1.Pod) string {
	if pod.Spec.OS != nil && pod.Spec.OS.Name == corev1.Windows {
		return "spec.os.name: windows"
	}
	for _, key := range []string{corev1.LabelOSStable, betaOSLabel} {
		if v := pod.Spec.NodeSelector[key]; v != "" && v != string(corev1.Linux) {
			return "nodeSelector " + key + ": " + v
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		noLinux := func(t corev1.NodeSelectorTerm) bool {
			return slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
				if r.Key != corev1.LabelOSStable && r.Key != betaOSLabel {
					return false
				}
				linux := slices.Contains(r.Values, string(corev1.Linux))
				return r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 && !linux ||
					r.Operator == corev1.NodeSelectorOpNotIn && linux
			})
		}
		// Terms are ORed: one that allows Linux lets the pod run there.
		if len(terms) > 0 && !slices.ContainsFunc(terms, func(t corev1.NodeSelectorTerm) bool { return !noLinux(t) }) {
			return "required node affinity rules out kubernetes.io/os linux"
		}
	}
	return ""
}

// betaOSLabel is kubernetes.io/os's deprecated name, still set on nodes.
const betaOSLabel = "beta.kubernetes.io/os"

func serverIndex(pod *corev1.Pod, qp int) int {
	for i, c := range pod.Spec.Containers {
		if i != qp && (c.Name == "kserve-container" || c.Name == pod.Annotations[AnnContainer]) {
			return i
		}
	}
	if qp == 0 && len(pod.Spec.Containers) > 1 {
		return 1
	}
	return 0
}

func pickServer(pod *corev1.Pod) (int, error) {
	if name := pod.Annotations[AnnContainer]; name != "" {
		i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
		if i < 0 {
			return 0, fmt.Errorf("%s: no container named %q", AnnContainer, name)
		}
		return i, nil
	}
	if len(pod.Spec.Containers) == 1 {
		return 0, nil
	}
	for i, c := range pod.Spec.Containers {
		if kindOf(&c) != kindUnknown {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%d containers and none recognised as the model server; name it with %s", len(pod.Spec.Containers), AnnContainer)
}

type protoPort struct {
	proto string
	port  int32
}

func inferencePorts(ann map[string]string, kind serverKind) ([]protoPort, error) {
	if v, ok := ann[AnnPorts]; ok {
		var out []protoPort
		for _, f := range strings.Split(v, ",") {
			proto, p, ok := strings.Cut(strings.TrimSpace(f), "=")
			n, err := strconv.Atoi(p)
			if !ok || (proto != "http" && proto != "grpc") || err != nil || n <= 0 || n > 65535-portShift {
				return nil, fmt.Errorf("%s: %q is not protocol=port (http or grpc, port 1..%d)", AnnPorts, f, 65535-portShift)
			}
			// The sidecar has one listener per protocol (a repeated
			// --http-listen keeps the last) and the server one flag per
			// protocol: a repeat would leave a moved port unserved.
			if slices.ContainsFunc(out, func(o protoPort) bool { return o.proto == proto || o.port == int32(n) }) {
				return nil, fmt.Errorf("%s: %q repeats a protocol or a port (at most one http and one grpc port, distinct)", AnnPorts, v)
			}
			out = append(out, protoPort{proto, int32(n)})
		}
		return out, nil
	}
	switch kind {
	case kindTriton:
		return []protoPort{{"http", 8000}, {"grpc", 8001}}, nil
	case kindKServe:
		return []protoPort{{"http", 8080}, {"grpc", 8081}}, nil
	case kindTFServing:
		return []protoPort{{"http", 8501}, {"grpc", 8500}}, nil
	}
	return nil, fmt.Errorf("no %s annotation and the server is not recognised", AnnPorts)
}

// flagNames are the server's own flags for its ports.
func flagName(kind serverKind, proto string) string {
	switch kind {
	case kindTriton:
		return "--" + proto + "-port"
	case kindKServe:
		return "--" + proto + "_port"
	case kindTFServing:
		if proto == "http" {
			return "--rest_api_port"
		}
		return "--port"
	}
	return ""
}

// restOff reports whether a TensorFlow Serving container serves no REST API:
// --rest_api_port=0, or no such flag where tensorflow_model_server is run
// directly (its default is 0; the image's entrypoint sets 8501). Its REST
// port is then not taken over, nor the server's REST API turned on.
func restOff(c *corev1.Container) bool {
	if v, ok := flagValue(c, flagName(kindTFServing, "http")); ok {
		return strings.TrimSpace(v) == "0"
	}
	all := append(slices.Clone(c.Command), c.Args...)
	entrypoint := len(c.Command) == 0 && tfImage(c.Image) ||
		slices.ContainsFunc(all[:min(len(all), 2)], func(a string) bool { return path.Base(a) == tfEntrypoint })
	return !entrypoint
}

// flagValue is the value of a container's flag name (--name=v or --name v)
// where it last appears in the command and args: the one the server's flag
// parser keeps (TensorFlow's, Triton's getopt and KServe's argparse alike).
func flagValue(c *corev1.Container, name string) (string, bool) {
	all := append(slices.Clone(c.Command), c.Args...)
	v, found := "", false
	for i, a := range all {
		if s, ok := strings.CutPrefix(a, name+"="); ok {
			v, found = s, true
		} else if a == name && i+1 < len(all) {
			v, found = all[i+1], true
		}
	}
	return v, found
}

// currentPort reads the port the server is told to use, else its default.
func currentPort(c *corev1.Container, kind serverKind, proto string, def int32) int32 {
	if v, ok := flagValue(c, flagName(kind, proto)); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n <= 65535-portShift {
			return int32(n)
		}
	}
	return def
}

// setServerFlags points the server at its new ports, replacing the flags it
// has and appending those it lacks.
func setServerFlags(c *corev1.Container, kind serverKind, routes []route) {
	for _, r := range routes {
		name := flagName(kind, r.proto)
		val := strconv.Itoa(int(r.upstream))
		done := false
		for _, list := range []*[]string{&c.Command, &c.Args} {
			for i, a := range *list {
				if strings.HasPrefix(a, name+"=") {
					(*list)[i] = name + "=" + val
					done = true
				} else if a == name && i+1 < len(*list) {
					(*list)[i+1] = val
					done = true
				}
			}
		}
		if !done {
			c.Args = append(c.Args, name+"="+val)
		}
	}
}

// movePort moves the server's containerPort r.listen to r.upstream; the
// sidecar inherits the port's name. Probes on the port follow it.
func movePort(c *corev1.Container, r *route) error {
	name := ""
	for i := range c.Ports {
		if c.Ports[i].ContainerPort == r.listen {
			name = c.Ports[i].Name
			c.Ports[i].ContainerPort = r.upstream
			c.Ports[i].Name = ""
			// A hostPort maps the node's port to this port number, which
			// the sidecar now owns: left on the server's moved port, the
			// node's traffic would reach the server unmeasured.
			r.hostPort, r.hostIP = c.Ports[i].HostPort, c.Ports[i].HostIP
			c.Ports[i].HostPort, c.Ports[i].HostIP = 0, ""
		}
	}
	if name == "" {
		name = "iw-" + r.proto
	}
	r.name = name
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		switch {
		case p.HTTPGet != nil && matches(p.HTTPGet.Port, r.listen, name):
			p.HTTPGet.Port = intstr.FromInt32(r.upstream)
		case p.TCPSocket != nil && matches(p.TCPSocket.Port, r.listen, name):
			p.TCPSocket.Port = intstr.FromInt32(r.upstream)
		case p.GRPC != nil && p.GRPC.Port == r.listen:
			p.GRPC.Port = r.upstream
		}
	}
	return nil
}

func matches(p intstr.IntOrString, port int32, name string) bool {
	if p.Type == intstr.String {
		return p.StrVal == name
	}
	return p.IntVal == port
}

// checkFree refuses when a port the sidecar needs is used by another
// container, native sidecars included. Only the server (named server) may
// already declare an upstream port: queue-proxy's USER_PORT, where the
// server stays.
func checkFree(pod *corev1.Pod, routes []route, server string) error {
	need := map[int32]bool{AdminPort: true}
	for _, r := range routes {
		need[r.upstream] = true
	}
	running := slices.Clone(pod.Spec.Containers)
	for _, c := range pod.Spec.InitContainers {
		// A native sidecar (restartPolicy Always) runs for the pod's life
		// in its network namespace; other init containers have exited.
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			running = append(running, c)
		}
	}
	for _, c := range running {
		for _, p := range c.Ports {
			if need[p.ContainerPort] {
				moved := false
				for _, r := range routes {
					moved = moved || r.upstream == p.ContainerPort
				}
				if !moved || c.Name != server {
					return fmt.Errorf("port %d, which the sidecar needs, is already used by container %q", p.ContainerPort, c.Name)
				}
			}
		}
	}
	return nil
}

// annotationArgs turns the pod's annotations into sidecar flags, checking each.
func annotationArgs(cfg Config, ann map[string]string) ([]string, error) {
	var args []string
	if v := ann[AnnSLA]; v != "" {
		for _, f := range strings.Split(v, ",") {
			m, d, ok := strings.Cut(strings.TrimSpace(f), "=")
			dur, err := time.ParseDuration(d)
			if !ok || m == "" || err != nil || dur <= 0 {
				return nil, fmt.Errorf("%s: %q is not model=duration", AnnSLA, f)
			}
			args = append(args, "--sla="+m+"="+d)
		}
	}
	if v := ann[AnnTraceTarget]; v != "" {
		f, err := strconv.ParseFloat(v, 64)
		// Checked as what must hold, as the sidecar checks it: NaN fails
		// every comparison, and NaN or +Inf would stop the sidecar.
		if err != nil || !(f >= 0) || math.IsInf(f, 1) {
			return nil, fmt.Errorf("%s: %q is not a finite non-negative number", AnnTraceTarget, v)
		}
		args = append(args, "--trace-target-per-second="+v)
	}
	push := cfg.PushURL
	if v := ann[AnnPushURL]; v != "" {
		if !httpURL(v) {
			return nil, fmt.Errorf("%s: %q is not an http(s) URL", AnnPushURL, v)
		}
		push = v
	}
	if push != "" {
		args = append(args, "--push-url="+push)
	}
	otlp := cfg.OTLPEndpoint
	if v := ann[AnnOTLPEndpoint]; v != "" {
		otlp = v
	}
	if otlp != "" {
		args = append(args, "--otlp-endpoint="+otlp)
		if strings.HasPrefix(otlp, "http://") || strings.HasPrefix(otlp, "https://") {
			args = append(args, "--otlp-protocol=http")
		}
	}
	return args, nil
}

// httpURL says whether s is an absolute http or https URL: the sidecar's
// push.url accepts nothing else and stops at start on any other scheme.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func resources(cfg Config, ann map[string]string) (corev1.ResourceRequirements, error) {
	var rr corev1.ResourceRequirements
	set := func(list *corev1.ResourceList, name corev1.ResourceName, key, def string) error {
		v := def
		if a, ok := ann[key]; ok {
			v = a
		}
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a quantity", key, v)
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[name] = q
		return nil
	}
	for _, s := range []struct {
		list     *corev1.ResourceList
		name     corev1.ResourceName
		key, def string
	}{
		{&rr.Requests, corev1.ResourceCPU, AnnCPURequest, cfg.CPURequest},
		{&rr.Requests, corev1.ResourceMemory, AnnMemoryRequest, cfg.MemoryRequest},
		{&rr.Limits, corev1.ResourceCPU, AnnCPULimit, cfg.CPULimit},
		{&rr.Limits, corev1.ResourceMemory, AnnMemoryLimit, cfg.MemoryLimit},
	} {
		if err := set(s.list, s.name, s.key, s.def); err != nil {
			return rr, err
		}
	}
	for name, keys := range map[corev1.ResourceName][2]string{corev1.ResourceCPU: {AnnCPURequest, AnnCPULimit}, corev1.ResourceMemory: {AnnMemoryRequest, AnnMemoryLimit}} {
		req, okr := rr.Requests[name]
		lim, okl := rr.Limits[name]
		if okr && okl && req.Cmp(lim) > 0 {
			return rr, fmt.Errorf("%s: %s is above %s %s", keys[0], req.String(), keys[1], lim.String())
		}
	}
	return rr, nil
}

// fitsPodRequests refuses a sidecar whose requests do not fit in the
// pod-level requests (spec.resources) beside the containers that run with
// it: the apiserver refuses a pod whose containers together request more
// than the pod. Plain init containers only raise that sum when larger than
// it, which the sidecar, a regular container, does not change.
func fitsPodRequests(pod *corev1.Pod, side corev1.ResourceRequirements) error {
	if pod.Spec.Resources == nil {
		return nil
	}
	for name, podReq := range pod.Spec.Resources.Requests {
		sideReq, ok := side.Requests[name]
		if !ok {
			continue
		}
		sum := sideReq.DeepCopy()
		for _, c := range pod.Spec.Containers {
			if q, ok := c.Resources.Requests[name]; ok {
				sum.Add(q)
			}
		}
		for _, c := range pod.Spec.InitContainers {
			if q, ok := c.Resources.Requests[name]; ok && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				sum.Add(q)
			}
		}
		if sum.Cmp(podReq) > 0 {
			return fmt.Errorf("the pod's spec.resources.requests.%s (%s) has no room for the sidecar's %s: its containers would request %s", name, podReq.String(), sideReq.String(), sum.String())
		}
	}
	return nil
}

// sidecar builds the container.
func sidecar(image string, cfg Config, routes []route, extra []string, res corev1.ResourceRequirements, ebpf bool) corev1.Container {
	// All interfaces: the kubelet and Prometheus reach /readyz and /metrics
	// on the pod IP, a kubectl port-forward (which dials localhost in the
	// pod) the rest, which the sidecar serves to loopback peers only.
	args := []string{"proxy", fmt.Sprintf("--admin-listen=:%d", AdminPort)}
	ports := []corev1.ContainerPort{}
	sort.SliceStable(routes, func(i, j int) bool { return routes[i].proto > routes[j].proto }) // http before grpc
	for _, r := range routes {
		args = append(args,
			fmt.Sprintf("--%s-listen=:%d", r.proto, r.listen),
			fmt.Sprintf("--%s-upstream=127.0.0.1:%d", r.proto, r.upstream))
		ports = append(ports, corev1.ContainerPort{Name: r.name, ContainerPort: r.listen, HostPort: r.hostPort, HostIP: r.hostIP, Protocol: corev1.ProtocolTCP})
	}
	ports = append(ports, corev1.ContainerPort{Name: AdminPortName, ContainerPort: AdminPort, Protocol: corev1.ProtocolTCP})
	if !ebpf {
		args = append(args, "--no-bpf")
	}
	args = append(args, extra...)
	args = append(args, cfg.ExtraArgs...)
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	f, t := false, true
	uid := int64(65532)
	sc := &corev1.SecurityContext{
		RunAsNonRoot:             &t,
		RunAsUser:                &uid,
		AllowPrivilegeEscalation: &f,
		ReadOnlyRootFilesystem:   &t,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if ebpf {
		// Loading BPF and following another container's process: Linux grants
		// added capabilities to root only (Kubernetes has no ambient caps).
		// DAC_READ_SEARCH: root without it cannot list /proc/PID/fd of a
		// server running as another user, where its listening socket is found.
		root := int64(0)
		sc.RunAsNonRoot, sc.RunAsUser = &f, &root
		sc.Capabilities.Add = []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "CHECKPOINT_RESTORE", "DAC_READ_SEARCH"}
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(AdminPortName)}},
			PeriodSeconds: period,
		}
	}
	pull := cfg.ImagePullPolicy
	return corev1.Container{
		Name:            ContainerName,
		Image:           image,
		ImagePullPolicy: pull,
		Args:            args,
		Env: []corev1.EnvVar{
			field("POD_NAME", "metadata.name"),
			field("POD_NAMESPACE", "metadata.namespace"),
			field("POD_IP", "status.podIP"),
			field("NODE_NAME", "spec.nodeName"),
		},
		Ports:           ports,
		Resources:       res,
		ReadinessProbe:  probe("/readyz", 2),
		LivenessProbe:   probe("/healthz", 10),
		SecurityContext: sc,
	}
}

// MarshalPatch encodes the operations as the webhook returns them.
func MarshalPatch(ops []PatchOp) ([]byte, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("inject: marshal patch: %w", err)
	}
	return b, nil
}

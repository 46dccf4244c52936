package image

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/cgroup"
	"github.com/inferwatch/inferwatch/demo/loadgen"
	"github.com/inferwatch/inferwatch/inject"
	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/internal/testenv"
	"gopkg.in/yaml.v3"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const repoRoot = "../.."

// imageUser is the USER the Containerfile sets: distroless's nonroot.
const imageUser = "65532:65532"

func TestMain(m *testing.M) {
	code := m.Run()
	if seccompFile != "" {
		_ = os.Remove(seccompFile)
	}
	if built != "" {
		_ = exec.Command("podman", "rmi", "-f", built).Run()
	}
	os.Exit(code)
}

// flagValue is the value of --name=value in args ("" if absent).
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("%q is not host:port", addr)
	}
	return int32(n)
}

// waitOK polls url until it answers 200.
func waitOK(t *testing.T, client *http.Client, url string, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%s: %s", resp.Status, b)
	}
	t.Fatalf("%s did not answer 200 within %v: %s", url, timeout, last)
}

// metricSum adds up the samples of family name whose labels include want;
// a page that does not parse counts as none.
func metricSum(text, name string, want map[string]string) (float64, bool) {
	p, err := exposition.Parse(text)
	if err != nil {
		return 0, false
	}
	return p.Sum(name, want)
}

// defaultName is the name scripts/image.sh gives the image by default.
func defaultName(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), "--print-name").Output()
	if err != nil {
		t.Fatalf("scripts/image.sh --print-name: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// TestImageConfig: the image is what the chart and the injector assume —
// the chart's image name, an entrypoint that takes a subcommand, the
// nonroot user, the version the chart says.
func TestImageConfig(t *testing.T) {
	p := newPodman(t)
	img := p.image(t)
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `yaml:"repository"`
		} `yaml:"image"`
	}
	for file, v := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/helm/inferwatch", file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if name, want := defaultName(t), values.Image.Repository+":"+chart.AppVersion; name != want {
		t.Errorf("scripts/image.sh names the image %q, the chart runs %q", name, want)
	}

	out, err := p.cmd("image", "inspect", img)
	if err != nil {
		t.Fatal(err)
	}
	var info []struct {
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || len(info) != 1 {
		t.Fatalf("podman image inspect: %v\n%s", err, out)
	}
	cfg := info[0].Config
	if cfg.User != imageUser {
		t.Errorf("image user %q, want %q (the chart's and the injector's runAsUser)", cfg.User, imageUser)
	}
	// The chart and the injector give args only: the first is a subcommand.
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/inferwatch"}) || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want inferwatch and no cmd", cfg.Entrypoint, cfg.Cmd)
	}
	if v := cfg.Labels["org.opencontainers.image.version"]; v != chart.AppVersion {
		t.Errorf("version label %q, want the chart's appVersion %q", v, chart.AppVersion)
	}
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if rev := cfg.Labels["org.opencontainers.image.revision"]; !strings.HasPrefix(rev, strings.TrimSpace(string(head))) {
		t.Errorf("revision label %q, want the checkout's %s", rev, head)
	}

	// What runs is the version labelled, and the siblings `inject` and
	// `extproc` exec are there.
	run := func(args ...string) string {
		all := append(append([]string{"run", "--rm"}, limits...), img)
		out, err := p.cmd(append(all, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got, want := run("version"), "inferwatch "+chart.AppVersion; got != want {
		t.Errorf("inferwatch version printed %q, want %q", got, want)
	}
	for _, sub := range []string{"inject", "extproc"} {
		all := append(append([]string{"run", "--rm"}, limits...), img, sub, "-h")
		out, _ := p.cmd(all...)
		if !strings.Contains(out, "-listen") {
			t.Errorf("inferwatch %s -h in the image did not print its flags (sibling binary missing?):\n%s", sub, out)
		}
	}
}

// reviewPod is the pod of a recorded AdmissionReview.
func reviewPod(t *testing.T, file string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(r.Request.Object.Raw, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// injected is what a patch adds for the sidecar.
type injected struct {
	c       corev1.Container
	hostPID bool                     // the pod is put in the host's PID namespace
	sharePN bool                     // the pod's containers share one PID namespace
	volumes map[string]corev1.Volume // the pod's volumes the patch adds, by name
}

// sidecarOf finds the injected container in a patch, and what the patch
// adds to the pod for it.
func sidecarOf(t *testing.T, patch []inject.PatchOp) injected {
	t.Helper()
	in := injected{volumes: map[string]corev1.Volume{}}
	found := false
	for _, op := range patch {
		raw, err := json.Marshal(op.Value)
		if err != nil {
			t.Fatal(err)
		}
		var vols []corev1.Volume
		switch op.Path {
		case "/spec/containers/-":
			if err := json.Unmarshal(raw, &in.c); err != nil {
				t.Fatal(err)
			}
			found = in.c.Name == inject.ContainerName
		case "/spec/hostPID":
			_ = json.Unmarshal(raw, &in.hostPID)
		case "/spec/shareProcessNamespace":
			_ = json.Unmarshal(raw, &in.sharePN)
		case "/spec/volumes":
			_ = json.Unmarshal(raw, &vols)
		case "/spec/volumes/-":
			var v corev1.Volume
			_ = json.Unmarshal(raw, &v)
			vols = append(vols, v)
		}
		for _, v := range vols {
			in.volumes[v.Name] = v
		}
	}
	if !found {
		t.Fatalf("the patch adds no %s container: %+v", inject.ContainerName, patch)
	}
	return in
}

// TestInjectedSidecar runs the container the injector adds, from this
// image, as the kubelet would (its args, environment, security context)
// in front of a KServe v2 model server in the same network namespace (and
// PID namespace, the host's where the injector asks for it), as a pod's
// containers are; and checks that it gets ready, forwards gRPC and HTTP
// calls, counts every one, and, with eBPF, follows the server's threads.
func TestInjectedSidecar(t *testing.T) {
	p := newPodman(t)
	img := p.image(t)
	for _, tc := range []struct {
		name, review string
		bpf          bool
		// podPIDNS undoes the injector's hostPID: the pod's containers
		// share a PID namespace of their own (shareProcessNamespace), as
		// injectors before hostPID had it.
		podPIDNS bool
		// serverMemory is a memory limit given to the server's container
		// (the pod's first) before injection; "" none.
		serverMemory string
		// processFacts asks for inject.AnnProcessFacts; the server then
		// runs as root, whose descriptors the sidecar (65532) cannot read.
		processFacts bool
	}{
		{name: "triton", review: "triton.json"},
		{name: "triton with process facts", review: "triton.json", processFacts: true},
		{name: "KServe with eBPF", review: "kserve-raw-ebpf.json", bpf: true, serverMemory: "1Gi"},
		{name: "eBPF in the pod's PID namespace", review: "kserve-raw-ebpf.json", bpf: true, podPIDNS: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := reviewPod(t, filepath.Join(repoRoot, "inject", "testdata", "reviews", tc.review))
			var serverMem resource.Quantity
			if tc.serverMemory != "" {
				serverMem = resource.MustParse(tc.serverMemory)
				srv := &pod.Spec.Containers[0]
				if srv.Resources.Limits == nil {
					srv.Resources.Limits = corev1.ResourceList{}
				}
				srv.Resources.Limits[corev1.ResourceMemory] = serverMem
			}
			allocatable := resource.MustParse("7Gi")
			if tc.processFacts {
				pod.Annotations[inject.AnnProcessFacts] = "true"
			}
			cfg := inject.DefaultConfig()
			cfg.Image = img
			cfg.ImagePullPolicy = corev1.PullNever
			out := inject.Mutate(cfg, inject.OptIn, pod)
			if out.Action != "injected" {
				t.Fatalf("not injected: %s %s", out.Action, out.Reason)
			}
			in := sidecarOf(t, out.Patch)
			side, hostPID := in.c, in.hostPID
			if hostPID != tc.bpf {
				t.Fatalf("hostPID %v with eBPF %v: the probes see the kernel's PIDs", hostPID, tc.bpf)
			}
			if in.sharePN != tc.processFacts {
				t.Fatalf("shareProcessNamespace %v with %s %v", in.sharePN, inject.AnnProcessFacts, tc.processFacts)
			}

			// The model server stands where the injector moved the
			// server's ports to, and holds the pod's network namespace,
			// with the sidecar's ports published to loopback here.
			grpcUp, httpUp := flagValue(side.Args, "--grpc-upstream"), flagValue(side.Args, "--http-upstream")
			if grpcUp == "" || httpUp == "" {
				t.Fatalf("sidecar args %q lack an upstream", side.Args)
			}
			var srvFlags []string
			for _, cp := range side.Ports {
				srvFlags = append(srvFlags, "-p", fmt.Sprintf("127.0.0.1::%d", cp.ContainerPort))
			}
			if hostPID && !tc.podPIDNS {
				srvFlags = append(srvFlags, "--pid", "host")
			}
			if !serverMem.IsZero() {
				srvFlags = append(srvFlags, "--memory", strconv.FormatInt(serverMem.Value(), 10))
			}
			if tc.processFacts {
				srvFlags = append(srvFlags, "--user", "0")
			}
			server := p.start(t, srvFlags, img, "modelserver", "--grpc-listen", grpcUp, "--http-listen", httpUp)
			env := envOf(t, side.Env, downward{
				fields: map[string]string{
					"metadata.name": "model-0", "metadata.namespace": pod.Namespace,
					"status.podIP": server.ip(t), "spec.nodeName": "node-0",
				},
				containers:  pod.Spec.Containers,
				allocatable: allocatable,
			})
			flags := []string{"--network", "container:" + server.name}
			switch {
			case tc.podPIDNS || in.sharePN:
				flags = append(flags, "--pid", "container:"+server.name)
			case hostPID:
				flags = append(flags, "--pid", "host")
			}
			flags = append(flags, envFlags(env)...)
			flags = append(flags, securityFlags(t, pod.Spec.SecurityContext, side.SecurityContext)...)
			flags = append(flags, mountFlags(t, side, in.volumes)...)
			mem := side.Resources.Limits.Memory()
			if !mem.IsZero() {
				flags = append(flags, "--memory", strconv.FormatInt(mem.Value(), 10))
			}
			sidecar := p.start(t, flags, img, expand(side.Args, env)...)

			admin := "http://" + server.published(t, inject.AdminPort)
			waitOK(t, http.DefaultClient, admin+side.ReadinessProbe.HTTPGet.Path, 30*time.Second)
			waitOK(t, http.DefaultClient, admin+side.LivenessProbe.HTTPGet.Path, time.Second)

			grpcAddr := server.published(t, portOf(t, flagValue(side.Args, "--grpc-listen")))
			httpAddr := server.published(t, portOf(t, flagValue(side.Args, "--http-listen")))
			var mu sync.Mutex
			ok := map[string]int{}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sum, err := loadgen.Run(ctx, loadgen.Options{
				QPS: 100, Duration: 2 * time.Second,
				Targets: []loadgen.Target{
					{Protocol: loadgen.ProtocolGRPC, Addr: grpcAddr, Model: loadgen.ModelMLP},
					{Protocol: loadgen.ProtocolHTTP, Addr: httpAddr, Model: loadgen.ModelMLP, JSON: true},
				},
				OnResult: func(r loadgen.Result) {
					if r.Err == nil {
						mu.Lock()
						ok[[]string{"grpc", "http"}[r.Target]]++
						mu.Unlock()
					}
				},
			})
			if err != nil || sum.Failed > 0 || sum.Late > 0 || ok["grpc"] == 0 || ok["http"] == 0 {
				t.Fatalf("calls through the sidecar: %+v, ok %v: %v", sum, ok, err)
			}

			// Every call is counted, by protocol (the pipeline hands
			// records over in batches: wait for them).
			var text string
			var got map[string]float64
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				text = get(t, admin+"/metrics")
				got = map[string]float64{}
				for proto := range ok {
					got[proto], _ = metricSum(text, "inferwatch_requests_total", map[string]string{"protocol": proto, "model": loadgen.ModelMLP})
				}
				if got["grpc"] == float64(ok["grpc"]) && got["http"] == float64(ok["http"]) || time.Now().After(deadline) {
					break
				}
			}
			if got["grpc"] != float64(ok["grpc"]) || got["http"] != float64(ok["http"]) {
				t.Errorf("inferwatch_requests_total for %s: %v, calls that succeeded %v", loadgen.ModelMLP, got, ok)
			}
			// --no-bpf leaves the family out; asked for, the probes load.
			enabled, _ := metricSum(text, "inferwatch_bpf_enabled", nil)
			if tc.bpf && enabled != 1 {
				t.Errorf("eBPF asked for (%s), inferwatch_bpf_enabled %v", inject.AnnEBPF, enabled)
			}
			if !tc.bpf && enabled != 0 {
				t.Errorf("eBPF not asked for, inferwatch_bpf_enabled %v", enabled)
			}
			// The server's memory limit, which a leak is projected
			// against, is the kubelet's figure for the server's container
			// (its cgroup is another container's, out of the sidecar's
			// view in Kubernetes): where the sidecar sees the server's
			// process (eBPF pods, and pods sharing their PID namespace),
			// the leak watch has it.
			if tc.bpf || tc.processFacts {
				want := allocatable.Value()
				if !serverMem.IsZero() {
					want = serverMem.Value()
				}
				if lim, _ := metricSum(text, "inferwatch_upstream_memory_limit_bytes", nil); lim != float64(want) {
					t.Errorf("inferwatch_upstream_memory_limit_bytes %v, want the server container's %d", lim, want)
				}
				if rss, _ := metricSum(text, "inferwatch_upstream_rss_bytes", nil); rss <= 0 {
					t.Errorf("inferwatch_upstream_rss_bytes %v: the server's memory not read", rss)
				}
			}
			// The collector knows the container's memory limit.
			logs, _ := p.cmd("logs", sidecar.name)
			if want := fmt.Sprintf("limit_bytes=%d ", mem.Value()); mem.IsZero() || !strings.Contains(logs, want) {
				t.Errorf("memory limit %v: no Go soft limit set from it (%q) in the log:\n%s", mem, want, logs)
			}
			if !tc.bpf {
				return
			}
			// Followed by its kernel PIDs, the server's threads wake for
			// every call: at least one run-queue wait each. Followed by
			// the numbers its own namespace gives them, the probes would
			// watch whichever host processes carry those (a handful of
			// waits in a run); there the scheduler facts must be off, and
			// say why.
			waits, schedOn := metricSum(text, "inferwatch_sched_runqueue_delay_seconds_count", nil)
			calls := float64(ok["grpc"] + ok["http"])
			// The OOM probe reads the node's tracefs the injector mounts;
			// the cost calibration's uprobes are uprobe_multi links, which
			// need no CAP_SYS_ADMIN.
			if !strings.Contains(logs, "OOM tracepoint") {
				t.Errorf("the OOM probe is not on:\n%s", logs)
			}
			if !strings.Contains(logs, "calibrated cost per hit") {
				t.Errorf("the probes' costs were not calibrated:\n%s", logs)
			}
			switch {
			case tc.podPIDNS && (schedOn || !strings.Contains(logs, "PID namespace of its own")):
				t.Errorf("in a PID namespace of its own: scheduler facts on %v (%v waits), or no reason logged:\n%s", schedOn, waits, logs)
			case !tc.podPIDNS && waits < calls:
				t.Errorf("the server's threads waited for a CPU %v times over %v calls: not following its processes", waits, calls)
			}

			// CFS throttling of the server: its cgroup is another
			// container's, outside the sidecar's own view of the tree; the
			// injector mounts the node's beside it. A quota of 1 ms per
			// 100 ms, put on the server's cgroup as a node's kubelet
			// would, and a burst of calls.
			throttle(t, p, server.name)
			bctx, bcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer bcancel()
			_, _ = loadgen.Run(bctx, loadgen.Options{QPS: 200, Duration: time.Second,
				Targets: []loadgen.Target{{Protocol: loadgen.ProtocolGRPC, Addr: grpcAddr, Model: loadgen.ModelMLP}}})
			var throttled float64
			for deadline := time.Now().Add(10 * time.Second); throttled == 0 && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
				throttled, _ = metricSum(get(t, admin+"/metrics"), "inferwatch_cgroup_throttled_seconds_total", nil)
			}
			if throttled == 0 {
				logs, _ := p.cmd("logs", sidecar.name)
				t.Errorf("the server's cgroup was throttled and inferwatch_cgroup_throttled_seconds_total is 0:\n%s", logs)
			}
		})
	}
}

// throttle puts a CFS quota of 1 ms per 100 ms on a container's cgroup,
// found from its process.
func throttle(t *testing.T, p *podman, name string) {
	t.Helper()
	out, err := p.cmd("inspect", "-f", "{{.State.Pid}}", name)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("container %s's PID %q: %v", name, out, err)
	}
	mounts, err := cgroup.SelfMounts()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := cgroup.ProcessDir(pid, mounts, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	file, quota := filepath.Join(dir, "cpu.max"), "1000 100000"
	if _, err := os.Stat(file); err != nil {
		file, quota = filepath.Join(dir, "cpu.cfs_quota_us"), "1000"
	}
	if err := os.WriteFile(file, []byte(quota), 0); err != nil {
		t.Fatalf("throttling %s: %v", name, err)
	}
}

// TestChartInjector runs the chart's injector Deployment (the default
// values' golden render) from this image, as the kubelet would, and sends
// it a recorded AdmissionReview on each path the chart's webhook
// configuration registers.
func TestChartInjector(t *testing.T) {
	p := newPodman(t)
	img := p.image(t)
	rendered, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "helm", "testdata", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	for _, doc := range strings.Split(string(rendered), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		var obj any
		switch m["kind"] {
		case "Deployment":
			obj = &dep
		case "MutatingWebhookConfiguration":
			obj = &mwc
		default:
			continue
		}
		raw, _ := json.Marshal(m)
		if err := json.Unmarshal(raw, obj); err != nil {
			t.Fatal(err)
		}
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 || len(mwc.Webhooks) == 0 {
		t.Fatalf("the golden render has no injector Deployment or webhooks")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if name := defaultName(t); c.Image != name {
		t.Errorf("the chart runs %q, scripts/image.sh builds %q", c.Image, name)
	}

	// The secret volume: a serving certificate, files readable by the
	// container's user as a secret volume's default mode (0644) makes them.
	tlsDir := t.TempDir()
	pool := testenv.WriteSelfSigned(t, filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key"), "iw-injector")
	for _, f := range []string{tlsDir, filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key")} {
		mode := os.FileMode(0o644)
		if f == tlsDir {
			mode = 0o755
		}
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
	}
	var flags []string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != "/tls" {
			t.Fatalf("volume mount %s: this test provides /tls only", vm.MountPath)
		}
		flags = append(flags, "-v", tlsDir+":"+vm.MountPath+":ro")
	}
	for _, cp := range c.Ports {
		flags = append(flags, "-p", fmt.Sprintf("127.0.0.1::%d", cp.ContainerPort))
	}
	// Podman cannot tell a container its address before it starts: the
	// admin endpoint listens on every address of the container's namespace.
	env := envOf(t, c.Env, downward{fields: map[string]string{"status.podIP": "0.0.0.0"}})
	flags = append(flags, envFlags(env)...)
	flags = append(flags, securityFlags(t, dep.Spec.Template.Spec.SecurityContext, c.SecurityContext)...)
	inj := p.start(t, flags, img, expand(c.Args, env)...)

	port := func(name string) string {
		for _, cp := range c.Ports {
			if cp.Name == name {
				return inj.published(t, cp.ContainerPort)
			}
		}
		t.Fatalf("no container port %q", name)
		return ""
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	webhook := "https://" + port("webhook")
	waitOK(t, client, webhook+c.ReadinessProbe.HTTPGet.Path, 30*time.Second)
	waitOK(t, http.DefaultClient, "http://"+port("metrics")+c.LivenessProbe.HTTPGet.Path, time.Second)

	review, err := os.ReadFile(filepath.Join(repoRoot, "inject", "testdata", "reviews", "triton.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range mwc.Webhooks {
		path := *w.ClientConfig.Service.Path
		resp, err := client.Post(webhook+path, "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != http.StatusOK || r.Response == nil {
			t.Fatalf("POST %s: %s: %s (%v)", path, resp.Status, body, err)
		}
		var ops []inject.PatchOp
		if err := json.Unmarshal(r.Response.Patch, &ops); err != nil {
			t.Fatalf("%s: patch: %v", path, err)
		}
		side := sidecarOf(t, ops).c
		if want := flagValue(c.Args, "--image"); !r.Response.Allowed || side.Image != want {
			t.Errorf("%s: allowed %v, sidecar image %q, want %q (the chart's --image)", path, r.Response.Allowed, side.Image, want)
		}
	}
}

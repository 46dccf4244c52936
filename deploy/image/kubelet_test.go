package image

// What the kubelet would do with a container spec, done with podman.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// securityFlags is what the kubelet would enforce for a container with sc
// in a pod with podSC, as podman flags. It fails the test where the
// kubelet would refuse to start the container.
func securityFlags(t *testing.T, podSC *corev1.PodSecurityContext, sc *corev1.SecurityContext) []string {
	t.Helper()
	var uid *int64
	var nonRoot *bool
	if podSC != nil {
		uid, nonRoot = podSC.RunAsUser, podSC.RunAsNonRoot
	}
	if sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	var flags []string
	user, _, _ := strings.Cut(imageUser, ":")
	if uid != nil {
		user = strconv.FormatInt(*uid, 10)
		flags = append(flags, "--user", user)
	}
	if nonRoot != nil && *nonRoot {
		// The kubelet refuses runAsNonRoot for user 0 or a user name it
		// cannot check.
		if n, err := strconv.Atoi(user); err != nil || n == 0 {
			t.Fatalf("runAsNonRoot with user %q: the kubelet would not start it", user)
		}
	}
	if sc == nil {
		return flags
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		// Kubernetes mounts no writable /tmp on a read-only root; podman would.
		flags = append(flags, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt", "no-new-privileges")
	}
	if sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Drop {
			flags = append(flags, "--cap-drop", string(c))
		}
		for _, c := range sc.Capabilities.Add {
			flags = append(flags, "--cap-add", string(c))
		}
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Fatal("a privileged container: the injector and the chart never ask for one")
	}
	if sp := sc.SeccompProfile; sp != nil && sp.Type == corev1.SeccompProfileTypeRuntimeDefault {
		flags = append(flags, "--security-opt", "seccomp="+runtimeDefault(t))
	} else if sp != nil {
		t.Fatalf("seccomp profile %s: this test knows RuntimeDefault only", sp.Type)
	}
	return flags
}

var (
	seccompOnce sync.Once
	seccompFile string
	seccompErr  error
)

// runtimeDefault is the seccomp profile Kubernetes' RuntimeDefault means on
// containerd, as a file podman takes: podman's own default (Debian 12's
// containers-common) allows bpf(2) and perf_event_open(2) only with
// CAP_SYS_ADMIN, containerd's (since 1.7) with CAP_BPF and CAP_PERFMON
// too, the capabilities the injector grants for eBPF. Everything else is
// podman's profile unchanged.
func runtimeDefault(t *testing.T) string {
	t.Helper()
	seccompOnce.Do(func() {
		const src = "/usr/share/containers/seccomp.json"
		b, err := os.ReadFile(src)
		if err != nil {
			seccompErr = fmt.Errorf("podman's default seccomp profile: %w", err)
			return
		}
		var prof map[string]any
		if err := json.Unmarshal(b, &prof); err != nil {
			seccompErr = fmt.Errorf("%s: %w", src, err)
			return
		}
		gated := map[string]string{"bpf": "CAP_BPF", "perf_event_open": "CAP_PERFMON"}
		rules, _ := prof["syscalls"].([]any)
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			names, _ := rule["names"].([]any)
			kept := names[:0]
			for _, n := range names {
				// The rule that denies them without CAP_SYS_ADMIN goes; the
				// profile's default action denies them without either cap.
				if _, ok := gated[fmt.Sprint(n)]; ok && rule["action"] != "SCMP_ACT_ALLOW" {
					continue
				}
				kept = append(kept, n)
			}
			rule["names"] = kept
		}
		for name, capName := range gated {
			rules = append(rules, map[string]any{"names": []string{name}, "action": "SCMP_ACT_ALLOW", "includes": map[string]any{"caps": []string{capName}}})
		}
		prof["syscalls"] = rules
		out, err := json.Marshal(prof)
		if err != nil {
			seccompErr = err
			return
		}
		f, err := os.CreateTemp("", "inferwatch-seccomp-*.json")
		if err != nil {
			seccompErr = err
			return
		}
		defer f.Close()
		if _, err := f.Write(out); err != nil {
			seccompErr = err
			return
		}
		seccompFile = f.Name()
	})
	if seccompErr != nil {
		t.Fatal(seccompErr)
	}
	return seccompFile
}

// downward is what the kubelet's downward API gives a container in this
// test: pod fields, the pod's containers (for their resources) and the
// node's allocatable memory, which a container without a memory limit is
// given as its limits.memory.
type downward struct {
	fields      map[string]string
	containers  []corev1.Container
	allocatable resource.Quantity
}

// envOf resolves a container's environment the way the kubelet does.
func envOf(t *testing.T, env []corev1.EnvVar, api downward) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			v, ok := api.fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s reads field %s, which this test does not provide", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			out[e.Name] = v
		case e.ValueFrom.ResourceFieldRef != nil:
			r := e.ValueFrom.ResourceFieldRef
			i := slices.IndexFunc(api.containers, func(c corev1.Container) bool { return c.Name == r.ContainerName })
			if i < 0 || r.Resource != "limits.memory" || (!r.Divisor.IsZero() && r.Divisor.Value() != 1) {
				t.Fatalf("env %s: resource %s of container %q (divisor %v), which this test does not provide", e.Name, r.Resource, r.ContainerName, r.Divisor)
			}
			v := api.allocatable
			if l, ok := api.containers[i].Resources.Limits[corev1.ResourceMemory]; ok {
				v = l
			}
			out[e.Name] = strconv.FormatInt(v.Value(), 10)
		default:
			t.Fatalf("env %s: a source this test does not provide: %+v", e.Name, e.ValueFrom)
		}
	}
	return out
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) in args with VAR's value where VAR is defined, as
// the kubelet does with a container's args.
func expand(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	return out
}

func envFlags(env map[string]string) []string {
	var flags []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		flags = append(flags, "-e", k+"="+env[k])
	}
	return flags
}

// mountFlags are the container's volume mounts of hostPath volumes, as
// podman bind mounts; the test fails on a volume of another kind.
func mountFlags(t *testing.T, c corev1.Container, volumes map[string]corev1.Volume) []string {
	t.Helper()
	var flags []string
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok || v.HostPath == nil {
			t.Fatalf("volume mount %s: not a hostPath volume the patch adds (%+v)", m.Name, v)
		}
		if v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectory {
			if fi, err := os.Stat(v.HostPath.Path); err != nil || !fi.IsDir() {
				t.Fatalf("hostPath %s is type Directory: the kubelet would not start the pod on a node without it (%v)", v.HostPath.Path, err)
			}
		}
		spec := v.HostPath.Path + ":" + m.MountPath
		if m.ReadOnly {
			spec += ":ro"
		}
		// IfPossible falls back to a plain read-only bind where the
		// runtime cannot make submounts read-only (podman 4's -v cannot).
		if rro := m.RecursiveReadOnly; rro != nil && *rro == corev1.RecursiveReadOnlyEnabled {
			t.Fatalf("volume mount %s: recursiveReadOnly Enabled, which this test cannot provide", m.Name)
		}
		flags = append(flags, "-v", spec)
	}
	return flags
}

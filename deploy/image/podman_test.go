package image

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

var (
	buildOnce sync.Once
	built     string // the test image's name once built, removed by TestMain
	buildErr  error
	seq       atomic.Int64
)

// podman runs the podman CLI.
type podman struct {
	bin    string
	global []string // flags before the subcommand
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	p := &podman{bin: testenv.RequireBinary(t, "podman")}
	// crun, podman's default runtime on Debian 12, refuses a hybrid cgroup
	// layout (v1 controllers beside a v2 mount, as on CI's VMs); runc runs
	// there. INFERWATCH_OCI_RUNTIME names another.
	if rt := os.Getenv("INFERWATCH_OCI_RUNTIME"); rt != "" {
		p.global = []string{"--runtime", rt}
	} else if _, err := exec.LookPath("runc"); err == nil {
		p.global = []string{"--runtime", "runc"}
	}
	return p
}

func (p *podman) cmd(args ...string) (string, error) {
	out, err := exec.Command(p.bin, append(slices.Clone(p.global), args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// image builds the image once per test binary, as a user would:
// scripts/image.sh, on a base made from this machine's files (no registry
// is reachable here).
func (p *podman) image(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		name := fmt.Sprintf("localhost/inferwatch-test:%d", os.Getpid())
		cmd := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), "--base-from-host", "-t", name)
		cmd.Env = append(os.Environ(), "CONTAINER_TOOL="+p.bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("scripts/image.sh: %w\n%s", err, out)
			return
		}
		built = name
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// limits keep podman from raising a container's RLIMIT_NOFILE and
// RLIMIT_NPROC (to 2^20 and more, as root): a sandboxed VM such as CI's
// refuses raising them, lowering is always allowed, and these containers
// need few.
var limits = []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}

// container is one started container, removed when its test ends (its
// log printed if the test failed).
type container struct {
	p    *podman
	name string
}

func (p *podman) start(t *testing.T, flags []string, image string, args ...string) *container {
	t.Helper()
	c := &container{p: p, name: fmt.Sprintf("iw-test-%d-%d", os.Getpid(), seq.Add(1))}
	all := append([]string{"run", "-d", "--name", c.name}, limits...)
	all = append(append(append(all, flags...), image), args...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.cmd("logs", c.name)
			t.Logf("%s (%s) log:\n%s", c.name, strings.Join(args, " "), logs)
		}
		_, _ = p.cmd("rm", "-f", "-t", "2", c.name)
	})
	if _, err := p.cmd(all...); err != nil {
		t.Fatal(err)
	}
	return c
}

// published is the loopback address the container's port is published on.
func (c *container) published(t *testing.T, port int32) string {
	t.Helper()
	out, err := c.p.cmd("port", c.name, fmt.Sprintf("%d/tcp", port))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.Split(out, "\n")[0])
}

func (c *container) ip(t *testing.T) string {
	t.Helper()
	out, err := c.p.cmd("inspect", "-f", "{{.NetworkSettings.IPAddress}}", c.name)
	if err != nil || net.ParseIP(out) == nil {
		t.Fatalf("container %s has no IP address (%q): %v", c.name, out, err)
	}
	return out
}

package main

// End-to-end tests of the real binary: TestMain builds it once, each test
// starts `inferwatch proxy` (and `inferwatch modelserver` or an upstream of
// its own) as processes on 127.0.0.1, talks to them as clients would, and
// kills whatever is left in t.Cleanup.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/exposition"
)

// binPath is the inferwatch binary TestMain built.
var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "inferwatch-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "inferwatch")
	// The ext_proc server and the injector are binaries of their own, which
	// `inferwatch extproc|inject` runs from the same directory. All three
	// are built as they ship (scripts/build.sh: its tags and flags).
	build := exec.Command("../../scripts/build.sh", dir, "./cmd/inferwatch", "./cmd/inferwatch-extproc", "./cmd/inferwatch-inject")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running inferwatch process whose stderr (its log) is kept
// line by line.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process was waited for

	mu    sync.Mutex
	lines []string
	err   error // from Wait, valid after done
}

// start runs the binary with args. The process is killed, if still running,
// when the test ends; its log is printed when the test failed.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startBin(t, name, binPath, args...)
}

// startBin is start with another binary (e.g. ip netns exec, running ours).
func startBin(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		err := p.cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				t.Errorf("%s (pid %d) did not go away after SIGKILL", name, p.cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.log())
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// wait waits for the process to exit and returns its exit code; it fails the
// test if that takes longer than timeout.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %v", p.name, timeout)
	}
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	p.t.Fatalf("%s: wait: %v", p.name, err)
	return -1
}

// waitLine waits for a log line matching re and returns its submatches. It
// fails the test when the process exits first or timeout passes.
func (p *proc) waitLine(re *regexp.Regexp, timeout time.Duration) []string {
	p.t.Helper()
	m, err := p.findLine(re, timeout)
	if err != nil {
		p.t.Fatalf("%s %v:\n%s", p.name, err, p.log())
	}
	return m
}

// findLine waits for a log line matching re and returns its submatches, or
// an error when the process exits first or timeout passes.
func (p *proc) findLine(re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	seen := 0
	for {
		// Read done before the lines: once it is closed every line is in.
		exited := p.exited()
		p.mu.Lock()
		lines := p.lines[seen:]
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				return m, nil
			}
		}
		if exited {
			return nil, fmt.Errorf("exited before logging %q", re)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("did not log %q within %v", re, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var (
	routeLine = regexp.MustCompile(`msg=proxying route=(\S+) protocol=(\S+) listen=(\S+) upstream=(\S+)`)
	adminLine = regexp.MustCompile(`msg="admin endpoints" url=http://(\S+)/`)
	msLine    = regexp.MustCompile(`msg="model server" grpc=(\S+) http=(\S+)`)
)

// sidecarProc is a started `inferwatch proxy` with the addresses it bound.
type sidecarProc struct {
	*proc
	grpcAddr, httpAddr string // route listen addresses ("" when absent)
	admin              string // admin host:port
}

// startProxy runs `inferwatch proxy args...` and waits until it logged its
// bound addresses. Listen addresses may be 127.0.0.1:0.
func startProxy(t *testing.T, args ...string) *sidecarProc {
	t.Helper()
	p := start(t, "proxy", append([]string{"proxy"}, args...)...)
	s := &sidecarProc{proc: p}
	s.admin = p.waitLine(adminLine, 10*time.Second)[1]
	// The route lines come before the admin line.
	for _, l := range strings.Split(p.log(), "\n") {
		if m := routeLine.FindStringSubmatch(l); m != nil {
			switch m[2] {
			case "grpc":
				s.grpcAddr = m[3]
			case "http":
				s.httpAddr = m[3]
			}
		}
	}
	return s
}

// startModelServerProc runs `inferwatch modelserver` on the given addresses
// (127.0.0.1:0 allowed) and returns the bound gRPC and HTTP addresses.
func startModelServerProc(t *testing.T, grpcListen, httpListen string, extra ...string) (p *proc, grpcAddr, httpAddr string) {
	t.Helper()
	p = start(t, "modelserver", append([]string{"modelserver", "--grpc-listen", grpcListen, "--http-listen", httpListen}, extra...)...)
	m := p.waitLine(msLine, 10*time.Second)
	return p, m[1], m[2]
}

// adminGet fetches an admin path and returns its status and body.
func (s *sidecarProc) adminGet(t *testing.T, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	res, err := c.Get("http://" + s.admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", path, err)
	}
	return res.StatusCode, string(b)
}

// waitReady waits until /readyz answers 200.
func (s *sidecarProc) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body := s.adminGet(t, "/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after %v", code, strings.TrimSpace(body), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// parseMetrics reads the text exposition; it fails the test on a line it
// cannot read, so a malformed /metrics fails too.
func parseMetrics(t *testing.T, text string) exposition.Page {
	t.Helper()
	p, err := exposition.Parse(text)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return p
}

// procMemory reads VmRSS and VmHWM (bytes) of a process.
func procMemory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%s: unexpected %q", key, val)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if key == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, errors.New("no VmRSS/VmHWM in /proc status")
	}
	return rss, hwm, nil
}

// refused reports whether a TCP connection to addr is refused now.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// listenLocal listens on a fresh 127.0.0.1 port.
func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const mib = 1 << 20

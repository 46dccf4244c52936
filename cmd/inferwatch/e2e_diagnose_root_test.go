package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/diagnosis"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

// cpuCgroup is a test cgroup with the cpu controller and how to set its
// CFS quota.
type cpuCgroup struct {
	dir, root string
	v2        bool
}

// setQuota limits the cgroup to quota of CPU time per period.
func (c cpuCgroup) setQuota(quota, period time.Duration) error {
	if c.v2 {
		return os.WriteFile(filepath.Join(c.dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota.Microseconds(), period.Microseconds()), 0)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "cpu.cfs_period_us"), fmt.Appendf(nil, "%d", period.Microseconds()), 0); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "cpu.cfs_quota_us"), fmt.Appendf(nil, "%d", quota.Microseconds()), 0)
}

// testCgroup makes a child cgroup with the cpu controller: cgroup v2's
// where the v2 hierarchy has it (at /sys/fs/cgroup or, on a hybrid host,
// /sys/fs/cgroup/unified), else the v1 cpu hierarchy's. It is removed (its
// processes moved back to the root) when the test ends.
func testCgroup(t *testing.T) cpuCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a cgroup CPU quota needs root")
	}
	var c cpuCgroup
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		ctl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err == nil && strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " cpu ") {
			c = cpuCgroup{root: root, v2: true}
			break
		}
	}
	if c.root == "" {
		for _, root := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
			if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err == nil {
				c.root = root
				break
			}
		}
	}
	if c.root == "" {
		testenv.Unavailable(t, "no cgroup hierarchy with the cpu controller")
	}
	if c.v2 {
		sub, _ := os.ReadFile(filepath.Join(c.root, "cgroup.subtree_control"))
		if !strings.Contains(" "+strings.TrimSpace(string(sub))+" ", " cpu ") {
			if err := os.WriteFile(filepath.Join(c.root, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
				testenv.Unavailable(t, "enabling the cpu controller for children: %v", err)
			}
		}
	}
	c.dir = filepath.Join(c.root, fmt.Sprintf("inferwatch-diagnose-%d", os.Getpid()))
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		t.Fatalf("cgroup: %v", err)
	}
	t.Logf("test cgroup %s (v2: %v)", c.dir, c.v2)
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(c.root, "cgroup.procs"), []byte(pid), 0)
			}
		}
		for range 50 {
			if err := os.Remove(c.dir); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", c.dir)
	})
	return c
}

// TestE2EDiagnoseCgroupThrottling runs the model server in a cgroup of its
// own behind `inferwatch proxy`, with load, and after a baseline sets a real
// CFS CPU quota on it (cgroup v2's cpu.max, or v1's cpu.cfs_quota_us where
// the cpu controller is bound to v1, as on a hybrid host): the report's top cause must be
// cpu_throttling.
func TestE2EDiagnoseCgroupThrottling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for half a minute")
	}
	cg := testCgroup(t)
	ms, msGRPC, _ := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0")
	if err := os.WriteFile(filepath.Join(cg.dir, "cgroup.procs"), []byte(strconv.Itoa(ms.pid())), 0); err != nil {
		t.Fatalf("moving the model server into %s: %v", cg.dir, err)
	}
	sc := startProxy(t, "--grpc-listen", "127.0.0.1:0", "--grpc-upstream", msGRPC, "--admin-listen", "127.0.0.1:0", "--window", "1s", "--no-triton-stats")
	sc.waitReady(t, 10*time.Second)
	start(t, "load", "load", "--addr", sc.grpcAddr, "--qps", "100", "--duration", "60s")
	time.Sleep(15 * time.Second) // the baseline
	fault := time.Now()
	// 5 ms of CPU per 100 ms period: the model's compute no longer fits.
	if err := cg.setQuota(5*time.Millisecond, 100*time.Millisecond); err != nil {
		t.Fatalf("CPU quota: %v", err)
	}
	right := func(c diagnosis.Cause) bool { return c.Name == diagnosis.CauseThrottling }
	last := awaitReport(t, sc.admin, fault.UTC().Format(time.RFC3339), fault.Add(30*time.Second), right)
	wantCause(t, last, right, strconv.Quote(diagnosis.CauseThrottling), "cgroup cpu quota", fault)
}

// run runs a command, failing the test with its output.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// TestE2EDiagnoseSlowNetwork runs the model server in a network namespace
// the test makes, reached over a veth pair, behind `inferwatch proxy` on
// the host; after a baseline, tc netem delays the host side of the pair: the
// report's top cause must be the network, in the upstream's network part.
func TestE2EDiagnoseSlowNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for half a minute")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "network namespaces and tc need root")
	}
	ipBin := testenv.RequireBinary(t, "ip")
	tcBin := testenv.RequireBinary(t, "tc")
	id := os.Getpid() % 200
	ns := fmt.Sprintf("iwdiag%d", os.Getpid())
	host, peer := fmt.Sprintf("iwd%dh", id), fmt.Sprintf("iwd%dn", id)
	hostIP, nsIP := fmt.Sprintf("10.213.%d.1", id), fmt.Sprintf("10.213.%d.2", id)
	run(t, ipBin, "netns", "add", ns)
	t.Cleanup(func() { exec.Command(ipBin, "netns", "del", ns).Run() })
	run(t, ipBin, "link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command(ipBin, "link", "del", host).Run() })
	run(t, ipBin, "link", "set", peer, "netns", ns)
	run(t, ipBin, "addr", "add", hostIP+"/24", "dev", host)
	run(t, ipBin, "link", "set", host, "up")
	run(t, ipBin, "-n", ns, "addr", "add", nsIP+"/24", "dev", peer)
	run(t, ipBin, "-n", ns, "link", "set", peer, "up")
	run(t, ipBin, "-n", ns, "link", "set", "lo", "up")

	ms := startBin(t, "modelserver", ipBin, "netns", "exec", ns, binPath, "modelserver", "--grpc-listen", nsIP+":0", "--http-listen", nsIP+":0")
	m := ms.waitLine(msLine, 10*time.Second)
	sc := startProxy(t, "--grpc-listen", "127.0.0.1:0", "--grpc-upstream", m[1], "--admin-listen", "127.0.0.1:0", "--window", "1s", "--no-triton-stats")
	sc.waitReady(t, 10*time.Second)
	// 20 calls/s of ~3.3 KB requests: 0.5 Mbit/s, half the token bucket's
	// rate below, so each request pays its serialisation (~26 ms) without a
	// queue that grows without bound.
	start(t, "load", "load", "--addr", sc.grpcAddr, "--qps", "20", "--duration", "60s")
	time.Sleep(15 * time.Second) // the baseline
	fault := time.Now()
	// netem's delay where the kernel has it; else (a kernel without
	// sch_netem, as on the development machine) a token bucket whose
	// serialisation delay the requests pay on the way to the upstream.
	faultName := "tc netem delay 15ms to the upstream"
	if out, err := exec.Command(tcBin, "qdisc", "add", "dev", host, "root", "netem", "delay", "15ms").CombinedOutput(); err != nil {
		t.Logf("no netem (%v: %s); a tbf rate limit instead", err, strings.TrimSpace(string(out)))
		run(t, tcBin, "qdisc", "add", "dev", host, "root", "tbf", "rate", "1mbit", "burst", "2kb", "latency", "500ms")
		faultName = "tc tbf 1mbit to the upstream"
	}
	right := func(c diagnosis.Cause) bool { return c.Name == diagnosis.CauseNetwork && c.Phase == "upstream network" }
	last := awaitReport(t, sc.admin, fault.UTC().Format(time.RFC3339), fault.Add(30*time.Second), right)
	wantCause(t, last, right, strconv.Quote(diagnosis.CauseNetwork)+" in the upstream network", faultName, fault)
}

// memoryCgroupDir makes a child cgroup with the memory controller limited
// to limit bytes without swap (v2 where the v2 hierarchy has the
// controller, else v1's), removed when the test ends.
func memoryCgroupDir(t *testing.T, limit int64) string {
	t.Helper()
	files, root := map[string]string{}, ""
	var order []string
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		ctl, err := os.ReadFile(filepath.Join(r, "cgroup.controllers"))
		if err == nil && strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
			_ = os.WriteFile(filepath.Join(r, "cgroup.subtree_control"), []byte("+memory"), 0)
			root, order = r, []string{"memory.max", "memory.swap.max"}
			files["memory.max"], files["memory.swap.max"] = strconv.FormatInt(limit, 10), "0"
			break
		}
	}
	if root == "" {
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
			testenv.Unavailable(t, "no cgroup hierarchy with the memory controller")
		}
		root, order = "/sys/fs/cgroup/memory", []string{"memory.limit_in_bytes"}
		files["memory.limit_in_bytes"] = strconv.FormatInt(limit, 10)
		if _, err := os.Stat(filepath.Join(root, "memory.memsw.limit_in_bytes")); err == nil {
			order = append(order, "memory.memsw.limit_in_bytes")
			files["memory.memsw.limit_in_bytes"] = files["memory.limit_in_bytes"]
		}
	}
	dir := filepath.Join(root, fmt.Sprintf("inferwatch-diagnose-oom-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("cgroup: %v", err)
	}
	t.Cleanup(func() {
		for range 50 {
			if err := os.Remove(dir); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})
	for _, f := range order {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(files[f]), 0); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	t.Logf("memory cgroup %s, limit %d bytes", dir, limit)
	return dir
}

// TestE2EDiagnoseOOMKill runs the leaking model server in a memory cgroup
// of its own behind `inferwatch proxy`, with load, until the OOM killer
// takes it: the report's top cause must be oom_kill of the upstream.
func TestE2EDiagnoseOOMKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for half a minute")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "memory cgroups and the OOM probe need root")
	}
	cg := memoryCgroupDir(t, 160<<20)
	ms, msGRPC, _ := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0", "--inject-leak", "6MiB")
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(ms.pid())), 0); err != nil {
		t.Fatalf("moving the model server into %s: %v", cg, err)
	}
	sc := startProxy(t, "--grpc-listen", "127.0.0.1:0", "--grpc-upstream", msGRPC, "--admin-listen", "127.0.0.1:0", "--window", "1s", "--no-triton-stats")
	sc.waitReady(t, 10*time.Second)
	start(t, "load", "load", "--addr", sc.grpcAddr, "--qps", "100", "--duration", "90s")
	select {
	case <-ms.done:
	case <-time.After(75 * time.Second):
		t.Fatal("the model server was not OOM-killed within 75s")
	}
	fault := time.Now()
	t.Logf("model server exited: %v", ms.err)
	right := func(c diagnosis.Cause) bool {
		return c.Name == diagnosis.CauseOOMKill && c.Evidence["upstream_kills"] > 0
	}
	last := awaitReport(t, sc.admin, fault.Add(-3*time.Second).UTC().Format(time.RFC3339), fault.Add(20*time.Second), right)
	wantCause(t, last, right, strconv.Quote(diagnosis.CauseOOMKill)+" of the upstream", "OOM kill in a memory cgroup", fault)
}

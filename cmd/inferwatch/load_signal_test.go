package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/demo/modelserver"
)

// TestLoadInterrupted: Ctrl-C ends `inferwatch load` as its --duration
// would: no more calls, those in flight finish, the summary is printed and
// the status is 0. It used to kill the process with no summary at all, so
// a run without --duration (or a long one) told nothing.
func TestLoadInterrupted(t *testing.T) {
	ms, err := startModelServer(modelserver.Options{Workers: 4}, "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ms.stop()
	ms.SetExtraLatency(20 * time.Millisecond) // calls in flight when the signal comes
	var out, errOut bytes.Buffer
	cmd := exec.Command(binPath, "load", "--addr", ms.grpcAddr, "--qps", "200", "--duration", "0")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("load still running 10s after SIGINT")
	}
	if err != nil {
		t.Errorf("load after SIGINT: %v; stderr %q", err, errOut.String())
	}
	m := regexp.MustCompile(`^sent (\d+) ok (\d+) failed 0 late \d+ `).FindStringSubmatch(out.String())
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("summary %q, want every sent call OK (in-flight calls finished, not cancelled)", out.String())
	}
}

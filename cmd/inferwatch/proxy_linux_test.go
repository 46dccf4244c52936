package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestProxyExitsWithErrorWhenListenerFails runs the proxy in this process
// and breaks its route's listening socket underneath it (shutdown(2), after
// which accept fails for good): the listener stops on its own, so
// runProxy must drain and return an error — a non-zero exit, which a
// supervisor restarts — not nil, exit 0, as after a SIGTERM.
func TestProxyExitsWithErrorWhenListenerFails(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runProxy([]string{"--http-listen", "127.0.0.1:0", "--http-upstream", "127.0.0.1:1",
			"--admin-listen", "127.0.0.1:0", "--no-triton-stats", "--readiness", "none",
			"--no-gpu", "--no-bpf", "--no-tracing", "--drain-timeout", "1s"}, pw)
		pw.Close()
	}()
	listenRe := regexp.MustCompile(`msg=proxying .* listen=127\.0\.0\.1:(\d+)`)
	lines := bufio.NewScanner(pr)
	port := 0
	for port == 0 && lines.Scan() {
		if m := listenRe.FindStringSubmatch(lines.Text()); m != nil {
			port, _ = strconv.Atoi(m[1])
		}
	}
	if port == 0 {
		t.Fatalf("no route address in the log; runProxy: %v", <-done)
	}
	go io.Copy(io.Discard, pr)
	fd := listeningFD(t, port)
	if err := syscall.Shutdown(fd, syscall.SHUT_RD); err != nil {
		t.Fatalf("shutdown(2) of the listening socket: %v", err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("runProxy returned nil (exit 0) after its listener failed")
		}
		t.Logf("runProxy: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runProxy still running 10s after its only listener failed")
	}
}

// listeningFD finds this process's descriptor listening on 127.0.0.1:port.
func listeningFD(t *testing.T, port int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); len(l) < 7 || l[:7] != "socket:" {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		if in, ok := sa.(*syscall.SockaddrInet4); ok && in.Port == port && net.IP(in.Addr[:]).IsLoopback() {
			if v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err == nil && v == 1 {
				return fd
			}
		}
	}
	t.Fatalf("no descriptor listens on 127.0.0.1:%d", port)
	return -1
}

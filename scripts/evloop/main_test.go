//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

func TestFrame(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		request bool
		total   int
		ok      bool
		err     bool
	}{
		{"head only, no length", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", true, 27, true, false},
		{"incomplete head", "GET / HTTP/1.1\r\nHost: a\r\n", true, 0, false, false},
		{"body complete", "POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc", true, 41, true, false},
		{"body short", "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc", true, 43, false, false},
		{"next message after", "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\naGET", true, 39, true, false},
		{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", true, 0, false, true},
		{"bad length", "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", true, 0, false, true},
		{"response without length", "HTTP/1.1 200 OK\r\n\r\n", false, 0, false, true},
		{"response", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 40, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			total, ok, err := frame([]byte(tc.in), tc.request)
			if (err != nil) != tc.err || ok != tc.ok || (ok && total != tc.total) {
				t.Fatalf("frame = %d, %v, %v; want %d, %v, error %v", total, ok, err, tc.total, tc.ok, tc.err)
			}
		})
	}
}

// TestForwards runs each mode against a real HTTP server and checks that
// requests of every size come back byte for byte over kept-alive
// connections, several clients at once.
func TestForwards(t *testing.T) {
	for _, tc := range []struct {
		mode string
		run  func(listen, upstream string) error
	}{
		{"loop", func(l, u string) error { return run(l, u, true) }},
		{"loop, blocking wait only", func(l, u string) error { return run(l, u, false) }},
		{"goroutines", runGoroutines},
		{"uring", func(l, u string) error { return runURing(l, u, true, true) }},
		{"uring, a completion per send", func(l, u string) error { return runURing(l, u, true, false) }},
		{"uring, cooperative task work", func(l, u string) error { return runURing(l, u, false, true) }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if strings.HasPrefix(tc.mode, "uring") {
				requireURing(t)
			}
			forwards(t, tc.run)
		})
	}
}

// requireURing skips (fails under CI) where io_uring is switched off, as
// container runtimes' default seccomp profiles and kernel.io_uring_disabled
// can do.
func requireURing(t *testing.T) {
	var p uringParams
	fd, _, e := syscall.Syscall(sysIOUringSetup, 4, uintptr(unsafe.Pointer(&p)), 0)
	switch e {
	case 0:
		syscall.Close(int(fd))
	case syscall.ENOSYS, syscall.EPERM, syscall.EACCES:
		testenv.Unavailable(t, "io_uring: %v", e)
	default:
		t.Fatalf("io_uring_setup: %v", e)
	}
}

func forwards(t *testing.T, start func(listen, upstream string) error) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		// evloop frames by Content-Length only (net/http would chunk a
		// large body without it).
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}))
	defer up.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	errc := make(chan error, 1)
	go func() { errc <- start(addr, strings.TrimPrefix(up.URL, "http://")) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("run: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("evloop does not listen on %s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	sizes := []int{0, 1, 4095, 4096, 70000, 1 << 20}
	done := make(chan error, 4)
	for w := range 4 {
		go func() {
			for i := range 25 {
				n := sizes[(w+i)%len(sizes)]
				body := bytes.Repeat([]byte{byte('a' + w), byte(i)}, n/2+1)[:n]
				path := fmt.Sprintf("/w%d/%d", w, i)
				res, err := cl.Post("http://"+addr+path, "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					done <- fmt.Errorf("%s: %w", path, err)
					return
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || !bytes.Equal(got, body) || res.Header.Get("X-Path") != path {
					done <- fmt.Errorf("%s: %d bytes back (want %d), X-Path %q, err %v", path, len(got), n, res.Header.Get("X-Path"), err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

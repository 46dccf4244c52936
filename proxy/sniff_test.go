package proxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		in         string
		h2, http1  bool
		prefaceErr bool
	}{
		{in: clientPreface + "\x00\x00", h2: true},
		{in: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", http1: true},
		{in: "GET / HTTP/1.0\r\n\r\n", http1: true},
		{in: "POST /v2/models/m/infer HTTP/1.1\r\n", http1: true},
		{in: "INVALID CONNECTION PREFACE\r\n\r\n"},
		{in: "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"},
		{in: "GET / HTTP/2.0\r\n"},
		{in: "GET /\r\n"},
		{in: "GET / HTTP/1.1", prefaceErr: false}, // no line end before EOF
		// RFC 9112 §2.2: empty lines before the request line are ignored.
		{in: "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", http1: true},
		{in: "\nGET / HTTP/1.1\r\n", http1: true},
		{in: "\r\n\r\n\r\n\r\nPOST /x HTTP/1.1\r\n", http1: true},
		{in: "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n"}, // too many
		{in: "\r\nGET /\r\n"},
		{in: "\r\n"},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.in), 4096)
		h2, err := hasPreface(br)
		if err != nil {
			if !tc.prefaceErr && tc.h2 {
				t.Errorf("%q: preface: %v", tc.in, err)
			}
			continue
		}
		if h2 != tc.h2 {
			t.Errorf("%q: preface %v, want %v", tc.in, h2, tc.h2)
		}
		if h2 {
			continue
		}
		if got := http1RequestLine(br); got != tc.http1 {
			t.Errorf("%q: HTTP/1 request line %v, want %v", tc.in, got, tc.http1)
		}
		// Sniffing consumed nothing: the whole input is still there.
		if b, _ := br.Peek(len(tc.in)); string(b) != tc.in {
			t.Errorf("%q: sniffing consumed input, %q left", tc.in, b)
		}
	}
}

// TestSniffedConnDescriptor: the sniffing wrapper hands on the TCP
// connection's descriptor (the HTTP/1.1 loop's hangup poller watches it)
// and says how many sniffed bytes it still holds, which the socket no
// longer does.
func TestSniffedConnDescriptor(t *testing.T) {
	l := listen(t)
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			io.WriteString(c, "GET / HTTP/1.1\r\n")
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReaderSize(newRawConn(c), 4096)
	if _, err := br.Peek(16); err != nil {
		t.Fatal(err)
	}
	sc := &sniffedConn{Conn: newRawConn(c), r: br}
	if sc.Buffered() != 16 {
		t.Errorf("Buffered %d, want 16", sc.Buffered())
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	if err := rc.Control(func(f uintptr) { fd = f }); err != nil || fd == 0 {
		t.Errorf("Control: fd %d, %v", fd, err)
	}
	if _, err := (&sniffedConn{Conn: opaque{c}, r: br}).SyscallConn(); err == nil {
		t.Error("a wrapped connection without a descriptor gave one")
	}
}

type opaque struct{ net.Conn }

// TestSniffedConnCloseWrite: the planes' lingering closes shut the write
// side through the sniffed connection; one without CloseWrite says so.
func TestSniffedConnCloseWrite(t *testing.T) {
	l := listen(t)
	got := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c) // ends at the FIN
		if err == nil && string(b) != "bye" {
			err = io.ErrUnexpectedEOF
		}
		got <- err
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := &sniffedConn{Conn: newRawConn(c), r: bufio.NewReader(c)}
	io.WriteString(sc, "bye")
	if err := sc.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	if err := <-got; err != nil {
		t.Errorf("client read: %v, want \"bye\" then EOF", err)
	}
	if err := (&sniffedConn{Conn: opaque{c}}).CloseWrite(); err == nil {
		t.Error("a wrapped connection without CloseWrite shut its write side")
	}
}

// failOnce is a listener whose first Accept fails with err.
type failOnce struct {
	net.Listener
	err    error
	failed bool
}

func (l *failOnce) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, l.err
	}
	return l.Listener.Accept()
}

// TestSniffListenerOutlivesEMFILE: running out of descriptors for a moment
// (a burst of connections over the process's limit) fails one accept; the
// frame plane's listener must go on accepting once descriptors are free,
// as net/http's own accept loop does, not stay dead with the route's
// clients queueing in the kernel's backlog and /readyz still saying ready.
func TestSniffListenerOutlivesEMFILE(t *testing.T) {
	nl := listen(t)
	emfile := &net.OpError{Op: "accept", Net: "tcp", Addr: nl.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	l := newSniffListener(&failOnce{Listener: nl, err: emfile}, nil, nil, nil)
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", nl.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(5 * time.Second)
	}()
	deadline := time.Now().Add(3 * time.Second)
	for {
		c, err := l.Accept()
		if err == nil {
			c.Close()
			return
		}
		// What net/http's Server.Serve does with an accept error.
		//lint:ignore SA1019 net/http's Serve still decides by Temporary, and this mirrors it
		if ne, ok := err.(net.Error); !ok || !ne.Temporary() {
			t.Fatalf("Accept: %v, which ends net/http's Serve", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Accept still fails %v after one EMFILE: %v", 3*time.Second, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

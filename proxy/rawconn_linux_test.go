package proxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rawPair is a TCP connection on loopback: ours wrapped in rawConn, the
// peer a plain net.Conn.
func rawPair(t *testing.T) (*rawConn, net.Conn) {
	t.Helper()
	l := listen(t)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	rc, ok := newRawConn(c).(*rawConn)
	if !ok {
		t.Fatalf("a TCP connection was not wrapped: %T", newRawConn(c))
	}
	t.Cleanup(func() { rc.Close(); peer.Close() })
	return rc, peer
}

// TestRawConnSemantics: the raw reads and writes keep net.Conn's contract
// where the proxy's code depends on it: io.EOF at the peer's close, a
// timeout error at a deadline, net.ErrClosed after Close (also for a read
// blocked at the time), an *net.OpError wrapping the errno when the peer
// reset the connection.
func TestRawConnSemantics(t *testing.T) {
	t.Run("eof", func(t *testing.T) {
		c, peer := rawPair(t)
		peer.Write([]byte("last words"))
		peer.Close()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "last words" {
			t.Fatalf("read %q, %v; want the bytes, then io.EOF", got, err)
		}
		if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("read after EOF: %d, %v", n, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c, _ := rawPair(t)
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 8))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past the deadline: %v, want a timeout", err)
		}
	})
	t.Run("close while reading", func(t *testing.T) {
		c, _ := rawPair(t)
		done := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 8))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // let it block; if not yet, it reads a closed conn: same error
		c.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read interrupted by Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a read blocked at Close did not return")
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after Close: %v, want net.ErrClosed", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		c, peer := rawPair(t)
		peer.(*net.TCPConn).SetLinger(0) // close sends RST
		peer.Close()
		var err error
		for range 100 { // the RST may arrive after the first write
			if _, err = c.Write([]byte("hello")); err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "write" || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
			t.Fatalf("write to a reset connection: %v (%T), want a write *net.OpError with ECONNRESET or EPIPE", err, err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		c, _ := rawPair(t)
		if n, err := c.Read(nil); n != 0 || err != nil {
			t.Fatalf("empty read: %d, %v", n, err)
		}
		if n, err := c.Write(nil); n != 0 || err != nil {
			t.Fatalf("empty write: %d, %v", n, err)
		}
	})
}

// TestRawConnLargeDuplex: 32 MiB each way at once, through socket buffers
// far smaller, so writes end part-way and wait for the peer to read (the
// EAGAIN path): every byte arrives, in order, on both sides.
func TestRawConnLargeDuplex(t *testing.T) {
	c, peer := rawPair(t)
	c.SetWriteBuffer(64 << 10)
	peer.(*net.TCPConn).SetReadBuffer(64 << 10)
	out, in := make([]byte, 32<<20), make([]byte, 32<<20)
	rand.Read(out)
	rand.Read(in)
	var wg sync.WaitGroup
	var gotAtPeer, gotAtRaw []byte
	var errs [4]error
	wg.Go(func() { _, errs[0] = c.Write(out) })
	wg.Go(func() { gotAtPeer, errs[1] = readN(peer, len(out)) })
	wg.Go(func() { _, errs[2] = peer.Write(in) })
	wg.Go(func() { gotAtRaw, errs[3] = readN(c, len(in)) })
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
	}
	if !bytes.Equal(gotAtPeer, out) || !bytes.Equal(gotAtRaw, in) {
		t.Fatal("bytes changed in transit")
	}
}

// readN reads n bytes in the odd sizes a bufio.Reader would ask for.
func readN(r io.Reader, n int) ([]byte, error) {
	got := make([]byte, 0, n)
	buf := make([]byte, 12345)
	for len(got) < n {
		k, err := r.Read(buf[:min(len(buf), n-len(got))])
		got = append(got, buf[:k]...)
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// TestRawConnOnlyTCP: what is not a TCP connection is left as it is.
func TestRawConnOnlyTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := newRawConn(a); got != a {
		t.Fatalf("a pipe was wrapped: %T", got)
	}
}

// TestRawConnWriteBuffers: pieces go out whole and in order, empty ones
// skipped, through a socket buffer far smaller than they are (writev ends
// part-way, inside a piece, and waits); more pieces than the iovecs kept
// are written one by one.
func TestRawConnWriteBuffers(t *testing.T) {
	c, peer := rawPair(t)
	c.SetWriteBuffer(64 << 10)
	peer.(*net.TCPConn).SetReadBuffer(64 << 10)
	big := make([]byte, 8<<20)
	rand.Read(big)
	for _, bufs := range [][][]byte{
		{[]byte("1a2b\r\n"), big, []byte("\r\n")},
		{nil, []byte("x"), {}, big[:3]},
		{[]byte("a"), []byte("b"), []byte("c"), []byte("d"), big[:100000], []byte("e")},
	} {
		want := bytes.Join(bufs, nil)
		var got []byte
		var rerr error
		done := make(chan struct{})
		go func() { got, rerr = readN(peer, len(want)); close(done) }()
		n, err := c.WriteBuffers(bufs...)
		<-done
		if err != nil || rerr != nil || n != int64(len(want)) || !bytes.Equal(got, want) {
			t.Fatalf("%d pieces: wrote %d of %d (%v), peer read %d (%v), same bytes %v", len(bufs), n, len(want), err, len(got), rerr, bytes.Equal(got, want))
		}
	}
	if c.wiovs != nil || c.wiov != ([4]syscall.Iovec{}) {
		t.Fatal("WriteBuffers kept pointers into the written pieces")
	}
	peer.Close()
	for range 100 { // the peer's close reaches the socket after a moment
		if _, err := c.WriteBuffers([]byte("x"), big[:1<<20]); err != nil {
			return
		}
	}
	t.Fatal("writing to a closed peer never failed")
}

// TestRawConnWriteAllocs: a write allocates nothing, whichever way it comes
// (Write's one piece, or the HTTP/1.1 loop's three); every call of the
// frame plane makes a few.
func TestRawConnWriteAllocs(t *testing.T) {
	c, peer := rawPair(t)
	go io.Copy(io.Discard, peer)
	p, line, crlf := make([]byte, 512), []byte("200\r\n"), []byte("\r\n")
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"Write", func() error { _, err := c.Write(p); return err }},
		{"WriteBuffers of three", func() error { _, err := c.WriteBuffers(line, p, crlf); return err }},
	} {
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			if e := tc.write(); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations a write, want 0", tc.name, allocs)
		}
	}
}

// TestIdleClosed: the probe tells an open, quiet connection from one the
// peer closed, reset, or wrote to unasked, and does not consume a byte.
func TestIdleClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peer   func(net.Conn)
		closed bool
	}{
		{"quiet", func(net.Conn) {}, false},
		{"closed", func(c net.Conn) { c.Close() }, true},
		{"reset", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, true},
		{"wrote", func(c net.Conn) { c.Write([]byte("x")) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			tc.peer(p)
			time.Sleep(20 * time.Millisecond) // the FIN, RST or byte arrives
			for _, nc := range []net.Conn{c, newRawConn(c), &closeNotifyConn{Conn: newRawConn(c)}} {
				closed, ok := idleClosed(nc)
				if !ok || closed != tc.closed {
					t.Errorf("%T: closed %v, ok %v; want closed %v", nc, closed, ok, tc.closed)
				}
			}
			if tc.name == "wrote" {
				var b [1]byte
				if n, _ := c.Read(b[:]); n != 1 || b[0] != 'x' {
					t.Error("the probe consumed the byte")
				}
			}
		})
	}
}

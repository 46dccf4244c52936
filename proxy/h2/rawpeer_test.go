package h2_test

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient is a client connection to the forwarder that writes frames as
// told, valid or not.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	fr *http2.Framer
	hb bytes.Buffer
	en *hpack.Encoder
}

// dialRaw connects to the forwarder at addr and sends the client preface
// and SETTINGS (settings; none, empty).
func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return rawOver(t, nc, settings...)
}

// rawOver is dialRaw on a connection the test dialed itself.
func rawOver(t *testing.T, nc net.Conn, settings ...http2.Setting) *rawClient {
	nc.Write([]byte(http2.ClientPreface))
	c := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, bufio.NewReader(nc))}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.en = hpack.NewEncoder(&c.hb)
	c.fr.WriteSettings(settings...)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	return c
}

// block encodes a POST request's header block plus extra name, value pairs.
func (c *rawClient) block(extra ...string) []byte {
	c.hb.Reset()
	fields := append([]string{":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/"}, extra...)
	for i := 0; i < len(fields); i += 2 {
		c.en.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return c.hb.Bytes()
}

// fields encodes name, value pairs alone (trailers, or a header block other
// than block's).
func (c *rawClient) fields(kv ...string) []byte {
	c.hb.Reset()
	for i := 0; i < len(kv); i += 2 {
		c.en.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return c.hb.Bytes()
}

// rawUpstream is an upstream, at the address it returns, scripted by
// onFrame: it takes one connection, reads the client preface, sends
// SETTINGS (settings; none, empty), then hands each frame it reads to
// onFrame with a Framer that writes into a buffer, sent by flush. The
// connection closes once a read fails.
func rawUpstream(t testing.TB, onFrame func(fr *http2.Framer, f http2.Frame, flush func() error), settings ...http2.Setting) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		br.Discard(len(http2.ClientPreface))
		bw := bufio.NewWriter(nc)
		fr := http2.NewFramer(bw, br)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings(settings...)
		bw.Flush()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			onFrame(fr, f, bw.Flush)
		}
	}()
	return l.Addr().String()
}

// hpackBlock encodes name, value pairs with a fresh encoder.
func hpackBlock(kv ...string) []byte {
	var hb bytes.Buffer
	en := hpack.NewEncoder(&hb)
	for i := 0; i < len(kv); i += 2 {
		en.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return hb.Bytes()
}

// rawUpstreams is rawUpstream taking every connection: the i-th (from 0)
// gets settings(i) and its frames go to onFrame(i, ...); ended gets i once
// a read on it failed (the sidecar closed it).
func rawUpstreams(t testing.TB, settings func(i int) []http2.Setting, onFrame func(i int, fr *http2.Framer, f http2.Frame, flush func() error)) (addr string, ended chan int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended = make(chan int, 16)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range conns {
			nc.Close()
		}
	})
	go func() {
		for i := 0; ; i++ {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			go func() {
				br := bufio.NewReader(nc)
				br.Discard(len(http2.ClientPreface))
				bw := bufio.NewWriter(nc)
				fr := http2.NewFramer(bw, br)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				fr.WriteSettings(settings(i)...)
				bw.Flush()
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						ended <- i
						return
					}
					onFrame(i, fr, f, bw.Flush)
				}
			}()
		}
	}()
	return l.Addr().String(), ended
}

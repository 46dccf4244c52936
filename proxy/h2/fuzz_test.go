package h2_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// peer is one raw HTTP/2 endpoint of the fuzz harness (the client, or the
// upstream): it writes the frames the script asks for and records, per
// stream, whether every DATA byte it received carried the tag of the client
// stream it belongs to (the check that no data crosses streams).
type peer struct {
	name string
	nc   net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex
	enc  *hpack.Encoder
	ebuf bytes.Buffer

	mu      sync.Mutex
	owner   map[uint32]byte // upstream: its stream ID -> the client stream's tag
	crossed []string
	done    chan struct{}
	acks    chan [8]byte // barrier PINGs acknowledged
	barrier uint16
}

func newPeer(name string, nc net.Conn) *peer {
	p := &peer{name: name, nc: nc, owner: map[uint32]byte{}, done: make(chan struct{}), acks: make(chan [8]byte, 16)}
	p.fr = http2.NewFramer(nc, bufio.NewReader(nc))
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.ebuf)
	return p
}

// read drains frames until the connection ends, checking DATA tags.
func (p *peer) read(client bool) {
	defer close(p.done)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				continue
			}
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if !client {
				for _, hf := range f.Fields {
					if hf.Name == ":path" && strings.HasPrefix(hf.Value, "/s") {
						n, _ := strconv.Atoi(hf.Value[2:])
						p.mu.Lock()
						p.owner[f.StreamID] = byte(n)
						p.mu.Unlock()
					}
				}
			}
		case *http2.PingFrame:
			if f.IsAck() && string(f.Data[:4]) == "barr" {
				select {
				case p.acks <- f.Data:
				default:
				}
			}
		case *http2.DataFrame:
			want := byte(f.StreamID)
			if !client {
				p.mu.Lock()
				w, ok := p.owner[f.StreamID]
				p.mu.Unlock()
				if !ok {
					p.cross(fmt.Sprintf("DATA on upstream stream %d that no request opened", f.StreamID))
					continue
				}
				want = w
			}
			for _, b := range f.Data() {
				if b != want {
					p.cross(fmt.Sprintf("stream %d got a byte of stream %d", f.StreamID, b))
					break
				}
			}
		}
	}
}

func (p *peer) cross(s string) {
	p.mu.Lock()
	p.crossed = append(p.crossed, p.name+": "+s)
	p.mu.Unlock()
}

func (p *peer) headers(id uint32, end bool, fields ...string) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.ebuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.ebuf.Bytes(), EndStream: end, EndHeaders: true})
}

// sync sends a PING and waits for its acknowledgement: the forwarder
// handles a connection's frames in order, so it has then handled every
// frame p sent before (a stream's dial included). It gives up when the
// connection ends or after a second.
func (p *peer) sync() {
	p.barrier++
	want := [8]byte{'b', 'a', 'r', 'r', 0, 0, byte(p.barrier >> 8), byte(p.barrier)}
	p.write(func(fr *http2.Framer) { fr.WritePing(false, want) })
	timeout := time.After(time.Second)
	for {
		select {
		case got := <-p.acks:
			if got == want {
				return
			}
		case <-p.done:
			return
		case <-timeout:
			return
		}
	}
}

func (p *peer) write(f func(fr *http2.Framer)) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	f(p.fr)
}

// FuzzForwarder drives the forwarder with a script of frames from both
// sides — valid, out of order and malformed — and checks that it does not
// panic, that no DATA byte reaches another stream, and that closing the
// client ends the connection pair without leaking it.
func FuzzForwarder(f *testing.F) {
	f.Add([]byte{0, 1, 10, 8, 9, 1, 11})
	f.Add([]byte{0, 0, 1, 0, 40, 1, 1, 1, 8, 0, 9, 0, 20, 10, 0})
	f.Add([]byte{0, 0, 0, 0, 2, 0, 8, 1, 12, 0, 3, 0, 255})
	f.Add([]byte{5, 200, 0, 0, 1, 0, 255, 0, 7, 3, 0, 9, 9, 1, 50, 14, 1})
	f.Add([]byte{0, 0, 7, 8, 1, 0, 0, 0, 13, 0, 6, 0, 15, 5})
	f.Fuzz(func(t *testing.T, script []byte) {
		up, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer up.Close()
		// Each accepted connection's preface is read and SETTINGS sent at
		// once, as a server does: the forwarder waits for them before
		// the connection takes its first stream.
		type upConn struct {
			c  net.Conn
			br *bufio.Reader
			ok bool
		}
		accepted := make(chan upConn, 4)
		go func() {
			for {
				c, err := up.Accept()
				if err != nil {
					return
				}
				br := bufio.NewReader(c)
				pre := make([]byte, len(http2.ClientPreface))
				c.SetReadDeadline(time.Now().Add(time.Second))
				_, err = io.ReadFull(br, pre)
				c.SetReadDeadline(time.Time{})
				if err == nil {
					fr := http2.NewFramer(c, nil)
					err = fr.WriteSettings()
				}
				accepted <- upConn{c, br, err == nil}
			}
		}()
		var dials atomic.Int32 // connections the forwarder made upstream
		addr, srv := startForwarder(t, up.Addr().String(), nopObserver{}, func(o *h2.Options) {
			dial := o.Dial
			o.Dial = func(ctx context.Context) (net.Conn, error) {
				nc, err := dial(ctx)
				if err == nil {
					dials.Add(1)
				}
				return nc, err
			}
		})
		cc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := newPeer("client", cc)
		io.WriteString(cc, http2.ClientPreface)
		client.write(func(fr *http2.Framer) { fr.WriteSettings() })
		go client.read(true)

		var upstreams []*peer
		taken := 0 // upstream connections accepted
		// upstream takes the connections the forwarder dialled since the
		// last call (each stream opened is synced, so its dial, made while
		// the forwarder handles its HEADERS, is counted by then) and
		// returns the newest.
		upstream := func() *peer {
			for int(dials.Load()) > taken {
				var a upConn
				select {
				case a = <-accepted:
				case <-time.After(2 * time.Second):
					t.Fatal("the forwarder dialled, and no connection was accepted in 2s")
				}
				taken++
				if !a.ok {
					a.c.Close()
					continue
				}
				p := newPeer("upstream", a.c)
				p.fr = http2.NewFramer(a.c, a.br)
				p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				go p.read(false)
				upstreams = append(upstreams, p)
			}
			if len(upstreams) == 0 {
				return nil
			}
			return upstreams[len(upstreams)-1]
		}

		var opened []uint32 // client stream IDs
		next := uint32(1)
		pick := func(b byte) uint32 {
			if len(opened) == 0 {
				return 1
			}
			return opened[int(b)%len(opened)]
		}
		// upPick picks one of p's streams whose request the harness has
		// read, and its client stream's tag; ok false when there is none
		// yet: guessing (stream 1, tag 1) was right only on the first
		// connection, and a later one's stream 1 then got stream 1's
		// bytes on the harness's word, reported as the forwarder crossing
		// streams.
		upPick := func(p *peer, b byte) (id uint32, tag byte, ok bool) {
			p.mu.Lock()
			defer p.mu.Unlock()
			var ids []uint32
			for id := range p.owner {
				ids = append(ids, id)
			}
			if len(ids) == 0 {
				return 0, 0, false
			}
			// Map iteration order is random; pick deterministically.
			min := ids[0]
			for _, id := range ids {
				if id < min {
					min = id
				}
			}
			id = min + 2*uint32(b%8)
			if _, known := p.owner[id]; !known {
				id = min
			}
			return id, p.owner[id], true
		}
		arg := func(i int) byte {
			if i < len(script) {
				return script[i]
			}
			return 0
		}
		for i := 0; i < len(script) && len(opened) < 100; {
			op, a, b := script[i]%16, arg(i+1), arg(i+2)
			i += 3
			switch op {
			case 0: // open a stream
				id := next
				next += 2
				opened = append(opened, id)
				client.headers(id, a%2 == 1, ":method", "POST", ":scheme", "http", ":path", "/s"+strconv.Itoa(int(byte(id))), ":authority", "x", "content-type", "application/grpc")
				client.sync()
				upstream() // a new connection is read from now on, as a server would
			case 1: // DATA, tagged with its stream
				id := pick(a)
				client.write(func(fr *http2.Framer) {
					fr.WriteData(id, b%2 == 1, bytes.Repeat([]byte{byte(id)}, int(b)*40))
				})
			case 2:
				id := pick(a)
				client.write(func(fr *http2.Framer) { fr.WriteRSTStream(id, http2.ErrCode(b%14)) })
			case 3:
				id := uint32(0)
				if a%2 == 1 {
					id = pick(b)
				}
				client.write(func(fr *http2.Framer) { fr.WriteWindowUpdate(id, uint32(b)*1000+1) })
			case 4:
				client.write(func(fr *http2.Framer) { fr.WritePing(a%2 == 1, [8]byte{a, b}) })
			case 5:
				client.write(func(fr *http2.Framer) {
					fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(a) * 1024}, http2.Setting{ID: http2.SettingID(b % 8), Val: uint32(a)})
				})
			case 6: // trailers
				client.headers(pick(a), b%4 != 0, "x-trailer", "v")
			case 7: // a raw frame, whatever it says
				// DATA payload bytes carry the stream's tag, padding
				// lengths included, so the cross-stream check holds.
				id := uint32(b % 8)
				client.write(func(fr *http2.Framer) {
					fr.WriteRawFrame(http2.FrameType(a%12), http2.Flags(b), id, bytes.Repeat([]byte{byte(id)}, int(a%32)))
				})
			case 8, 9, 10, 11, 12, 13, 14, 15:
				p := upstream()
				if p == nil {
					continue
				}
				id, tag, ok := upPick(p, a)
				if !ok && op <= 11 {
					continue // a stream's frame, and no stream known
				}
				switch op {
				case 8: // response headers
					p.headers(id, b%3 == 0, ":status", "200", "content-type", "application/grpc")
				case 9: // response DATA, tagged with the client stream
					p.write(func(fr *http2.Framer) { fr.WriteData(id, b%2 == 1, bytes.Repeat([]byte{tag}, int(b)*40)) })
				case 10: // trailers
					p.headers(id, true, "grpc-status", strconv.Itoa(int(b%17)))
				case 11:
					p.write(func(fr *http2.Framer) { fr.WriteRSTStream(id, http2.ErrCode(b%14)) })
				case 12:
					p.write(func(fr *http2.Framer) { fr.WriteGoAway(id, http2.ErrCode(b%14), nil) })
				case 13:
					wid := uint32(0)
					if b%2 == 1 {
						wid = id
					}
					p.write(func(fr *http2.Framer) { fr.WriteWindowUpdate(wid, uint32(a)*1000+1) })
				case 14:
					p.write(func(fr *http2.Framer) {
						fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(b) * 1024})
					})
				case 15:
					rid := uint32(b % 8)
					p.mu.Lock()
					rtag, known := p.owner[rid]
					p.mu.Unlock()
					if !known && http2.FrameType(a%12) == http2.FrameData {
						continue // whose bytes they would be is not known yet
					}
					p.write(func(fr *http2.Framer) {
						fr.WriteRawFrame(http2.FrameType(a%12), http2.Flags(b), rid, bytes.Repeat([]byte{rtag}, int(b%32)))
					})
				}
			}
		}
		// Let the forwarder handle what both sides sent before the client
		// leaves.
		upstream()
		for _, p := range upstreams {
			p.sync()
		}
		client.sync()
		cc.Close()
		// The forwarder must let go of the client and every upstream.
		for deadline := time.Now().Add(3 * time.Second); srv.Conns() > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the forwarder still holds the client connection 3s after it closed")
			}
		}
		for _, p := range upstreams {
			select {
			case <-p.done:
			case <-time.After(3 * time.Second):
				t.Fatal("the forwarder kept an upstream connection open after its client left")
			}
			p.nc.Close()
			if len(p.crossed) > 0 {
				t.Fatalf("data crossed streams: %v", p.crossed)
			}
		}
		if len(client.crossed) > 0 {
			t.Fatalf("data crossed streams: %v", client.crossed)
		}
	})
}

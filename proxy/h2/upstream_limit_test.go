package h2_test

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// TestUpstreamLimitCountsOpenStreams: an upstream allowing one stream at a
// time answers stream 1 in full; its response still waits for the client's
// window, but the upstream has closed the stream. A second stream must go
// upstream, not be refused by the sidecar for a limit it is not at.
func TestUpstreamLimitCountsOpenStreams(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	upHeaders := make(chan uint32, 4)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		br.Discard(len(http2.ClientPreface))
		fr := http2.NewFramer(nc, br)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				upHeaders <- f.StreamID
				if f.StreamID == 1 {
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
					fr.WriteData(1, true, make([]byte, 1000))
				}
			}
		}
	}()
	addr, _ := startForwarder(t, l.Addr().String(), nopObserver{})

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(nc, bufio.NewReader(nc))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}) // stream 1's response waits
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})

	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	firstData := make(chan struct{})
	resets := make(chan *http2.RSTStreamFrame, 4)
	go func() {
		seen := false
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				if f.StreamID == 1 && !seen {
					seen = true
					close(firstData)
				}
			case *http2.RSTStreamFrame:
				resets <- f
			}
		}
	}()
	select {
	case <-firstData:
	case <-time.After(5 * time.Second):
		t.Fatal("no response DATA on stream 1")
	}
	if id := <-upHeaders; id != 1 {
		t.Fatalf("upstream saw stream %d first", id)
	}
	// The upstream sent stream 1's END_STREAM before that DATA reached the
	// client: the sidecar forwards its frames in order.
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndStream: true, EndHeaders: true})
	select {
	case <-upHeaders:
	case f := <-resets:
		t.Fatalf("stream %d reset %v; the upstream had no stream open", f.StreamID, f.ErrCode)
	case <-time.After(5 * time.Second):
		t.Fatal("stream 3 never reached the upstream")
	}
}

// TestOversizedResponseHeadersNotTruncated: a response header block over
// the header list size the sidecar advertised upstream cannot be forwarded
// whole; it must not be forwarded with its tail (here grpc-status) cut off
// as if that were the response, but answered as an upstream failure.
func TestOversizedResponseHeadersNotTruncated(t *testing.T) {
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
		fr := http2.NewFramer(nc, br)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if f, ok := f.(*http2.MetaHeadersFrame); ok {
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
				for range 3 {
					enc.WriteField(hpack.HeaderField{Name: "x-big", Value: string(bytes.Repeat([]byte{'b'}, 2000))})
				}
				enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
			}
		}
	}()
	addr, _ := startForwarder(t, l.Addr().String(), nopObserver{}, func(o *h2.Options) { o.MaxHeaderListSize = 4096 })

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(nc, bufio.NewReader(nc))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/s/M"}, {"content-type", "application/grpc"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading from the sidecar: %v", err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			status := ""
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					status = hf.Value
				}
			}
			if status != "14" {
				t.Fatalf("client got grpc-status %q (fields %d), want 14 (UNAVAILABLE)", status, len(f.Fields))
			}
			return
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset %v before any status", f.ErrCode)
		}
	}
}

package h2_test

import (
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// response reads frames to stream id's response HEADERS and returns their
// fields, failing on a RST_STREAM of it or a GOAWAY.
func (c *rawClient) response(id uint32) map[string]string {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("before stream %d's response: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v before stream %d's response", f.ErrCode, id)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				c.t.Fatalf("stream %d reset %v, want a response", id, f.ErrCode)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				m := map[string]string{}
				for _, hf := range f.Fields {
					m[hf.Name] = hf.Value
				}
				return m
			}
		}
	}
}

// TestRequestHeadersOverLimitAnswered: a request whose header list is over
// MaxHeaderListSize is answered as net/http answers it, 431 (gRPC:
// RESOURCE_EXHAUSTED). REFUSED_STREAM told the client nothing was
// processed and a retry could succeed: clients (grpc-go, net/http) sent
// the same headers again, to the same end.
func TestRequestHeadersOverLimitAnswered(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{}, func(o *h2.Options) { o.MaxHeaderListSize = 4096 })
	c := dialRaw(t, addr)
	// Fields of 1.5 KiB: one over the limit alone is a COMPRESSION_ERROR
	// (the HPACK decoder's string limit), a connection error.
	big := []string{"x-big1", strings.Repeat("v", 1500), "x-big2", strings.Repeat("v", 1500), "x-big3", strings.Repeat("v", 1500)}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(big...), EndStream: true, EndHeaders: true})
	if got := c.response(1); got[":status"] != "431" {
		t.Fatalf("HTTP response %v, want :status 431", got)
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.block(append([]string{"content-type", "application/grpc"}, big...)...), EndStream: true, EndHeaders: true})
	if got := c.response(3); got["grpc-status"] != "8" {
		t.Fatalf("gRPC response %v, want grpc-status 8 (RESOURCE_EXHAUSTED)", got)
	}
}

// TestRequestTrailersOverLimitNotForwarded: request trailers over
// MaxHeaderListSize must not go upstream cut to the fields that fit, passed
// off as the client's: the request is refused (431) and reset upstream.
func TestRequestTrailersOverLimitNotForwarded(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{}, func(o *h2.Options) { o.MaxHeaderListSize = 4096 })
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true})
	c.fr.WriteData(1, false, []byte("body"))
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields("x-big1", strings.Repeat("v", 1500), "x-big2", strings.Repeat("v", 1500), "x-big3", strings.Repeat("v", 1500)), EndStream: true, EndHeaders: true})
	if got := c.response(1); got[":status"] != "431" {
		t.Fatalf("response %v, want :status 431 (the upstream answered cut trailers)", got)
	}
}

package extproc

import (
	"io"
	"log/slog"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/record"
)

// encodeSequence is the fuzz input format: each ProcessingRequest as a
// varint length and its wire bytes, then one byte saying whether the stream
// ends cleanly.
func encodeSequence(msgs []*extprocv3.ProcessingRequest, clean bool) []byte {
	var out []byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		out = protowire.AppendBytes(out, b)
	}
	if clean {
		return append(out, 0)
	}
	return out
}

// requestKind names the oneof a message carries, as answerKind does for answers.
func requestKind(m *extprocv3.ProcessingRequest) string {
	switch m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	}
	return "?"
}

// FuzzProcessingSequence feeds arbitrary message sequences — any bytes
// Envoy (or anything else) could put on the stream, decoded as
// ProcessingRequests — through the stream logic: headers, attributes, body
// scanners and captures, the order checks. Whatever comes, every known
// message gets an answer of its own kind that does not mutate (a full-duplex
// body comes back byte for byte), nothing panics, at most one record comes
// out, and its offsets are in order.
func FuzzProcessingSequence(f *testing.F) {
	greq, gresp := grpcCall()
	gh := reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
	seeds := [][]*extprocv3.ProcessingRequest{
		{gh, reqBody(greq, true), respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")), respBody(gresp, false), respTrailers("grpc-status", "0", "server-timing", "infer;dur=3")},
		{fullDuplex(reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc"))), reqBody(greq[:9], false), reqBody(greq[9:], true), respHeaders(headers(true, ":status", "200", "grpc-status", "3"))},
		{withAttrs(reqHeaders(headers(false, ":method", "POST", ":path", "/v2/models/m/infer", "content-type", "application/json")), map[string]any{"request.time": time.Now().UTC().Format(time.RFC3339Nano)}),
			reqBody([]byte(jsonReq), true), withAttrs(respHeaders(headers(false, ":status", "200", "content-type", "application/json")), map[string]any{"response.code": 200, "upstream.address": "1.2.3.4:80"}), respBody([]byte(jsonResp), true)},
		{reqBody([]byte("x"), true), reqHeaders(headers(true, ":path", "/"))},
		{grpcMode(reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc"))), reqBody(greq[5:], true), respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")), respBody(gresp[5:], false), respTrailers("grpc-status", "0")},
	}
	for i, s := range seeds {
		f.Add(encodeSequence(s, i%2 == 0))
	}
	f.Fuzz(func(t *testing.T, data []byte) { runOne(t, data) })
}

// maxFuzzMessages bounds the messages one fuzz input is cut into.
const maxFuzzMessages = 64

func runOne(t *testing.T, data []byte) {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	{
		var got []*record.Call
		p := record.NewPipeline(4, record.SinkFunc(func(c *record.Call) { got = append(got, c) }), nil)
		srv, err := New(Options{Pipeline: p, Logger: discard, CaptureBytes: 4096, CaptureBudget: 1 << 20,
			DecodeSample: 1, DecodeMaxBytes: 1 << 16, MaxMessageBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		st := newStream(srv)
		clean := false
		now := time.Now()
		// Envoy's sequences are short; a bound keeps each input fast.
		for msgs := 0; len(data) > 0 && msgs < maxFuzzMessages; msgs++ {
			b, n := protowire.ConsumeBytes(data)
			if n < 0 {
				clean = data[0]%2 == 0
				break
			}
			data = data[n:]
			var m extprocv3.ProcessingRequest
			if proto.Unmarshal(b, &m) != nil {
				continue
			}
			if st.first {
				st.first = false
				st.modes(m.GetProtocolConfig())
			}
			a := st.answer(&m)
			if a == nil {
				if m.Request != nil {
					t.Fatalf("no answer to a %s", requestKind(&m))
				}
				st.abandon()
				break
			}
			if answerKind(a) != requestKind(&m) {
				t.Fatalf("a %s answered as %s", requestKind(&m), answerKind(a))
			}
			if cr := commonOf(a); cr != nil && (cr.GetHeaderMutation() != nil || cr.GetStatus() != 0) {
				t.Fatalf("an answer mutates: %v", a)
			}
			now = now.Add(time.Microsecond)
			st.observe(&m, now, now)
		}
		st.finish(now.Add(time.Microsecond), clean)
		p.Close()
		if len(got) > 1 {
			t.Fatalf("%d records from one stream", len(got))
		}
		for _, c := range got {
			for _, d := range []time.Duration{c.RequestEnd, c.UpstreamStart, c.UpstreamSent, c.FirstByte, c.ResponseEnd, c.End} {
				if d < 0 {
					t.Fatalf("negative offset in %+v", c)
				}
			}
			if c.ResponseEnd > c.End || (c.FirstByte > 0 && c.FirstByte > c.End) {
				t.Fatalf("offsets out of order: %+v", c)
			}
		}
		if left := srv.budget.Left(); left != 1<<20 {
			t.Fatalf("capture budget leaked: %d of %d left", left, 1<<20)
		}
	}
}

package extproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/tracing"
)

const inferPath = "/inference.GRPCInferenceService/ModelInfer"

// grpcCall is a KServe v2 gRPC infer call's framed request and response.
func grpcCall() (req, resp []byte) {
	return frame(inferRequest("mlp", "3", 4, 4*784*4)), frame(inferResponse("mlp", 4))
}

const jsonReq = `{"inputs":[{"name":"x","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5,6]}]}`
const jsonResp = `{"model_name":"mlp","outputs":[{"name":"y","shape":[2,1],"datatype":"FP32","data":[0.5,0.25]}]}`

// answerKind names the oneof an answer carries.
func answerKind(a *extprocv3.ProcessingResponse) string {
	switch a.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingResponse_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingResponse_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingResponse_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return "response_trailers"
	}
	return "?"
}

// TestSequences drives the server over real gRPC with the message sequences
// Envoy sends in each processing mode (envoy/service/ext_proc/v3 and
// ext_proc/v3 ProcessingMode: headers first, then body chunks — one in
// BUFFERED, several in STREAMED and FULL_DUPLEX_STREAMED, end_of_stream on
// the last unless trailers follow — then trailers when their mode is SEND;
// request direction before response direction).
func TestSequences(t *testing.T) {
	greq, gresp := grpcCall()
	grpcHdr := func(eos bool) *extprocv3.ProcessingRequest {
		return reqHeaders(headers(eos, ":method", "POST", ":path", inferPath, "content-type", "application/grpc",
			"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
	}
	grpcRespHdr := func() *extprocv3.ProcessingRequest {
		return respHeaders(headers(false, ":status", "200", "content-type", "application/grpc"))
	}
	okTrailers := func() *extprocv3.ProcessingRequest {
		return respTrailers("grpc-status", "0", "server-timing", "queue;dur=1.5, infer;dur=4")
	}
	tracer, err := tracing.New(tracing.Config{Keep: -1})
	if err != nil {
		t.Fatal(err)
	}
	requestTime := time.Now().Add(-80 * time.Millisecond).UTC().Format("2006-01-02T15:04:05.999999999-07:00")

	tests := []struct {
		name    string
		opts    Options
		msgs    []*extprocv3.ProcessingRequest
		answers []string // kinds of the answers, in order; nil in observability mode
		check   func(t *testing.T, c *record.Call, answers []*extprocv3.ProcessingResponse)
	}{
		{
			name: "headers only, HTTP",
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(headers(false, ":method", "POST", ":path", "/v2/models/mlp/versions/2/infer?x=1", "content-type", "application/json", "content-length", "81")),
				respHeaders(headers(false, ":status", "200", "content-length", "97", "server-timing", "infer;dur=7")),
			},
			answers: []string{"request_headers", "response_headers"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if c.Protocol != record.ProtocolHTTP || c.API != record.APIKServeV2 || c.Model != "mlp" || c.Version != "2" || c.Method != "infer" {
					t.Errorf("route: %s %s %s %s %s", c.Protocol, c.API, c.Model, c.Version, c.Method)
				}
				if c.Code != "200" || c.ErrorKind != record.ErrNone || c.RequestBytes != 81 || c.ResponseBytes != 97 {
					t.Errorf("code %q kind %q bytes %d/%d", c.Code, c.ErrorKind, c.RequestBytes, c.ResponseBytes)
				}
				if len(c.Stages) != 1 || c.Stages[0].Name != "infer" || c.Stages[0].Duration != 7*time.Millisecond {
					t.Errorf("stages %+v", c.Stages)
				}
				if c.FirstByte <= 0 || c.End < c.FirstByte {
					t.Errorf("first byte %v end %v", c.FirstByte, c.End)
				}
				if _, ok := c.Ingress(); ok {
					t.Errorf("ingress measured without the request's end being seen")
				}
			},
		},
		{
			// BUFFERED_PARTIAL over its limit: Envoy sends the first part of
			// each body and forwards the rest without us.
			name: "partially buffered bodies, HTTP: bytes as announced",
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(headers(false, ":method", "POST", ":path", "/v2/models/mlp/infer", "content-type", "application/json", "content-length", "5000")),
				reqBody(make([]byte, 1024), false),
				respHeaders(headers(false, ":status", "200", "content-length", "3000")),
				respBody(make([]byte, 1024), false),
			},
			answers: []string{"request_headers", "request_body", "response_headers", "response_body"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if c.Code != "200" || c.ErrorKind != record.ErrNone || c.RequestBytes != 5000 || c.ResponseBytes != 3000 {
					t.Errorf("code %q kind %q bytes %d/%d, want 200, none, 5000/3000", c.Code, c.ErrorKind, c.RequestBytes, c.ResponseBytes)
				}
			},
		},
		{
			name: "buffered body, gRPC, trailers",
			opts: Options{DecodeSample: 1, DecodeMaxBytes: 1 << 20, Trace: tracer},
			msgs: []*extprocv3.ProcessingRequest{
				grpcHdr(false), reqBody(greq, true), grpcRespHdr(), respBody(gresp, false), okTrailers(),
			},
			answers: []string{"request_headers", "request_body", "response_headers", "response_body", "response_trailers"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if c.Protocol != record.ProtocolGRPC || c.Model != "mlp" || c.Version != "3" || c.Method != "infer" || c.Code != "OK" {
					t.Errorf("record: %s %s %s %s %s", c.Protocol, c.Model, c.Version, c.Method, c.Code)
				}
				if c.BatchSize != 4 || c.InputCount != 1 || c.Inputs[0].Bytes != 4*784*4 || c.OutputCount != 1 || c.Outputs[0].Name != "y" {
					t.Errorf("tensors: batch %d in %d %+v out %d %+v", c.BatchSize, c.InputCount, c.Inputs, c.OutputCount, c.Outputs)
				}
				if c.RequestBytes != int64(len(greq)) || c.ResponseBytes != int64(len(gresp)) || c.RequestMessages != 1 || c.ResponseMessages != 1 {
					t.Errorf("bytes %d/%d messages %d/%d", c.RequestBytes, c.ResponseBytes, c.RequestMessages, c.ResponseMessages)
				}
				if len(c.Stages) != 2 || c.Stages[0].Name != "queue" || c.Stages[1].Duration != 4*time.Millisecond {
					t.Errorf("stages %+v", c.Stages)
				}
				if !c.DecodeRan || c.DecodeFail {
					t.Errorf("sampled full decode ran %v failed %v", c.DecodeRan, c.DecodeFail)
				}
				if c.TraceID != [16]byte{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c} ||
					c.ParentSpanID != [8]byte{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31} {
					t.Errorf("trace %x parent %x: not parented on the forwarded traceparent", c.TraceID, c.ParentSpanID)
				}
				in, okIn := c.Ingress()
				up, okUp := c.Upstream()
				if !okIn || !okUp || in <= 0 || c.RequestEnd > c.FirstByte || c.ResponseEnd < c.FirstByte || c.End < c.ResponseEnd {
					t.Errorf("phases: %+v (ingress %v upstream %v)", c, in, up)
				}
			},
		},
		{
			name: "streamed body in chunks, HTTP JSON decoded",
			opts: Options{CaptureBytes: 1 << 20, DecodeSample: 1},
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(headers(false, ":method", "POST", ":path", "/v2/models/mlp/infer", "content-type", "application/json")),
				reqBody([]byte(jsonReq[:10]), false), reqBody([]byte(jsonReq[10:40]), false), reqBody([]byte(jsonReq[40:]), true),
				respHeaders(headers(false, ":status", "200", "content-type", "application/json")),
				respBody([]byte(jsonResp[:20]), false), respBody([]byte(jsonResp[20:]), true),
			},
			answers: []string{"request_headers", "request_body", "request_body", "request_body", "response_headers", "response_body", "response_body"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if c.RequestBytes != int64(len(jsonReq)) || c.ResponseBytes != int64(len(jsonResp)) || c.Code != "200" {
					t.Errorf("bytes %d/%d code %s", c.RequestBytes, c.ResponseBytes, c.Code)
				}
				if !c.DecodeRan || c.DecodeFail || c.BatchSize != 2 || c.InputCount != 1 || c.Inputs[0].Name != "x" || c.OutputCount != 1 {
					t.Errorf("decode ran %v fail %v batch %d inputs %+v outputs %d", c.DecodeRan, c.DecodeFail, c.BatchSize, c.Inputs, c.OutputCount)
				}
				if _, ok := c.Transfer(); !ok {
					t.Errorf("transfer not measured")
				}
			},
		},
		{
			name: "full-duplex streamed, gRPC chunks echoed",
			msgs: []*extprocv3.ProcessingRequest{
				fullDuplex(grpcHdr(false)), reqBody(greq[:3], false), reqBody(greq[3:100], false), reqBody(greq[100:], true),
				grpcRespHdr(), respBody(gresp[:7], false), respBody(gresp[7:], false), okTrailers(),
			},
			answers: []string{"request_headers", "request_body", "request_body", "request_body", "response_headers", "response_body", "response_body", "response_trailers"},
			check: func(t *testing.T, c *record.Call, answers []*extprocv3.ProcessingResponse) {
				var got []byte
				for _, a := range answers[1:4] {
					sr := a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
					if sr == nil {
						t.Fatalf("full-duplex body answered without a streamed_response: %v", a)
					}
					got = append(got, sr.GetBody()...)
				}
				if !bytes.Equal(got, greq) || !answers[3].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
					t.Errorf("request body not handed back unchanged with end_of_stream on the last chunk")
				}
				got = got[:0]
				for _, a := range answers[5:7] {
					got = append(got, a.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()...)
				}
				if !bytes.Equal(got, gresp) {
					t.Errorf("response body not handed back unchanged")
				}
				if c.Model != "mlp" || c.BatchSize != 4 || c.Code != "OK" || c.OutputCount != 1 {
					t.Errorf("record: %+v", c)
				}
			},
		},
		{
			name: "GRPC body mode, de-framed messages",
			msgs: []*extprocv3.ProcessingRequest{
				grpcMode(grpcHdr(false)), reqBody(greq[5:], true),
				grpcRespHdr(), respBody(gresp[5:], false), okTrailers(),
			},
			answers: []string{"request_headers", "request_body", "response_headers", "response_body", "response_trailers"},
			check: func(t *testing.T, c *record.Call, answers []*extprocv3.ProcessingResponse) {
				if sr := answers[1].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sr == nil || !bytes.Equal(sr.GetBody(), greq[5:]) {
					t.Errorf("GRPC-mode message not handed back unchanged")
				}
				if c.Model != "mlp" || c.BatchSize != 4 || c.RequestMessages != 1 || c.RequestBytes != int64(len(greq)) || c.ResponseBytes != int64(len(gresp)) || c.OutputCount != 1 {
					t.Errorf("record: model %q batch %d msgs %d bytes %d/%d outputs %d", c.Model, c.BatchSize, c.RequestMessages, c.RequestBytes, c.ResponseBytes, c.OutputCount)
				}
			},
		},
		{
			name: "request trailers end the request",
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(headers(false, ":method", "POST", ":path", "/v2/models/mlp/infer", "content-type", "application/json")),
				reqBody([]byte(jsonReq), false), reqTrailers("x-checksum", "abc"),
				respHeaders(headers(true, ":status", "204")),
			},
			answers: []string{"request_headers", "request_body", "request_trailers", "response_headers"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if c.RequestEnd <= 0 || c.Code != "204" || c.ResponseBytes != 0 || c.ResponseEnd != c.FirstByte {
					t.Errorf("request end %v code %s response end %v first byte %v", c.RequestEnd, c.Code, c.ResponseEnd, c.FirstByte)
				}
			},
		},
		{
			name: "observability mode, no answers",
			msgs: observability([]*extprocv3.ProcessingRequest{
				grpcHdr(false), reqBody(greq, true), grpcRespHdr(), respBody(gresp, false), okTrailers(),
			}),
			check: func(t *testing.T, c *record.Call, answers []*extprocv3.ProcessingResponse) {
				if len(answers) != 0 {
					t.Errorf("%d answers in observability mode", len(answers))
				}
				if c.Model != "mlp" || c.Code != "OK" || c.BatchSize != 4 || c.RequestEnd != c.UpstreamSent {
					t.Errorf("record: %+v", c)
				}
			},
		},
		{
			name: "attributes present",
			msgs: []*extprocv3.ProcessingRequest{
				withAttrs(grpcHdr(true), map[string]any{"request.time": requestTime}),
				withAttrs(grpcRespHdr(), map[string]any{"response.code": 200, "upstream.address": "10.1.2.3:8081"}),
				withAttrs(respTrailers("grpc-status", "5"), map[string]any{"response.grpc_status": 5}),
			},
			answers: []string{"request_headers", "response_headers", "response_trailers"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				// 80 ms before the table was built, the subtests before
				// this one since: the upper bound only rules out a clock
				// taken wrongly (the server ignores one 30 s off).
				if c.RequestEnd < 70*time.Millisecond || c.RequestEnd > 20*time.Second {
					t.Errorf("request.time not taken as the start: request end at %v", c.RequestEnd)
				}
				if c.UpstreamAddr != "10.1.2.3:8081" || c.Code != "NOT_FOUND" {
					t.Errorf("upstream %q code %q", c.UpstreamAddr, c.Code)
				}
			},
		},
		{
			name: "attributes absent, status from attribute when trailers skipped",
			msgs: []*extprocv3.ProcessingRequest{
				grpcHdr(true),
				withAttrs(grpcRespHdr(), map[string]any{"response.grpc_status": 14}),
			},
			answers: []string{"request_headers", "response_headers"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if c.RequestEnd > 50*time.Millisecond || c.UpstreamAddr != "" {
					t.Errorf("request end %v upstream %q", c.RequestEnd, c.UpstreamAddr)
				}
				if c.Code != "UNAVAILABLE" {
					t.Errorf("code %q", c.Code)
				}
			},
		},
		{
			name: "request.time from a wrong clock is ignored",
			msgs: []*extprocv3.ProcessingRequest{
				withAttrs(grpcHdr(true), map[string]any{"request.time": "2001-01-01T00:00:00Z"}),
				grpcRespHdr(), okTrailers(),
			},
			answers: []string{"request_headers", "response_headers", "response_trailers"},
			check: func(t *testing.T, c *record.Call, _ []*extprocv3.ProcessingResponse) {
				if time.Since(c.Start) > 5*time.Second {
					t.Errorf("start %v taken from an implausible request.time", c.Start)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.opts, nil)
			answers := exchange(t, h, tt.msgs)
			var kinds []string
			for _, a := range answers {
				kinds = append(kinds, answerKind(a))
				if cr := commonOf(a); cr != nil && (cr.GetHeaderMutation() != nil || cr.GetStatus() != 0 ||
					(cr.GetBodyMutation() != nil && cr.GetBodyMutation().GetStreamedResponse() == nil)) {
					t.Errorf("an answer mutates: %v", a)
				}
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tt.answers) {
				t.Fatalf("answers %v, want %v", kinds, tt.answers)
			}
			c := h.col.wait(t, 1)
			tt.check(t, c, answers)
			for k := range numKinds {
				if n := h.srv.Errors(kindNames[k]); n != 0 {
					t.Errorf("%d errors of kind %s on a well-formed sequence", n, kindNames[k])
				}
			}
		})
	}
}

func commonOf(a *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch r := a.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return r.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return r.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return r.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return r.ResponseBody.GetResponse()
	}
	return nil
}

// TestMetricsFromRecords checks the records reach the metric set the way
// the sidecar's do.
func TestMetricsFromRecords(t *testing.T) {
	set := metricset.New(metricset.Options{})
	h := newHarness(t, Options{}, set)
	greq, gresp := grpcCall()
	for range 3 {
		exchange(t, h, []*extprocv3.ProcessingRequest{
			reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc")),
			reqBody(greq, true),
			respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
			respBody(gresp, false), respTrailers("grpc-status", "0"),
		})
	}
	h.col.wait(t, 3)
	var b strings.Builder
	set.WritePrometheus(&b)
	out := b.String()
	for _, want := range []string{
		`inferwatch_requests_total{protocol="grpc",api="kserve_v2",method="infer",model="mlp",version="3",code="OK"} 3`,
		`inferwatch_phase_duration_seconds_count{protocol="grpc",api="kserve_v2",model="mlp",version="3",phase="upstream"} 3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// TestClientResetMidStream: Envoy resets the stream when the client goes
// away; the record says the call broke off.
func TestClientResetMidStream(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	greq, _ := grpcCall()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*extprocv3.ProcessingRequest{
		reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc")),
		reqBody(greq[:200], false),
	} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	c := h.col.wait(t, 1)
	if c.ErrorKind != record.ErrClientCancel || c.Code != "CANCELLED" || c.RequestBytes != 200 || c.FirstByte != 0 {
		t.Fatalf("record: kind %q code %q bytes %d first byte %v", c.ErrorKind, c.Code, c.RequestBytes, c.FirstByte)
	}
	if h.srv.Errors("stream_error") != 0 {
		t.Errorf("a client reset counted as a stream error")
	}
}

// TestMalformedSequences: each gets a clear log line and a counted error,
// and the stream is answered or closed cleanly, never left hanging.
func TestMalformedSequences(t *testing.T) {
	withUnknown := func(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
		raw := protowire.AppendTag(nil, 99, protowire.BytesType)
		raw = protowire.AppendBytes(raw, []byte("from a newer Envoy"))
		m.ProtoReflect().SetUnknown(raw)
		return m
	}
	unknownKind := func() *extprocv3.ProcessingRequest {
		m := &extprocv3.ProcessingRequest{}
		raw := protowire.AppendTag(nil, 42, protowire.BytesType)
		m.ProtoReflect().SetUnknown(protowire.AppendBytes(raw, []byte{1, 2, 3}))
		return m
	}
	hdr := func() *extprocv3.ProcessingRequest {
		return reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc"))
	}
	big := make([]byte, 5+4096)
	big[3] = 0x10 // a gRPC prefix declaring 4096 bytes
	tests := []struct {
		name      string
		opts      Options
		msgs      []*extprocv3.ProcessingRequest
		kind      string
		log       string
		recorded  bool // the call is still recorded
		closeCode codes.Code
		closed    bool // the server ends the stream after the last message
	}{
		{name: "body before headers", msgs: []*extprocv3.ProcessingRequest{reqBody([]byte("x"), true), hdr()},
			kind: "body_before_headers", log: "request_body before its headers"},
		{name: "response before request", msgs: []*extprocv3.ProcessingRequest{respHeaders(headers(true, ":status", "200"))},
			kind: "body_before_headers", log: "response_headers before request_headers"},
		{name: "headers twice", msgs: []*extprocv3.ProcessingRequest{hdr(), hdr()},
			kind: "out_of_order", log: "request_headers twice"},
		{name: "body after end of stream", msgs: []*extprocv3.ProcessingRequest{hdr(), reqBody([]byte("a"), true), reqBody([]byte("b"), true)},
			kind: "out_of_order", log: "request_body after its direction ended"},
		{name: "unknown fields", msgs: []*extprocv3.ProcessingRequest{withUnknown(hdr()), respHeaders(headers(true, ":status", "200"))},
			kind: "unknown_fields", log: "fields this version does not know", recorded: true},
		{name: "unknown message kind", msgs: []*extprocv3.ProcessingRequest{hdr(), unknownKind()},
			kind: "unknown_message", log: "unknown ext_proc message kind", closed: true},
		{name: "oversize message", opts: Options{MaxRecvBytes: 64 << 10},
			msgs: []*extprocv3.ProcessingRequest{hdr(), reqBody(make([]byte, 100<<10), true)},
			kind: "oversize_message", log: "over the receive limit", closed: true, closeCode: codes.ResourceExhausted},
		{name: "oversize body", opts: Options{MaxMessageBytes: 1024},
			msgs: []*extprocv3.ProcessingRequest{hdr(), reqBody(big, true), respHeaders(headers(false, ":status", "200")), respTrailers("grpc-status", "0")},
			kind: "oversize_body", log: "over max_message_bytes", recorded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.opts, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := h.client.Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range tt.msgs {
				if err := st.Send(m); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				if tt.closed && i == len(tt.msgs)-1 {
					break
				}
				if _, err := st.Recv(); err != nil {
					t.Fatalf("message %d not answered: %v", i, err)
				}
			}
			st.CloseSend()
			_, err = st.Recv()
			code := status.Code(err)
			if errors.Is(err, io.EOF) {
				code = codes.OK // closed cleanly
			}
			if code != tt.closeCode || err == nil {
				t.Fatalf("stream ended with %v, want code %v", err, tt.closeCode)
			}
			if n := h.srv.Errors(tt.kind); n != 1 {
				t.Errorf("%s counted %d times", tt.kind, n)
			}
			if logs := h.logs.String(); !strings.Contains(logs, tt.log) || !strings.Contains(logs, "kind="+tt.kind) {
				t.Errorf("log lacks %q / kind=%s:\n%s", tt.log, tt.kind, logs)
			}
			h.pipeline.Close()
			if got := h.col.count(); (got == 1) != tt.recorded {
				t.Errorf("%d records, recorded=%v expected", got, tt.recorded)
			}
		})
	}
}

// TestAnswersNeverWaitOnASink: with the only sink blocked and the queue
// full, every message is still answered at once; records are dropped and
// counted instead.
func TestAnswersNeverWaitOnASink(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	p := record.NewPipeline(2, record.SinkFunc(func(*record.Call) { <-block }), nil)
	h := newHarness(t, Options{Pipeline: p}, nil)
	greq, gresp := grpcCall()
	msgs := []*extprocv3.ProcessingRequest{
		reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc")),
		reqBody(greq, true), respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
		respBody(gresp, false), respTrailers("grpc-status", "0"),
	}
	var worst time.Duration
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := h.client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			s := time.Now()
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			worst = max(worst, time.Since(s))
		}
		st.CloseSend()
		st.Recv()
		cancel()
	}
	if p.Dropped() < 40 {
		t.Fatalf("the blocked sink dropped only %d of 50 records: was it blocked?", p.Dropped())
	}
	// An answer that waited on the sink would never come (it is blocked
	// until the test ends): Recv would fail at the 5 s deadline above. How
	// long the slowest took is the machine's scheduling, only logged.
	t.Logf("worst answer %v with %d records dropped", worst, p.Dropped())
}

// TestTwoServersShareAMetricSet: servers on one metric set (two listeners of
// one process) share the error counters instead of failing to register them.
func TestTwoServersShareAMetricSet(t *testing.T) {
	set := metricset.New(metricset.Options{})
	p := record.NewPipeline(4, record.Sinks{}, nil)
	defer p.Close()
	a, err := New(Options{Pipeline: p, Metrics: set.Metrics()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Pipeline: p, Metrics: set.Metrics()})
	if err != nil {
		t.Fatal(err)
	}
	a.fault(kindOutOfOrder, "test")
	if b.Errors("out_of_order") != 1 {
		t.Fatalf("counters not shared: %d", b.Errors("out_of_order"))
	}
}

// TestStreamInferRequestsMatched: a ModelStreamInfer stream through
// ext_proc (Triton's decoupled models: several responses per request, two
// requests in flight) gets its requests and their matched responses in the
// record, as the sidecar's does.
func TestStreamInferRequestsMatched(t *testing.T) {
	req := func(id string) []byte { return frame(&inference.ModelInferRequest{ModelName: "llm", Id: id}) }
	resp := func(id string, final bool) []byte {
		return frame(&inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{ModelName: "llm", Id: id,
			Parameters: map[string]*inference.InferParameter{inferapi.FinalResponseParam: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: final}}}}})
	}
	h := newHarness(t, Options{}, nil)
	exchange(t, h, []*extprocv3.ProcessingRequest{
		reqHeaders(headers(false, ":method", "POST", ":path", "/inference.GRPCInferenceService/ModelStreamInfer", "content-type", "application/grpc", "te", "trailers")),
		reqBody(req("a"), false),
		respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
		respBody(resp("a", false), false),
		reqBody(req("b"), true),
		respBody(append(resp("b", false), resp("a", true)...), false),
		respBody(resp("b", false), false),
		respBody(resp("b", true), false),
		respTrailers("grpc-status", "0"),
	})
	c := h.col.wait(t, 1)
	if len(c.StreamRequests) != 2 || c.Model != "llm" || !c.Stream {
		t.Fatalf("model %q stream %v, stream requests %+v", c.Model, c.Stream, c.StreamRequests)
	}
	for i, want := range []struct {
		id        string
		responses int
	}{{"a", 2}, {"b", 3}} {
		r := c.StreamRequests[i]
		if r.ID != want.id || r.Responses != want.responses || !r.Final || r.FirstResponse <= r.Arrived || r.LastResponse < r.FirstResponse {
			t.Errorf("request %d: %+v, want id %q with %d responses, final", i, r, want.id, want.responses)
		}
	}
}

// TestStreamPredictionsRequestsMatched: TorchServe's StreamPredictions2
// through ext_proc, a request answered before the next is sent: each
// request gets its responses (TorchServe sends no final flag), and the
// response whose status is INTERNAL fails its request.
func TestStreamPredictionsRequestsMatched(t *testing.T) {
	req := func(id string) []byte {
		return frame(&torchserve.PredictionsRequest{ModelName: "llm", Input: map[string][]byte{"prompt": []byte("hi")}, SequenceId: proto.String(id)})
	}
	resp := func(id string, code int32) []byte {
		return frame(&torchserve.PredictionResponse{Prediction: []byte("tok"), SequenceId: proto.String(id), Status: &rpcstatus.Status{Code: code}})
	}
	h := newHarness(t, Options{}, nil)
	exchange(t, h, []*extprocv3.ProcessingRequest{
		reqHeaders(headers(false, ":method", "POST", ":path", "/org.pytorch.serve.grpc.inference.InferenceAPIsService/StreamPredictions2", "content-type", "application/grpc", "te", "trailers")),
		reqBody(req("a"), false),
		respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
		respBody(append(resp("a", 0), resp("a", 0)...), false),
		reqBody(req("b"), true),
		respBody(resp("b", 13), false),
		respTrailers("grpc-status", "0"),
	})
	c := h.col.wait(t, 1)
	if len(c.StreamRequests) != 2 || c.Model != "llm" || !c.Stream {
		t.Fatalf("model %q stream %v, stream requests %+v", c.Model, c.Stream, c.StreamRequests)
	}
	if r := c.StreamRequests[0]; r.ID != "a" || r.Responses != 2 || r.Gaps.Count != 1 || r.Error || r.FirstResponse <= r.Arrived {
		t.Errorf("request a: %+v, want 2 responses", r)
	}
	if r := c.StreamRequests[1]; r.ID != "b" || r.Responses != 0 || !r.Error {
		t.Errorf("request b: %+v, want failed without responses", r)
	}
}

// TestObservabilityModeEndIsNotTheDeferredClose: in observability mode Envoy
// closes the stream only deferred_close_timeout (5 s by default) after the
// call (ext_proc.cc, Filter::onDestroy → deferredCloseStream), so with the
// response's body and trailers not sent, the close says nothing about when
// the call ended. The record must not end there.
func TestObservabilityModeEndIsNotTheDeferredClose(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range observability([]*extprocv3.ProcessingRequest{
		reqHeaders(headers(true, ":method", "GET", ":path", "/v2/models/mlp/ready")),
		respHeaders(headers(false, ":status", "200", "content-length", "0")),
	}) {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	const deferredClose = 400 * time.Millisecond // stands for Envoy's 5 s
	time.Sleep(deferredClose)
	st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want a clean close", err)
	}
	c := h.col.wait(t, 1)
	if c.Code != "200" || c.ErrorKind != record.ErrNone {
		t.Fatalf("code %q kind %q", c.Code, c.ErrorKind)
	}
	if c.End >= deferredClose/2 || c.End < c.FirstByte {
		t.Fatalf("end %v (first byte %v): the call ended at the deferred close, not at its last message", c.End, c.FirstByte)
	}
}

// TestGRPCModeHandsBackWhatItGot: in the GRPC body mode a body message says
// whether its gRPC message was compressed (grpc_message_compressed) and
// whether a half-close came without a message (end_of_stream_without_message);
// the StreamedBodyResponse carries the same two fields back
// (external_processor.proto). An answer that dropped them would have the
// data plane send compressed bytes as an uncompressed message, or an empty
// message the client never sent; the record must not count that message
// either, nor parse compressed bytes as protobuf.
func TestGRPCModeHandsBackWhatItGot(t *testing.T) {
	greq, gresp := grpcCall()
	compressed := reqBody([]byte{0x1f, 0x8b, 0x08, 0, 1, 2, 3}, false)
	compressed.GetRequestBody().GrpcMessageCompressed = true
	halfClose := reqBody(nil, true)
	halfClose.GetRequestBody().EndOfStreamWithoutMessage = true
	h := newHarness(t, Options{}, nil)
	answers := exchange(t, h, []*extprocv3.ProcessingRequest{
		grpcMode(reqHeaders(headers(false, ":method", "POST", ":path", "/inference.GRPCInferenceService/ModelStreamInfer", "content-type", "application/grpc"))),
		reqBody(greq[5:], false), compressed, halfClose,
		respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
		respBody(gresp[5:], false), respTrailers("grpc-status", "0"),
	})
	for i, want := range []struct{ compressed, withoutMessage bool }{{false, false}, {true, false}, {false, true}} {
		sr := answers[1+i].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr.GetGrpcMessageCompressed() != want.compressed || sr.GetEndOfStreamWithoutMessage() != want.withoutMessage {
			t.Errorf("body %d answered compressed=%v without_message=%v, want %v/%v", i+1,
				sr.GetGrpcMessageCompressed(), sr.GetEndOfStreamWithoutMessage(), want.compressed, want.withoutMessage)
		}
	}
	c := h.col.wait(t, 1)
	if c.RequestMessages != 2 || c.RequestBytes != int64(len(greq)+5+7) || c.Model != "mlp" {
		t.Errorf("request: %d messages, %d bytes, model %q; want 2 messages, %d bytes, mlp", c.RequestMessages, c.RequestBytes, c.Model, len(greq)+5+7)
	}
}

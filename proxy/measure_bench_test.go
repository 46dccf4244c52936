package proxy

import (
	"encoding/binary"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// BenchmarkMeasure prices the sidecar's own measurement of one small unary
// ModelInfer, without any I/O: what the handler does on the data path (route
// recognition, a scanner per direction fed the framed message, the record
// filled from them) and what the pipeline goroutine then does with the record
// (metricset.Observe). The forwarding itself is BenchmarkDataPlane's.
//
//	go test -run XXX -bench BenchmarkMeasure -benchmem ./proxy
func BenchmarkMeasure(b *testing.B) {
	const method = "/inference.GRPCInferenceService/ModelInfer"
	req := measureFrame(b, &inference.ModelInferRequest{
		ModelName: "resnet50", ModelVersion: "1", Id: "42",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input__0", Datatype: "FP32", Shape: []int64{1, 3, 224, 224}}},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "output__0"}},
		RawInputContents: [][]byte{make([]byte, 64)},
	})
	resp := measureFrame(b, &inference.ModelInferResponse{
		ModelName: "resnet50", ModelVersion: "1", Id: "42",
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "output__0", Datatype: "FP32", Shape: []int64{1, 1000}}},
		RawOutputContents: [][]byte{make([]byte, 64)},
	})
	route := inferapi.GRPCRoute(method)

	// fill does the data-path half with the given scanners.
	fill := func(c *record.Call, rs, ps *inferapi.GRPCScanner) {
		rt := inferapi.GRPCRoute(method)
		c.Protocol, c.API, c.Method, c.Model, c.Version = record.ProtocolGRPC, rt.API, rt.Method, rt.Model, rt.Version
		rs.Reset(rt.Message, maxMsg)
		ps.Reset(rt.Reply, maxMsg)
		if err := rs.Feed(req); err != nil {
			b.Fatal(err)
		}
		if err := ps.Feed(resp); err != nil {
			b.Fatal(err)
		}
		c.RequestBytes, c.ResponseBytes = int64(len(req)), int64(len(resp))
		c.RequestEnd, c.UpstreamStart, c.UpstreamSent = 20*time.Microsecond, 25*time.Microsecond, 30*time.Microsecond
		c.FirstByte, c.ResponseEnd, c.End = 900*time.Microsecond, 950*time.Microsecond, time.Millisecond
		c.Code = "OK"
		c.ClientRTT, c.UpstreamRTT = 50*time.Microsecond, 20*time.Microsecond
		rs.FillRequest(c)
		ps.FillResponse(c)
	}
	if route.Message != inferapi.KindInferRequest {
		b.Fatalf("%s is not recognised as a KServe infer call", method)
	}

	b.Run("scan", func(b *testing.B) {
		// Scanners and record reused: the scanning and filling alone.
		var rs, ps inferapi.GRPCScanner
		c := &record.Call{Start: time.Now()}
		b.ReportAllocs()
		for b.Loop() {
			*c = record.Call{Start: c.Start, Inputs: c.Inputs[:0], Outputs: c.Outputs[:0]}
			fill(c, &rs, &ps)
		}
	})
	b.Run("observe", func(b *testing.B) {
		set := metricset.New(metricset.Options{})
		var rs, ps inferapi.GRPCScanner
		c := &record.Call{Start: time.Now()}
		fill(c, &rs, &ps)
		set.Observe(c) // first sight makes the series
		b.ReportAllocs()
		for b.Loop() {
			set.Observe(c)
		}
	})
	b.Run("per-call", func(b *testing.B) {
		// As ServeHTTP and the pipeline do it: a new record and two new
		// scanners per call, filled, then observed.
		set := metricset.New(metricset.Options{})
		b.ReportAllocs()
		for b.Loop() {
			c := &record.Call{Start: time.Now()}
			fill(c, new(inferapi.GRPCScanner), new(inferapi.GRPCScanner))
			set.Observe(c)
		}
	})
}

// measureFrame is m marshalled with its 5-byte gRPC prefix.
func measureFrame(b *testing.B, m proto.Message) []byte {
	p, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	f := make([]byte, 5, 5+len(p))
	binary.BigEndian.PutUint32(f[1:], uint32(len(p)))
	return append(f, p...)
}

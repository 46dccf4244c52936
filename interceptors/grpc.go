package interceptors

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// StatsHandler fills a record per RPC from grpc-go's stats events. Install it
// with grpc.StatsHandler on a server or grpc.WithStatsHandler on a client.
type StatsHandler struct {
	pipeline *record.Pipeline
}

// NewStatsHandler returns a handler submitting records to p.
func NewStatsHandler(p *record.Pipeline) *StatsHandler { return &StatsHandler{pipeline: p} }

type rpcKey struct{}

// rpcState is touched only by grpc-go's stats callbacks, which for one RPC
// arrive in order from the goroutines serving it.
type rpcState struct {
	c  *record.Call
	rt inferapi.Route // what the messages are
}

// TagRPC starts the record.
func (h *StatsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	rt := inferapi.GRPCRoute(info.FullMethodName)
	c := &record.Call{Start: time.Now(), Protocol: record.ProtocolGRPC, API: rt.API, Method: rt.Method, Model: rt.Model, Version: rt.Version}
	return context.WithValue(ctx, rpcKey{}, &rpcState{c: c, rt: rt})
}

// HandleRPC records each event of the RPC.
func (h *StatsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	st, ok := ctx.Value(rpcKey{}).(*rpcState)
	if !ok {
		return
	}
	c := st.c
	at := func(t time.Time) time.Duration {
		if d := t.Sub(c.Start); d > 0 {
			return d
		}
		return 1 // reached, even if within the clock's resolution
	}
	// A server receives the requests and sends the responses; a client
	// sends the requests and receives the responses. On a server the
	// handler (the upstream) runs once the last request arrived; on a
	// client the server does from the start.
	request := func(payload any, wire int, t time.Time) {
		c.RequestMessages++
		c.RequestBytes += int64(wire)
		c.RequestEnd = at(t)
		c.UpstreamSent = c.RequestEnd
		if c.UpstreamStart == 0 {
			c.UpstreamStart = c.RequestEnd
		}
		if c.RequestMessages == 1 {
			fillFirst(c, st.rt.Message, payload)
		}
	}
	response := func(payload any, wire int, t time.Time) {
		c.ResponseMessages++
		c.ResponseBytes += int64(wire)
		if c.FirstByte == 0 {
			c.FirstByte = at(t)
		}
		c.ResponseEnd = at(t)
		if c.ResponseMessages == 1 {
			fillFirst(c, st.rt.Reply, payload)
		}
	}
	switch e := s.(type) {
	case *stats.Begin:
		c.Start = e.BeginTime
		if e.Client {
			c.UpstreamStart, c.ClientSide = 1, true
		}
	case *stats.InPayload:
		if e.Client {
			response(e.Payload, e.WireLength, e.RecvTime)
		} else {
			request(e.Payload, e.WireLength, e.RecvTime)
		}
	case *stats.OutPayload:
		if e.Client {
			request(e.Payload, e.WireLength, e.SentTime)
		} else {
			response(e.Payload, e.WireLength, e.SentTime)
		}
	case *stats.OutHeader: // a server's response headers going out
		if !e.Client && c.FirstByte == 0 {
			c.FirstByte = at(time.Now())
		}
	case *stats.InHeader: // a client's response headers arriving
		if e.Client && c.FirstByte == 0 {
			c.FirstByte = at(time.Now())
		}
	case *stats.End:
		c.End = at(e.EndTime)
		if c.ResponseEnd == 0 {
			c.ResponseEnd = c.End
		}
		c.Code = grpcCode(e.Error)
		c.ErrorKind = errorKind(c.Code, e.Client, ctx.Err() != nil)
		c.Stream = st.rt.Streaming() || c.RequestMessages > 1 || c.ResponseMessages > 1
		h.pipeline.Submit(c)
	}
}

// grpcCode names the status an RPC ended with; a handler's bare context
// error counts as the status grpc-go sends for it.
func grpcCode(err error) string {
	if err == nil {
		return "OK"
	}
	if st, ok := status.FromError(err); ok {
		return record.GRPCCodeName(int(st.Code()))
	}
	return record.GRPCCodeName(int(status.FromContextError(err).Code()))
}

// fillRequest and fillResponse keep of names and shapes what the sidecar's
// scanner keeps of the same message (inferapi.Label, inferapi.MaxDims): a
// caller's model name may be megabytes, and it becomes a metric label.
func fillRequest(c *record.Call, m *inference.ModelInferRequest) {
	c.Model, c.Version = inferapi.Label(m.ModelName), inferapi.Label(m.ModelVersion)
	for i, in := range m.Inputs {
		t := record.Tensor{Name: inferapi.Label(in.Name), Datatype: inferapi.Label(in.Datatype), Shape: keptShape(in.Shape), Bytes: contentsBytes(in.Contents)}
		if i < len(m.RawInputContents) {
			t.Bytes += int64(len(m.RawInputContents[i]))
		}
		if i == 0 {
			c.BatchSize = inferapi.BatchSize(in.Shape)
		}
		c.AddInput(t)
	}
}

// keptShape is a copy of a message's shape, at most inferapi.MaxDims long:
// the record outlives the call in the sinks' queue, and must not share the
// caller's slice.
func keptShape(shape []int64) []int64 {
	if len(shape) == 0 {
		return nil
	}
	return slices.Clone(shape[:min(len(shape), inferapi.MaxDims)])
}

// contentsBytes is the wire size of a tensor's typed contents, as the
// sidecar's scanner counts them (nil: none).
func contentsBytes(tc *inference.InferTensorContents) int64 {
	if tc == nil {
		return 0
	}
	return int64(proto.Size(tc))
}

func fillResponse(c *record.Call, m *inference.ModelInferResponse) {
	// The model and version that answered, where the request named none
	// (as the sidecar's scanner reads a response).
	if c.Model == "" {
		c.Model = inferapi.Label(m.ModelName)
	}
	if c.Version == "" {
		c.Version = inferapi.Label(m.ModelVersion)
	}
	for i, out := range m.Outputs {
		t := record.Tensor{Name: inferapi.Label(out.Name), Datatype: inferapi.Label(out.Datatype), Shape: keptShape(out.Shape), Bytes: contentsBytes(out.Contents)}
		if i < len(m.RawOutputContents) {
			t.Bytes += int64(len(m.RawOutputContents[i]))
		}
		c.AddOutput(t)
	}
}

// TagConn is required by stats.Handler.
func (h *StatsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

// HandleConn is required by stats.Handler.
func (h *StatsHandler) HandleConn(context.Context, stats.ConnStats) {}

package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// maxMessage bounds one gRPC message either way: room for the largest echo
// tensors.
const maxMessage = 1 << 30

// caller sends a target's prepared request over one long-lived connection
// (gRPC) or keep-alive pool (HTTP).
type caller interface {
	call(ctx context.Context) (code string, err error)
	close()
}

func newCaller(t Target, maxInFlight int) (caller, error) {
	switch {
	case t.Model == ModelLLM && t.Protocol == ProtocolGRPC:
		return newLLMGRPCCaller(t)
	case t.Model == ModelLLM:
		return newLLMHTTPCaller(t, maxInFlight), nil
	}
	if t.Protocol == ProtocolGRPC {
		return newGRPCCaller(t)
	}
	return newHTTPCaller(t, maxInFlight)
}

type grpcCaller struct {
	conn *grpc.ClientConn
	req  preEncoded
}

func newGRPCCaller(t Target) (*grpcCaller, error) {
	req, err := grpcRequest(t)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(t.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("grpc client: %w", err)
	}
	return &grpcCaller{conn: conn, req: req}, nil
}

func (c *grpcCaller) call(ctx context.Context) (string, error) {
	err := c.conn.Invoke(ctx, inference.GRPCInferenceService_ModelInfer_FullMethodName,
		c.req, discard{}, grpc.ForceCodecV2(passthrough{}))
	return codeName(status.Code(err)), err
}

func (c *grpcCaller) close() { _ = c.conn.Close() }

// preEncoded is a request message marshalled once; discard stands for a
// response the load generator does not read. passthrough is the codec that
// moves both without copying or parsing, so a 64 MiB echo tensor costs the
// client nothing per call. It names itself "proto": the bytes on the wire
// are ordinary protobuf.
type (
	preEncoded  []byte
	discard     struct{}
	passthrough struct{}
)

func (passthrough) Name() string { return "proto" }

func (passthrough) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(preEncoded)
	if !ok {
		return nil, fmt.Errorf("loadgen codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (passthrough) Unmarshal(_ mem.BufferSlice, v any) error {
	if _, ok := v.(discard); !ok {
		return fmt.Errorf("loadgen codec: cannot unmarshal into %T", v)
	}
	return nil
}

// codeNames are the canonical gRPC status names, as call records use them.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

func codeName(c codes.Code) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "CODE_" + strconv.Itoa(int(c))
}

type httpCaller struct {
	client    *http.Client
	url       string
	body      []byte
	headerLen string
}

func newHTTPCaller(t Target, maxInFlight int) (*httpCaller, error) {
	body, headerLen, err := httpRequest(t)
	if err != nil {
		return nil, err
	}
	// Enough idle connections for every call in flight, so keep-alive
	// reuses them instead of dialling anew under load.
	tr := &http.Transport{
		MaxIdleConns:        maxInFlight,
		MaxIdleConnsPerHost: maxInFlight,
		DisableCompression:  true,
	}
	return &httpCaller{
		client:    &http.Client{Transport: tr},
		url:       "http://" + t.Addr + "/v2/models/" + t.Model + "/infer",
		body:      body,
		headerLen: headerLen,
	}, nil
}

// Codes for HTTP calls that got no response.
const (
	codeHTTPError    = "error"
	codeHTTPCanceled = "canceled"
)

func (c *httpCaller) call(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return codeHTTPError, fmt.Errorf("build request: %w", err)
	}
	if c.headerLen != "" {
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Inference-Header-Content-Length", c.headerLen)
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return codeHTTPCanceled, err
		}
		return codeHTTPError, err
	}
	// Reading to the end lets the connection go back to the pool.
	_, copyErr := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	code := strconv.Itoa(resp.StatusCode)
	if resp.StatusCode/100 != 2 {
		return code, fmt.Errorf("POST %s: HTTP %s", c.url, code)
	}
	if copyErr != nil {
		return code, fmt.Errorf("read response: %w", copyErr)
	}
	return code, nil
}

func (c *httpCaller) close() { c.client.CloseIdleConnections() }

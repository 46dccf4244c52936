package proxy

import (
	"testing"

	"golang.org/x/net/http2"
)

// The record's code for a stream the upstream reset must be the status a
// gRPC client reports for that reset (grpc-go's http2ErrConvTab).
func TestResetGRPCCodeMatchesClients(t *testing.T) {
	want := map[http2.ErrCode]int{
		http2.ErrCodeNo:                 grpcInternal,
		http2.ErrCodeProtocol:           grpcInternal,
		http2.ErrCodeInternal:           grpcInternal,
		http2.ErrCodeFlowControl:        grpcResourceExhausted,
		http2.ErrCodeSettingsTimeout:    grpcInternal,
		http2.ErrCodeStreamClosed:       grpcInternal,
		http2.ErrCodeFrameSize:          grpcInternal,
		http2.ErrCodeRefusedStream:      grpcUnavailable,
		http2.ErrCodeCancel:             grpcCancelled,
		http2.ErrCodeCompression:        grpcInternal,
		http2.ErrCodeConnect:            grpcInternal,
		http2.ErrCodeEnhanceYourCalm:    grpcResourceExhausted,
		http2.ErrCodeInadequateSecurity: 7,
		http2.ErrCodeHTTP11Required:     grpcInternal,
	}
	for code, w := range want {
		if got := resetGRPCCode(code); got != w {
			t.Errorf("RST_STREAM %v: code %d, a gRPC client reports %d", code, got, w)
		}
	}
}

package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/inferwatch/inferwatch/record"
)

const (
	grpcCancelled         = 1
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcInternal          = 13
	grpcUnavailable       = 14
)

// grpcCodeName turns a grpc-status value into the code's name.
func grpcCodeName(v string) string {
	if len(v) == 1 && v[0] == '0' {
		return "OK" // the common case, without strconv
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return "UNKNOWN"
	}
	return record.GRPCCodeName(n)
}

// isGRPC reports whether r is a gRPC call (application/grpc, +proto etc.).
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && strings.HasPrefix(ct, "application/grpc")
}

// writeGRPCError answers with a gRPC status. Before the response headers went
// out it is a trailers-only response; after, the status goes in the trailers.
func writeGRPCError(w http.ResponseWriter, headerSent bool, code int, msg string) {
	h := w.Header()
	if !headerSent {
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", strconv.Itoa(code))
		h.Set("Grpc-Message", grpcEncodeMessage(msg))
		w.WriteHeader(http.StatusOK)
		return
	}
	h.Set(http.TrailerPrefix+"Grpc-Status", strconv.Itoa(code))
	h.Set(http.TrailerPrefix+"Grpc-Message", grpcEncodeMessage(msg))
}

// grpcEncodeMessage percent-encodes a grpc-message as the gRPC HTTP/2 spec asks.
func grpcEncodeMessage(msg string) string {
	return strings.ReplaceAll(url.PathEscape(msg), "%20", " ")
}

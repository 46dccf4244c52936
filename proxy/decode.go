package proxy

import (
	"net/http"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/internal/callcap"
	"github.com/inferwatch/inferwatch/record"
)

// The decode phase prices (de)serialization: the sidecar parses exactly the
// bytes that passed, off the data path, on the pipeline goroutine.
//
// gRPC: the scanner reads model, version and tensor metadata from every call
// as the bytes stream past, skipping tensor payloads. A share of infer calls
// (Options.DecodeSample) also keeps a copy of the first message, if it is no
// larger than Options.DecodeMaxBytes, and the pipeline unmarshals it into the
// generated ModelInferRequest; that unmarshal time is the decode phase.
//
// HTTP: the bounded prefix captured from each infer body is read by the
// inferapi JSON/binary-extension decoders: every call's by the bracket scan,
// which passes over tensor data without checking its numbers; the decode
// sample's by the validating walk, whose time is the decode phase.

// deferGRPCDecode returns the deferred full decode of a captured message
// (callcap.DecodeGRPC).
func deferGRPCDecode(msg []byte, res *reservation) func(*record.Call) {
	return func(c *record.Call) {
		defer res.release()
		callcap.DecodeGRPC(c, msg)
	}
}

// deferHTTPDecode returns the deferred decode of captured HTTP bodies
// (callcap.DecodeHTTP): the bracket scan for every call, the validating
// walk, timed as the decode phase, when full (the decode sample).
func deferHTTPDecode(rt inferapi.Route, reqHdr http.Header, req *capture, respHdr http.Header, resp *capture, full bool) func(*record.Call) {
	return func(c *record.Call) {
		defer req.release()
		defer resp.release()
		rb := callcap.Body{Header: respHdr}
		if resp != nil {
			rb.Buf, rb.Truncated = resp.buf, resp.truncated
		}
		callcap.DecodeHTTP(c, rt, full, callcap.Body{Header: reqHdr, Buf: req.buf, Truncated: req.truncated}, rb)
	}
}

// decodeHeaders keeps the headers a decoder reads, so the request's own map
// is not shared with the pipeline goroutine.
func decodeHeaders(h http.Header) http.Header {
	out := make(http.Header, len(inferapi.DecodeHeaders))
	for _, k := range inferapi.DecodeHeaders {
		if v := h[k]; v != nil {
			out[k] = v
		}
	}
	return out
}

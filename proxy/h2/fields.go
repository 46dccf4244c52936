package h2

import (
	"bytes"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// connectionSpecific are the fields RFC 9113 §8.2.2 forbids in HTTP/2; a
// request carrying one is malformed.
var connectionSpecific = map[string]bool{
	"connection":        true,
	"proxy-connection":  true,
	"keep-alive":        true,
	"transfer-encoding": true,
	"upgrade":           true,
}

var (
	errMissingPseudo = errors.New("request lacks :method, :scheme or :path")
	errPseudo        = errors.New("unknown, repeated or response pseudo-header field in a request")
	errConnHeader    = errors.New("connection-specific header field")
	errTE            = errors.New(`te other than "trailers"`)
	errTrailerPseudo = errors.New("pseudo-header field in trailers")
	errContentLength = errors.New("invalid content-length")
)

// requestInfo is what the forwarder itself needs from request headers.
type requestInfo struct {
	grpc          bool
	contentLength int64 // -1 when absent
}

// checkRequest validates request header fields per RFC 9113 §8.3.1.
func checkRequest(fields []hpack.HeaderField) (requestInfo, error) {
	info := requestInfo{contentLength: -1}
	var method, scheme, path, authority int
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			switch f.Name {
			case ":method":
				method++
			case ":scheme":
				scheme++
			case ":path":
				if f.Value == "" {
					return info, errMissingPseudo
				}
				path++
			case ":authority":
				authority++
			default:
				return info, errPseudo
			}
			continue
		}
		if connectionSpecific[f.Name] {
			return info, errConnHeader
		}
		switch f.Name {
		case "te":
			if f.Value != "trailers" {
				return info, errTE
			}
		case "content-type":
			info.grpc = strings.HasPrefix(f.Value, "application/grpc")
		case "content-length":
			n, err := strconv.ParseInt(f.Value, 10, 64)
			if err != nil || n < 0 || (info.contentLength >= 0 && info.contentLength != n) {
				return info, errContentLength
			}
			info.contentLength = n
		}
	}
	if method > 1 || scheme > 1 || path > 1 || authority > 1 {
		return info, errPseudo
	}
	if method == 0 || scheme == 0 || path == 0 {
		return info, errMissingPseudo
	}
	return info, nil
}

// checkTrailers validates a trailer block (no pseudo-header fields).
func checkTrailers(fields []hpack.HeaderField) error {
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			return errTrailerPseudo
		}
		if connectionSpecific[f.Name] {
			return errConnHeader
		}
	}
	return nil
}

// responseStatus returns the :status of a response block, 0 when absent or
// malformed.
func responseStatus(fields []hpack.HeaderField) int {
	for _, f := range fields {
		if f.Name == ":status" {
			n, err := strconv.Atoi(f.Value)
			if err != nil || n < 100 || n > 999 {
				return 0
			}
			return n
		}
		if !strings.HasPrefix(f.Name, ":") {
			break
		}
	}
	return 0
}

// encoder re-encodes header blocks for one connection's HPACK context.
type encoder struct {
	buf bytes.Buffer
	enc *hpack.Encoder
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = hpack.NewEncoder(&e.buf)
	return e
}

// block encodes fields, less connection-specific ones, and returns the
// block; it is valid until the next call.
func (e *encoder) block(fields []hpack.HeaderField) []byte {
	e.buf.Reset()
	for _, f := range fields {
		if connectionSpecific[f.Name] {
			continue
		}
		e.enc.WriteField(f)
	}
	return e.buf.Bytes()
}

// writeHeaders writes a header block as HEADERS and as many CONTINUATION
// frames as maxFrame asks.
func writeHeaders(fr *http2.Framer, id uint32, block []byte, endStream bool, maxFrame uint32) error {
	first := block
	if uint32(len(first)) > maxFrame {
		first = block[:maxFrame]
	}
	rest := block[len(first):]
	err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(rest) == 0})
	for err == nil && len(rest) > 0 {
		chunk := rest
		if uint32(len(chunk)) > maxFrame {
			chunk = rest[:maxFrame]
		}
		rest = rest[len(chunk):]
		err = fr.WriteContinuation(id, len(rest) == 0, chunk)
	}
	return err
}

// gRPC status codes the forwarder answers with itself.
const (
	grpcResourceExhausted = 8
	grpcUnavailable       = 14
)

// grpcStatusFields are a gRPC status as trailers; with headers true, as a
// trailers-only response.
func grpcStatusFields(headers bool, code int, msg string) []hpack.HeaderField {
	var out []hpack.HeaderField
	if headers {
		out = append(out, hpack.HeaderField{Name: ":status", Value: "200"}, hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	}
	return append(out,
		hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(code)},
		hpack.HeaderField{Name: "grpc-message", Value: strings.ReplaceAll(url.PathEscape(msg), "%20", " ")})
}

// httpStatusFields are a plain-text error response's headers.
func httpStatusFields(status int) []hpack.HeaderField {
	return []hpack.HeaderField{{Name: ":status", Value: strconv.Itoa(status)}, {Name: "content-length", Value: "0"}}
}

package proxy

import (
	"net/http"
	"slices"
	"strings"
)

// hopHeaders are meaningful only for a single transport-level connection and
// are not forwarded (RFC 9110 §7.6.1), as httputil.ReverseProxy does.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// removeHopHeaders deletes hop-by-hop headers, including those named by
// Connection, in place. "TE: trailers" survives because gRPC servers require it
// and it means this proxy forwards trailers, which it does.
func removeHopHeaders(h http.Header) {
	teTrailers := false
	for _, v := range h["Te"] {
		if tokenListHas(v, "trailers") {
			teTrailers = true
		}
	}
	for _, f := range h["Connection"] {
		for _, sf := range strings.Split(f, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	if teTrailers {
		h["Te"] = []string{"trailers"}
	}
}

func tokenListHas(v, token string) bool {
	for _, t := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// copyHeader adds every value of src to dst.
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		if existing, ok := dst[k]; ok {
			dst[k] = append(existing, vv...)
			continue
		}
		dst[k] = vv
	}
}

// announceTrailers declares the trailer keys the upstream announced up front,
// so an HTTP/1.1 client learns them before the body, and returns them.
func announceTrailers(dst http.Header, trailer http.Header) []string {
	if len(trailer) == 0 {
		return nil
	}
	keys := make([]string, 0, len(trailer))
	for k := range trailer {
		keys = append(keys, k)
	}
	dst.Add("Trailer", strings.Join(keys, ", "))
	return keys
}

// copyTrailers writes the upstream's trailers after the body. Keys announced
// before the body go in as themselves; others use http.TrailerPrefix, which is
// how net/http sends trailers it learned late (always the case for HTTP/2).
func copyTrailers(dst http.Header, trailer http.Header, announced []string) {
	for k, vv := range trailer {
		if !slices.Contains(announced, k) {
			k = http.TrailerPrefix + k
		}
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

package interceptors

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/record"
)

// HTTP wraps a handler so each request it serves becomes a record. apiHint
// is as for the proxy ("tfserving" or "kserve_v1").
func HTTP(next http.Handler, p *record.Pipeline, apiHint string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := inferapi.HTTPRoute(r.Method, r.URL.Path, apiHint)
		c := &record.Call{Start: time.Now(), Protocol: record.ProtocolHTTP, API: rt.API, Method: rt.Method,
			Model: rt.Model, Version: rt.Version, RequestMessages: 1, ResponseMessages: 1}
		body := &countingBody{ReadCloser: r.Body, c: c}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = body
		} else {
			c.RequestEnd = 1
		}
		rw := &recordingWriter{ResponseWriter: w, c: c}
		next.ServeHTTP(rw, r)
		c.End = time.Since(c.Start)
		c.ResponseEnd = c.End
		if rw.status == 0 {
			rw.status = http.StatusOK
		}
		c.Code = strconv.Itoa(rw.status)
		c.UpstreamStart, c.UpstreamSent = c.RequestEnd, c.RequestEnd
		p.Submit(c)
	})
}

type countingBody struct {
	io.ReadCloser
	c *record.Call
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.RequestBytes += int64(n)
	if err == io.EOF && b.c.RequestEnd == 0 {
		b.c.RequestEnd = time.Since(b.c.Start)
	}
	return n, err
}

type recordingWriter struct {
	http.ResponseWriter
	c      *record.Call
	status int
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.c.FirstByte = time.Since(w.c.Start)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.c.ResponseBytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

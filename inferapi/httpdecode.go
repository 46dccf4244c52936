package inferapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/inferwatch/inferwatch/record"
)

// headerJSONLength is KServe v2's binary tensor extension header: the body
// is a JSON header of that many bytes followed by the tensors' raw bytes.
const headerJSONLength = "Inference-Header-Content-Length"

// DecodeHeaders are the headers the HTTP decoders read, canonical: a front
// that keeps a call's headers for its deferred decode keeps these (one list,
// so that no front drops one the decoders need: without Content-Encoding a
// gzip body reads as malformed JSON).
var DecodeHeaders = [...]string{"Content-Type", "Content-Encoding", headerJSONLength}

// DecodeHTTPRequest reads what an HTTP request body says about the call: the
// inputs, batch size, and for OpenAI the model and streaming. body is the
// prefix the proxy captured; truncated says the body went on past it, which
// is not an error: whatever the prefix holds is kept. Bodies that are not
// JSON (by Content-Type), are content-encoded, or belong to an API without a
// decoder (TorchServe, unknown) are left alone. The error, for a malformed
// payload only, also marks the call DecodeFail. It validates every byte as
// encoding/json would: the decode sample's walk, whose time is the decode
// phase.
func DecodeHTTPRequest(r Route, h http.Header, body []byte, truncated bool, c *record.Call) error {
	return decodeHTTP(r, h, body, truncated, c, false, false)
}

// DecodeHTTPResponse reads what an HTTP response body says about the call:
// the outputs and, when the call has none yet, the model and version. Its
// terms are DecodeHTTPRequest's.
func DecodeHTTPResponse(r Route, h http.Header, body []byte, truncated bool, c *record.Call) error {
	return decodeHTTP(r, h, body, truncated, c, true, false)
}

// ScanHTTPRequest is DecodeHTTPRequest for every call: from valid JSON it
// fills the record exactly as DecodeHTTPRequest does, but it passes over
// skipped arrays — tensor data above all — by their brackets and strings
// (jsonLexer.skipBrackets), so it costs a fraction of a validating walk on
// large bodies, and a number malformed inside a data array goes unnoticed
// (the decode sample's DecodeHTTPRequest notices it). Anything malformed
// outside skipped arrays, and a body cut short, fails as it does there.
func ScanHTTPRequest(r Route, h http.Header, body []byte, truncated bool, c *record.Call) error {
	return decodeHTTP(r, h, body, truncated, c, false, true)
}

// ScanHTTPResponse is ScanHTTPRequest for a response body.
func ScanHTTPResponse(r Route, h http.Header, body []byte, truncated bool, c *record.Call) error {
	return decodeHTTP(r, h, body, truncated, c, true, true)
}

func decodeHTTP(r Route, h http.Header, body []byte, truncated bool, c *record.Call, response, scan bool) error {
	if !r.ReadsBody() {
		return nil
	}
	var err error
	if r.Infer {
		err = decodeInfer(r, h, body, truncated, c, response, scan)
	} else if response { // a model status answer; its request has no body
		err = decodeStatus(h, body, truncated, c, scan)
	}
	if err != nil {
		c.DecodeFail = true
		side := "request"
		if response {
			side = "response"
		}
		return fmt.Errorf("decode %s %s %s: %w", r.API, r.Method, side, err)
	}
	return nil
}

func decodeInfer(r Route, h http.Header, body []byte, truncated bool, c *record.Call, response, scan bool) error {
	var err error
	switch r.API {
	case record.APIKServeV2:
		if r.Method == MethodGenerate || r.Method == MethodGenerateStream {
			err = decodeGenerate(h, body, truncated, c, response, scan)
		} else {
			err = decodeV2(h, body, truncated, c, response, scan)
		}
	case record.APIKServeV1, record.APITFServing:
		err = decodeV1(h, body, truncated, c, response, scan)
	case record.APIOpenAI:
		if response {
			err = decodeOpenAIResponse(r.Method, h, body, truncated, c, scan)
		} else {
			err = decodeOpenAIRequest(r.Method, h, body, truncated, c, scan)
		}
	}
	return err
}

// bodyKind is how a body is encoded, as far as the decoders care.
type bodyKind uint8

const (
	bodyOpaque bodyKind = iota // not ours to parse
	bodyJSON
	bodyEventStream
)

// kindOf reads Content-Type (and Content-Encoding: a compressed body cannot
// be read from a prefix). A body without a Content-Type counts as JSON when
// it looks like it, and so does one sent as a form: curl -d's default type,
// with which TF Serving's, KServe's and Triton's own examples post JSON that
// the servers read as JSON.
func kindOf(h http.Header, body []byte) bodyKind {
	if encoded(h) {
		return bodyOpaque
	}
	media, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	media = strings.ToLower(strings.TrimSpace(media))
	switch {
	case media == "application/json" || strings.HasSuffix(media, "+json"):
		return bodyJSON
	case media == "text/event-stream":
		return bodyEventStream
	case media == "", media == "application/x-www-form-urlencoded":
		if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '{' {
			return bodyJSON
		}
	}
	return bodyOpaque
}

// encoded says the body is under a Content-Encoding other than identity.
func encoded(h http.Header) bool {
	enc := h.Get("Content-Encoding")
	return enc != "" && !strings.EqualFold(enc, "identity")
}

// finish turns a walk's error into the decoder's: a cut prefix is fine when
// the body was truncated, and only then.
func finish(err error, truncated bool) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if truncated {
			return nil
		}
		return fmt.Errorf("JSON ends early: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// v2Tensor is one entry of a KServe v2 JSON inputs or outputs list.
type v2Tensor struct {
	record.Tensor
	elems      int64 // from the shape; -1 unknown
	shapeDone  bool
	binarySize int64 // parameters.binary_data_size; -1 absent
	seen       bool
}

// decodeV2 reads a KServe v2 JSON body, or the JSON header of a body in the
// binary tensor extension.
func decodeV2(h http.Header, body []byte, truncated bool, c *record.Call, response, scan bool) error {
	if len(body) == 0 || encoded(h) {
		return nil // nothing captured, or nothing readable: the binary extension's JSON is compressed too
	}
	jsonPart, jsonTruncated := body, truncated
	binary := false
	if v := h.Get(headerJSONLength); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%s %.32q is not a length", headerJSONLength, v)
		}
		if n > int64(len(body)) {
			if !truncated {
				return fmt.Errorf("%s %d exceeds the %d byte body", headerJSONLength, n, len(body))
			}
		} else {
			jsonPart, jsonTruncated = body[:n], false
		}
		binary = true
	} else if kindOf(h, body) != bodyJSON {
		return nil
	}

	list, add, paths := "inputs", c.AddInput, &v2InputPaths
	if response {
		list, add, paths = "outputs", c.AddOutput, &v2OutputPaths
	}
	var binaryTotal int64
	first := true
	w := newJSONWalk(jsonPart).scanning(scan)
	err := w.object("body", func(key string) error {
		switch {
		case key == list:
			_, err := w.array(list, func(int) error {
				t, err := w.v2Tensor(paths)
				if t.seen {
					if t.binarySize >= 0 {
						t.Bytes = t.binarySize
						binaryTotal += t.binarySize
					} else if size := datatypeSize(t.Datatype); t.shapeDone && t.elems > 0 && size > 0 && t.elems <= (1<<62)/size {
						t.Bytes = t.elems * size
					}
					if first && !response {
						c.BatchSize = BatchSize(t.Shape)
					}
					first = false
					add(t.Tensor)
				}
				return err
			})
			return err
		case response && key == "model_name":
			s, err := w.string(key)
			if err == nil && c.Model == "" {
				c.Model = s
			}
			return err
		case response && key == "model_version":
			s, err := w.string(key)
			if err == nil && c.Version == "" {
				c.Version = s
			}
			return err
		}
		return w.skip()
	})
	if err = finish(err, jsonTruncated); err != nil {
		return err
	}
	if binary && !truncated && binaryTotal != int64(len(body))-int64(len(jsonPart)) {
		return fmt.Errorf("binary_data_size totals %d bytes, body carries %d after the JSON header", binaryTotal, len(body)-len(jsonPart))
	}
	return nil
}

// v2Paths names a tensor list's fields in error messages, spelt out once
// rather than built per tensor.
type v2Paths struct {
	list, name, datatype, shape, parameters, binaryDataSize string
}

var (
	v2InputPaths  = newV2Paths("inputs")
	v2OutputPaths = newV2Paths("outputs")
)

func newV2Paths(list string) v2Paths {
	return v2Paths{
		list:           list,
		name:           list + ".name",
		datatype:       list + ".datatype",
		shape:          list + ".shape",
		parameters:     list + ".parameters",
		binaryDataSize: list + ".parameters.binary_data_size",
	}
}

// v2Tensor reads one tensor object. What it read before an error is
// returned with it, seen when any field was: a cut body still names its
// tensors.
func (w *jsonWalk) v2Tensor(what *v2Paths) (v2Tensor, error) {
	t := v2Tensor{binarySize: -1, elems: -1}
	err := w.object(what.list, func(key string) error {
		var err error
		known := true
		switch key {
		case "name":
			t.Name, err = w.string(what.name)
		case "datatype":
			t.Datatype, err = w.string(what.datatype)
		case "shape":
			t.Shape, t.elems, t.shapeDone, err = w.shape(what.shape)
			if !t.shapeDone {
				t.Shape, t.elems = nil, -1
			}
		case "parameters":
			err = w.object(what.parameters, func(key string) error {
				if key != "binary_data_size" {
					return w.skip()
				}
				n, err := w.int64(what.binaryDataSize)
				if err == nil && n < 0 {
					err = fmt.Errorf("%s is negative", what.binaryDataSize)
				}
				t.binarySize = n
				return err
			})
		default: // data, above all: passed over, never built
			known, err = false, w.skip()
		}
		if err == nil && known {
			t.seen = true
		}
		return err
	})
	if err == nil {
		t.seen = true // even {} is a tensor
	}
	return t, err
}

// datatypeSize is the bytes of one element of a KServe v2 datatype; 0 for
// BYTES (variable) and unknown types.
func datatypeSize(dt string) int64 {
	switch dt {
	case "BOOL", "UINT8", "INT8":
		return 1
	case "UINT16", "INT16", "FP16", "BF16":
		return 2
	case "UINT32", "INT32", "FP32":
		return 4
	case "UINT64", "INT64", "FP64":
		return 8
	}
	return 0
}

// decodeV1 reads a KServe v1 or TF Serving JSON body: row ("instances",
// "examples") or columnar ("inputs") requests, and "predictions", "result"
// or "outputs" responses.
func decodeV1(h http.Header, body []byte, truncated bool, c *record.Call, response, scan bool) error {
	if kindOf(h, body) != bodyJSON || len(body) == 0 {
		return nil
	}
	rows, columns, add := "instances", "inputs", c.AddInput
	if response {
		rows, columns, add = "predictions", "outputs", c.AddOutput
	}
	first := true
	addColumn := func(name string, dims []int64, done bool) {
		t := record.Tensor{Name: name}
		if done {
			t.Shape = dims
		}
		if first && !response {
			c.BatchSize = BatchSize(t.Shape)
		}
		first = false
		add(t)
	}
	w := newJSONWalk(body).scanning(scan)
	err := w.object("body", func(key string) error {
		switch {
		case key == rows || (key == "examples" && !response) || (key == "result" && response):
			n, err := w.array(key, func(int) error { return w.skip() })
			if err == nil {
				if response {
					c.OutputCount = n
				} else {
					c.BatchSize = n
				}
			}
			return err
		case key == columns:
			return w.columns(addColumn)
		}
		return w.skip()
	})
	return finish(err, truncated)
}

// columns reads TF Serving's columnar format: an object of named inputs or
// outputs, or a single unnamed one. A column cut by the prefix is still
// named, without a shape.
func (w *jsonWalk) columns(add func(name string, dims []int64, done bool)) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		// One unnamed column: tok opened it, so read it as the top level.
		dims, done, err := w.nestedShapeFrom(tok)
		if err == nil {
			add("", dims, done)
		}
		return err
	}
	return w.members(func(name string) error {
		dims, done, err := w.nestedShape()
		add(clipField(name), dims, done)
		return err
	})
}

// decodeGenerate reads a body of Triton's generate extension: a JSON object
// (text_input or text_output and parameters; no tensors to count), checked
// for well-formedness, or a stream of them, which makes the call a stream.
func decodeGenerate(h http.Header, body []byte, truncated bool, c *record.Call, response, scan bool) error {
	switch kindOf(h, body) {
	case bodyJSON:
	case bodyEventStream:
		if response {
			c.Stream = true
		}
		return nil
	default:
		return nil
	}
	if len(body) == 0 {
		return nil
	}
	w := newJSONWalk(body).scanning(scan)
	return finish(w.object("body", func(string) error { return w.skip() }), truncated)
}

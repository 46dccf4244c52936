package inferapi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// jsonWalk reads a JSON document token by token instead of unmarshalling
// it, so that data arrays are passed over without being built and a body cut
// by the capture bound still yields the keys before the cut: the cut surfaces
// as io.EOF or io.ErrUnexpectedEOF from whichever read met it, after the
// callers have kept what they had.
type jsonWalk struct {
	src []byte
	dec *jsonLexer
}

func newJSONWalk(b []byte) *jsonWalk { return &jsonWalk{src: b, dec: newJSONLexer(b)} }

// scanning sets whether skipped arrays are passed over by their brackets
// alone (jsonLexer.scan).
func (w *jsonWalk) scanning(on bool) *jsonWalk {
	w.dec.scan = on
	return w
}

// peek returns the first byte of the next value, or 0 at the end of the
// input. It tells a list from a scalar even when the value is cut before the
// decoder can return its first token.
func (w *jsonWalk) peek() byte {
	for _, c := range w.src[min(w.dec.InputOffset(), int64(len(w.src))):] {
		switch c {
		case ' ', '\t', '\r', '\n', ':', ',':
		default:
			return c
		}
	}
	return 0
}

// object reads an object, calling fn with each key; fn must read the value.
func (w *jsonWalk) object(what string, fn func(key string) error) error {
	t, err := w.dec.next()
	if err != nil {
		return err
	}
	if t.kind != '{' {
		return fmt.Errorf("%s: want an object, got %s", what, tokenKind(t.token()))
	}
	return w.members(fn)
}

// members reads the rest of an object whose '{' was read.
func (w *jsonWalk) members(fn func(key string) error) error {
	for w.dec.More() {
		t, err := w.dec.next()
		if err != nil {
			return err
		}
		if err := fn(t.str); err != nil { // the decoder allows only string keys
			return err
		}
	}
	_, err := w.dec.next()
	return err
}

// array reads an array, calling fn before each element; fn must read it. It
// returns how many elements it saw, complete or not.
func (w *jsonWalk) array(what string, fn func(i int) error) (int, error) {
	t, err := w.dec.next()
	if err != nil {
		return 0, err
	}
	if t.kind != '[' {
		return 0, fmt.Errorf("%s: want an array, got %s", what, tokenKind(t.token()))
	}
	return w.elements(fn)
}

// elements reads the rest of an array whose '[' was read.
func (w *jsonWalk) elements(fn func(i int) error) (int, error) {
	n := 0
	for w.dec.More() {
		if err := fn(n); err != nil {
			return n, err
		}
		n++
	}
	_, err := w.dec.next()
	return n, err
}

// skip reads a value of any kind, at byte level: a token walk over a
// tensor's data array would build a token per element.
func (w *jsonWalk) skip() error { return w.dec.Skip() }

// skipFrom reads the rest of a value whose first token was tok.
func (w *jsonWalk) skipFrom(tok json.Token) error {
	depth := 0
	for {
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
		var err error
		if tok, err = w.dec.Token(); err != nil {
			return err
		}
	}
}

// string reads a string, kept to maxField bytes: it may become a label.
func (w *jsonWalk) string(what string) (string, error) {
	t, err := w.dec.next()
	if err != nil {
		return "", err
	}
	if t.kind != '"' {
		return "", fmt.Errorf("%s: want a string, got %s", what, tokenKind(t.token()))
	}
	return clipField(t.str), nil
}

// clipField keeps a string to maxField bytes, dropping a rune cut in two.
func clipField(s string) string {
	if len(s) <= maxField {
		return s
	}
	return strings.ToValidUTF8(s[:maxField], "")
}

// int64 reads an integer.
func (w *jsonWalk) int64(what string) (int64, error) {
	t, err := w.dec.next()
	if err != nil {
		return 0, err
	}
	if t.kind != '0' {
		return 0, fmt.Errorf("%s: want an integer, got %s", what, tokenKind(t.token()))
	}
	n, err := strconv.ParseInt(string(t.num), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: want an integer, got %.32s", what, t.num)
	}
	return n, nil
}

// shape reads an integer array of at most maxDims kept dimensions. done says
// the array closed; elems is the product of all dimensions, -1 when one is
// negative (dynamic) or the product overflows.
func (w *jsonWalk) shape(what string) (dims []int64, elems int64, done bool, err error) {
	var kept [maxDims]int64 // gathered here, then copied once
	n := 0
	elems = 1
	_, err = w.array(what, func(int) error {
		d, err := w.int64(what)
		if err != nil {
			return err
		}
		if n < maxDims {
			kept[n] = d
			n++
		}
		elems = mulElems(elems, d)
		return nil
	})
	if n > 0 {
		dims = append([]int64(nil), kept[:n]...)
	}
	return dims, elems, err == nil, err
}

// nestedShape reads a value and, when it is a nested array, returns each
// level's length taken along first elements: the shape of a row-major tensor
// written as JSON lists. A scalar or an object is a leaf. done says the shape
// is whole: every array along the way closed.
func (w *jsonWalk) nestedShape() (dims []int64, done bool, err error) {
	return w.nestedShapeAt(0)
}

// nestedShapeAt is nestedShape for a value level arrays deep.
func (w *jsonWalk) nestedShapeAt(level int) (dims []int64, done bool, err error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, false, err
	}
	return w.nestedShapeFromAt(tok, level)
}

// nestedShapeFrom is nestedShape for a value whose first token was tok.
func (w *jsonWalk) nestedShapeFrom(tok json.Token) (dims []int64, done bool, err error) {
	return w.nestedShapeFromAt(tok, 0)
}

// nestedShapeFromAt is nestedShapeFrom for a value level arrays deep. Past
// maxDims levels, whose lengths would not be kept, the value is passed over
// without recursing: a body of a million '[' would otherwise take a stack
// frame each, hundreds of megabytes of stack for one call, and past the
// runtime's stack limit a fatal error no recover catches.
func (w *jsonWalk) nestedShapeFromAt(tok json.Token, level int) (dims []int64, done bool, err error) {
	switch tok {
	case json.Delim('{'):
		return nil, true, w.skipFrom(tok)
	case json.Delim('['):
		if level >= maxDims {
			return nil, true, w.skipFrom(tok)
		}
	default:
		return nil, true, nil
	}
	var inner []int64
	n, err := w.elements(func(i int) error {
		if i > 0 {
			return w.skip()
		}
		var err error
		inner, _, err = w.nestedShapeAt(level + 1)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	dims = append([]int64{int64(n)}, inner[:min(len(inner), maxDims-1)]...)
	return dims, true, nil
}

// mulElems multiplies an element count by a dimension, keeping -1 for
// unknown.
func mulElems(elems, d int64) int64 {
	if elems < 0 || d < 0 {
		return -1
	}
	if d != 0 && elems > (1<<62)/d {
		return -1
	}
	return elems * d
}

// tokenKind names a token's JSON kind for an error message, without echoing
// untrusted content.
func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	switch tok {
	case json.Delim('{'):
		return "an object"
	case json.Delim('['):
		return "an array"
	}
	return fmt.Sprintf("%v", tok)
}

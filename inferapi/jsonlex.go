package inferapi

import (
	"encoding/json"
	"fmt"
	"io"
)

// jsonLexer is the part of encoding/json's Decoder that jsonWalk uses —
// Token (numbers as json.Number), More, InputOffset — over a byte slice,
// plus Skip, which passes over a whole value at byte level. Skipping a
// tensor's data array was the decoder's main cost through json.Decoder,
// which scanned each skipped value twice with its per-byte state machine
// (Decode into a json.RawMessage): 25% of the proxy's CPU under HTTP JSON
// load. It validates as strictly as the Decoder and returns the same
// tokens, and errors at the same tokens; FuzzJSONLexer holds the two
// against each other. Input that ends inside a value yields
// io.ErrUnexpectedEOF, at a token boundary io.EOF, as the Decoder does; a
// number that runs to the end of the input is taken whole, as the Decoder
// takes it, and so is "1x" (the x is the next token's error).
type jsonLexer struct {
	src   []byte
	pos   int
	state []lexState // one per open container, innermost last
	top   lexState   // the state outside any container
}

type lexState uint8

const (
	lexValue      lexState = iota // a value may come (top level)
	lexArrayStart                 // after '['
	lexArrayValue                 // after ','
	lexArrayComma                 // after an element
	lexObjStart                   // after '{'
	lexObjKey                     // after ','
	lexObjColon                   // after a key
	lexObjValue                   // after ':'
	lexObjComma                   // after a member's value
)

// maxJSONDepth is the Decoder's nesting limit within one skipped value.
const maxJSONDepth = 10000

func newJSONLexer(src []byte) *jsonLexer { return &jsonLexer{src: src} }

func (l *jsonLexer) cur() *lexState {
	if n := len(l.state); n > 0 {
		return &l.state[n-1]
	}
	return &l.top
}

// InputOffset is the offset just past the last token read.
func (l *jsonLexer) InputOffset() int64 { return int64(l.pos) }

func (l *jsonLexer) syntax(msg string) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", l.pos, msg)
}

// skipSpace moves past white space and reports the next byte; ok is false
// at the end of the input, where, like the Decoder, it leaves the offset
// before the trailing space.
func (l *jsonLexer) skipSpace() (byte, bool) {
	for i := l.pos; i < len(l.src); i++ {
		switch c := l.src[i]; c {
		case ' ', '\t', '\r', '\n':
		default:
			l.pos = i
			return c, true
		}
	}
	return 0, false
}

// More reports whether the current array or object has another element.
func (l *jsonLexer) More() bool {
	c, ok := l.skipSpace()
	return ok && c != ']' && c != '}'
}

func (l *jsonLexer) valueAllowed() bool {
	switch *l.cur() {
	case lexValue, lexArrayStart, lexArrayValue, lexObjValue:
		return true
	}
	return false
}

// valueEnd moves the state past a complete value.
func (l *jsonLexer) valueEnd() {
	switch s := l.cur(); *s {
	case lexArrayStart, lexArrayValue:
		*s = lexArrayComma
	case lexObjValue:
		*s = lexObjComma
	}
}

// Token returns the next token: json.Delim for [ ] { }, string, json.Number,
// bool or nil. Commas and colons are checked and consumed.
func (l *jsonLexer) Token() (json.Token, error) {
	for {
		c, ok := l.skipSpace()
		if !ok {
			return nil, io.EOF
		}
		s := l.cur()
		switch c {
		case '[', '{':
			if !l.valueAllowed() {
				return nil, l.syntax("unexpected " + string(c))
			}
			l.pos++
			next := lexArrayStart
			if c == '{' {
				next = lexObjStart
			}
			l.state = append(l.state, next)
			return json.Delim(c), nil
		case ']':
			if *s != lexArrayStart && *s != lexArrayComma {
				return nil, l.syntax("unexpected ]")
			}
			l.pos++
			l.state = l.state[:len(l.state)-1]
			l.valueEnd()
			return json.Delim(c), nil
		case '}':
			if *s != lexObjStart && *s != lexObjComma {
				return nil, l.syntax("unexpected }")
			}
			l.pos++
			l.state = l.state[:len(l.state)-1]
			l.valueEnd()
			return json.Delim(c), nil
		case ':':
			if *s != lexObjColon {
				return nil, l.syntax("unexpected :")
			}
			l.pos++
			*s = lexObjValue
			continue
		case ',':
			switch *s {
			case lexArrayComma:
				*s = lexArrayValue
			case lexObjComma:
				*s = lexObjKey
			default:
				return nil, l.syntax("unexpected ,")
			}
			l.pos++
			continue
		case '"':
			if *s == lexObjStart || *s == lexObjKey {
				str, err := l.str()
				if err != nil {
					return nil, err
				}
				*s = lexObjColon
				return str, nil
			}
		}
		if !l.valueAllowed() {
			return nil, l.syntax("unexpected " + quoteByte(c))
		}
		start := l.pos
		if err := l.scalar(); err != nil {
			return nil, err
		}
		l.valueEnd()
		return l.scalarToken(start)
	}
}

// Skip passes over the next value whole, as Decoder.Decode would read it.
func (l *jsonLexer) Skip() error {
	// A comma or colon owed before the value, as Decode expects them.
	c, ok := l.skipSpace()
	switch s := l.cur(); *s {
	case lexArrayComma:
		if !ok {
			return io.EOF
		}
		if c != ',' {
			return l.syntax("expected , in array")
		}
		l.pos++
		*s = lexArrayValue
	case lexObjColon:
		if !ok {
			return io.EOF
		}
		if c != ':' {
			return l.syntax("expected : after object key")
		}
		l.pos++
		*s = lexObjValue
	}
	if !l.valueAllowed() {
		return l.syntax("not at the beginning of a value")
	}
	if _, ok := l.skipSpace(); !ok {
		return io.EOF
	}
	if err := l.value(0); err != nil { // the Decoder counts depth per Decode
		return err
	}
	l.valueEnd()
	return nil
}

// value passes over one value starting at pos; depth counts the open
// containers around it.
func (l *jsonLexer) value(depth int) error {
	c, ok := l.skipSpace()
	if !ok {
		return io.ErrUnexpectedEOF
	}
	switch c {
	case '[':
		return l.array(depth + 1)
	case '{':
		return l.object(depth + 1)
	case '"':
		return l.skipString()
	}
	return l.scalar()
}

func (l *jsonLexer) array(depth int) error {
	if depth > maxJSONDepth {
		return l.syntax("exceeded max depth")
	}
	l.pos++ // '['
	c, ok := l.skipSpace()
	if !ok {
		return io.ErrUnexpectedEOF
	}
	if c == ']' {
		l.pos++
		return nil
	}
	for {
		if err := l.value(depth); err != nil {
			return err
		}
		c, ok := l.skipSpace()
		if !ok {
			return io.ErrUnexpectedEOF
		}
		l.pos++
		switch c {
		case ',':
		case ']':
			return nil
		default:
			l.pos--
			return l.syntax("after array element: " + quoteByte(c))
		}
	}
}

func (l *jsonLexer) object(depth int) error {
	if depth > maxJSONDepth {
		return l.syntax("exceeded max depth")
	}
	l.pos++ // '{'
	c, ok := l.skipSpace()
	if !ok {
		return io.ErrUnexpectedEOF
	}
	if c == '}' {
		l.pos++
		return nil
	}
	for {
		c, ok := l.skipSpace()
		if !ok {
			return io.ErrUnexpectedEOF
		}
		if c != '"' {
			return l.syntax("object key: " + quoteByte(c))
		}
		if err := l.skipString(); err != nil {
			return err
		}
		if c, ok = l.skipSpace(); !ok {
			return io.ErrUnexpectedEOF
		}
		if c != ':' {
			return l.syntax("after object key: " + quoteByte(c))
		}
		l.pos++
		if err := l.value(depth); err != nil {
			return err
		}
		if c, ok = l.skipSpace(); !ok {
			return io.ErrUnexpectedEOF
		}
		l.pos++
		switch c {
		case ',':
		case '}':
			return nil
		default:
			l.pos--
			return l.syntax("after object value: " + quoteByte(c))
		}
	}
}

// skipString passes over a string whose opening quote is at pos, checking
// its escapes and that it holds no control characters.
func (l *jsonLexer) skipString() error {
	i := l.pos + 1
	for {
		// The common case: plain bytes up to the next quote or backslash.
		for i < len(l.src) {
			c := l.src[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			i++
		}
		if i >= len(l.src) {
			l.pos = i
			return io.ErrUnexpectedEOF
		}
		switch c := l.src[i]; {
		case c == '"':
			l.pos = i + 1
			return nil
		case c < 0x20:
			l.pos = i
			return l.syntax("control character in string")
		}
		// A backslash escape.
		if i+1 >= len(l.src) {
			l.pos = i + 1
			return io.ErrUnexpectedEOF
		}
		switch l.src[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			for k := i + 2; k < i+6; k++ {
				if k >= len(l.src) {
					l.pos = k
					return io.ErrUnexpectedEOF
				}
				if !isHex(l.src[k]) {
					l.pos = k
					return l.syntax("invalid \\u escape")
				}
			}
			i += 6
		default:
			l.pos = i + 1
			return l.syntax("invalid escape in string")
		}
	}
}

// str reads a string token, unescaped as encoding/json does (invalid UTF-8
// becomes U+FFFD).
func (l *jsonLexer) str() (string, error) {
	start := l.pos
	if err := l.skipString(); err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(l.src[start:l.pos], &s); err != nil {
		return "", l.syntax("string")
	}
	return s, nil
}

// scalar passes over a string, number or literal at pos.
func (l *jsonLexer) scalar() error {
	c := l.src[l.pos]
	switch {
	case c == '"':
		return l.skipString()
	case c == '-' || (c >= '0' && c <= '9'):
		return l.number()
	case c == 't':
		return l.literal("true")
	case c == 'f':
		return l.literal("false")
	case c == 'n':
		return l.literal("null")
	}
	return l.syntax("looking for beginning of value: " + quoteByte(c))
}

func (l *jsonLexer) literal(word string) error {
	for k := 0; k < len(word); k++ {
		if l.pos+k >= len(l.src) {
			l.pos += k
			return io.ErrUnexpectedEOF
		}
		if l.src[l.pos+k] != word[k] {
			l.pos += k
			return l.syntax("in literal " + word)
		}
	}
	l.pos += len(word)
	return nil
}

// number passes over a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (l *jsonLexer) number() error {
	src, i := l.src, l.pos
	if src[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
			n++
		}
		return n
	}
	// A number cut by the end of the input is whole if what is there is
	// a valid number, as the Decoder has it.
	eof := func() error {
		l.pos = i
		return io.ErrUnexpectedEOF
	}
	if i >= len(src) {
		return eof()
	}
	switch {
	case src[i] == '0':
		i++
	case src[i] >= '1' && src[i] <= '9':
		digits()
	default:
		l.pos = i
		return l.syntax("in numeric literal")
	}
	if i < len(src) && src[i] == '.' {
		i++
		if i >= len(src) {
			return eof()
		}
		if digits() == 0 {
			l.pos = i
			return l.syntax("after decimal point in numeric literal")
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= len(src) {
			return eof()
		}
		if digits() == 0 {
			l.pos = i
			return l.syntax("in exponent of numeric literal")
		}
	}
	l.pos = i
	return nil
}

// scalarToken turns the scalar read from start into its token.
func (l *jsonLexer) scalarToken(start int) (json.Token, error) {
	b := l.src[start:l.pos]
	switch b[0] {
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, l.syntax("string")
		}
		return s, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case 'n':
		return nil, nil
	}
	return json.Number(b), nil
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// quoteByte names a byte for an error message without echoing content
// beyond it.
func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", c)
	}
	return fmt.Sprintf("byte %#x", c)
}

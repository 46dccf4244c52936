package inferapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
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
	src []byte
	pos int
	// One state per open container, innermost last: the first ones in
	// shallow, which spares an allocation per document, the rest in deep.
	shallow [16]lexState
	deep    []lexState
	open    int      // containers open
	top     lexState // the state outside any container
	// general turns numericRun off, for the tests that hold the fast path
	// to the general one.
	general bool
	// scan passes over skipped arrays by their brackets and strings alone
	// (skipBrackets), without vouching for the numbers between them.
	scan bool
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
	switch n := l.open; {
	case n > len(l.shallow):
		return &l.deep[n-1-len(l.shallow)]
	case n > 0:
		return &l.shallow[n-1]
	}
	return &l.top
}

// push opens a container in state s.
func (l *jsonLexer) push(s lexState) {
	if l.open < len(l.shallow) {
		l.shallow[l.open] = s
	} else {
		l.deep = append(l.deep[:l.open-len(l.shallow)], s)
	}
	l.open++
}

// pop closes the innermost container.
func (l *jsonLexer) pop() { l.open-- }

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
	t, err := l.next()
	if err != nil {
		return nil, err
	}
	return t.token(), nil
}

// rawToken is a token before Token puts it in an interface, which costs an
// allocation for a string or number: kind is the delimiter byte, '"' for a
// string (str, unescaped), '0' for a number (num, its bytes in the input),
// or 't', 'f' or 'n' for a literal.
type rawToken struct {
	kind byte
	str  string
	num  []byte
}

// token is t as Token returns it.
func (t rawToken) token() json.Token {
	switch t.kind {
	case '[', ']', '{', '}':
		return json.Delim(t.kind)
	case '"':
		return t.str
	case '0':
		return json.Number(t.num)
	case 't':
		return true
	case 'f':
		return false
	}
	return nil
}

// next is Token without the interface.
func (l *jsonLexer) next() (rawToken, error) {
	for {
		c, ok := l.skipSpace()
		if !ok {
			return rawToken{}, io.EOF
		}
		s := l.cur()
		switch c {
		case '[', '{':
			if !l.valueAllowed() {
				return rawToken{}, l.syntax("unexpected " + string(c))
			}
			l.pos++
			next := lexArrayStart
			if c == '{' {
				next = lexObjStart
			}
			l.push(next)
			return rawToken{kind: c}, nil
		case ']':
			if *s != lexArrayStart && *s != lexArrayComma {
				return rawToken{}, l.syntax("unexpected ]")
			}
			l.pos++
			l.pop()
			l.valueEnd()
			return rawToken{kind: c}, nil
		case '}':
			if *s != lexObjStart && *s != lexObjComma {
				return rawToken{}, l.syntax("unexpected }")
			}
			l.pos++
			l.pop()
			l.valueEnd()
			return rawToken{kind: c}, nil
		case ':':
			if *s != lexObjColon {
				return rawToken{}, l.syntax("unexpected :")
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
				return rawToken{}, l.syntax("unexpected ,")
			}
			l.pos++
			continue
		case '"':
			if *s == lexObjStart || *s == lexObjKey {
				str, err := l.str()
				if err != nil {
					return rawToken{}, err
				}
				*s = lexObjColon
				return rawToken{kind: '"', str: str}, nil
			}
		}
		if !l.valueAllowed() {
			return rawToken{}, l.syntax("unexpected " + quoteByte(c))
		}
		start := l.pos
		if err := l.scalar(); err != nil {
			return rawToken{}, err
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
	if l.scan {
		return l.skipBrackets()
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
		if !l.general && l.numericRun(depth) {
			return nil
		}
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

// Byte classes for numericRun.
const (
	clsOther = iota
	clsSpace
	clsDigit
	clsComma
	clsOpen  // [
	clsClose // ]
)

var byteClass = [256]uint8{
	' ': clsSpace, '\t': clsSpace, '\r': clsSpace, '\n': clsSpace,
	'0': clsDigit, '1': clsDigit, '2': clsDigit, '3': clsDigit, '4': clsDigit,
	'5': clsDigit, '6': clsDigit, '7': clsDigit, '8': clsDigit, '9': clsDigit,
	',': clsComma, '[': clsOpen, ']': clsClose,
}

// maxRunNest bounds the arrays numericRun opens within an element: a
// failure inside one sends the element back to array, which scans it
// again, so the bound keeps every byte to a few scans however deep the
// nesting.
const maxRunNest = 4

// numericRun is array's fast path for tensor data. From pos, at the start
// of an element of an array depth deep, it passes over elements that are
// numbers or arrays of them (nested up to maxRunNest) in one loop, with no
// call per element. It commits pos only after each element's comma, and
// reports true when it has also passed the array's closing ']'. Anything
// else — a string, object or literal, a number it cannot vouch for, bad
// punctuation, the end of the input — stops it at the start of that
// element, to be read by the general path, which so meets every error at
// the offset, and with the message, it always has.
func (l *jsonLexer) numericRun(depth int) bool {
	src := l.src
	i := l.pos
	nest := 0 // arrays open within the current element
	for {
		// A value: skip space, then '[' or a number.
		for i < len(src) && byteClass[src[i]] == clsSpace {
			i++
		}
		if i >= len(src) {
			return false
		}
		c := src[i]
		if c == '[' {
			if nest == maxRunNest || depth+nest+1 > maxJSONDepth {
				return false
			}
			nest++
			i++
			for i < len(src) && byteClass[src[i]] == clsSpace {
				i++
			}
			if i < len(src) && src[i] == ']' {
				nest--
				i++
				goto after
			}
			continue
		}
		// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
		if c == '-' {
			i++
			if i >= len(src) {
				return false
			}
			c = src[i]
		}
		switch {
		case c == '0':
			i++
		case c >= '1' && c <= '9':
			i = skipDigits(src, i+1)
		default:
			return false
		}
		if i < len(src) && src[i] == '.' {
			i++
			start := i
			if i = skipDigits(src, i); i == start {
				return false
			}
		}
		if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
			i++
			if i < len(src) && (src[i] == '+' || src[i] == '-') {
				i++
			}
			start := i
			if i = skipDigits(src, i); i == start {
				return false
			}
		}
	after:
		// After a value: ',' for the next one, or ']' to close an array.
		for {
			for i < len(src) && byteClass[src[i]] == clsSpace {
				i++
			}
			if i >= len(src) {
				return false
			}
			switch byteClass[src[i]] {
			case clsComma:
				i++
				if nest == 0 {
					l.pos = i // an element and its comma are through
				}
			case clsClose:
				i++
				if nest == 0 {
					l.pos = i
					return true
				}
				nest--
				continue // the closed array was a value
			default:
				return false
			}
			break
		}
	}
}

// skipBrackets passes over the array whose '[' is at pos by finding its
// matching ']': brackets are counted, strings passed over whole (checked as
// always: their escapes decide where they end), and nothing else looked at.
// Tensor data is almost all digits, so the three bytes that matter are
// searched for with bytes.IndexByte, each from where it was last found: a
// few vectorised passes over the array instead of numericRun's grammar at
// every byte (about 10× faster on a 1 MiB FP32 array). Valid JSON ends
// where it ends for the validating path; in invalid JSON, a number's
// grammar, a stray comma or an object's punctuation inside the array goes
// unnoticed. Nesting is counted, not recursed into, so depth costs nothing.
func (l *jsonLexer) skipBrackets() error {
	src := l.src
	i := l.pos + 1
	open := 1
	// Where each byte occurs next at or after i; len(src): nowhere.
	nextOpen, nextClose, nextQuote := -1, -1, -1
	next := func(at *int, c byte) int {
		if *at < i {
			if j := bytes.IndexByte(src[i:], c); j >= 0 {
				*at = i + j
			} else {
				*at = len(src)
			}
		}
		return *at
	}
	for {
		o, c, q := next(&nextOpen, '['), next(&nextClose, ']'), next(&nextQuote, '"')
		switch {
		case c < o && c < q:
			i = c + 1
			if open--; open == 0 {
				l.pos = i
				return nil
			}
		case o < q:
			i = o + 1
			open++
		case q < len(src):
			l.pos = q
			if err := l.skipString(); err != nil {
				return err
			}
			i = l.pos
		default: // the input ends inside the array
			l.pos = len(src)
			return io.ErrUnexpectedEOF
		}
	}
}

// skipDigits returns the index of the first byte from i on that is not an
// ASCII digit. (Eight bytes a step, by SWAR arithmetic, measured twice as
// slow on tensor data, whose digit runs are short.)
func skipDigits(src []byte, i int) int {
	for i < len(src) && byteClass[src[i]] == clsDigit {
		i++
	}
	return i
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
	return l.unquote(l.src[start:l.pos])
}

// unquote unescapes a string that skipString passed. Without escapes or
// invalid UTF-8 the string is its bytes, as encoding/json has it, and
// json.Unmarshal, with its allocations, is needed only for the rest.
func (l *jsonLexer) unquote(b []byte) (string, error) {
	if in := b[1 : len(b)-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		if s, ok := knownString(in); ok {
			return s, nil
		}
		return string(in), nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", l.syntax("string")
	}
	return s, nil
}

// knownString returns the constant for a key or value common in the
// bodies the decoders read, so that reading it allocates nothing (the
// switch converts without copying).
func knownString(b []byte) (string, bool) {
	switch string(b) {
	case "inputs":
		return "inputs", true
	case "outputs":
		return "outputs", true
	case "name":
		return "name", true
	case "shape":
		return "shape", true
	case "datatype":
		return "datatype", true
	case "data":
		return "data", true
	case "parameters":
		return "parameters", true
	case "binary_data_size":
		return "binary_data_size", true
	case "model_name":
		return "model_name", true
	case "model_version":
		return "model_version", true
	case "id":
		return "id", true
	case "instances":
		return "instances", true
	case "predictions":
		return "predictions", true
	// KServe v2 datatypes
	case "BOOL":
		return "BOOL", true
	case "UINT8":
		return "UINT8", true
	case "UINT16":
		return "UINT16", true
	case "UINT32":
		return "UINT32", true
	case "UINT64":
		return "UINT64", true
	case "INT8":
		return "INT8", true
	case "INT16":
		return "INT16", true
	case "INT32":
		return "INT32", true
	case "INT64":
		return "INT64", true
	case "FP16":
		return "FP16", true
	case "BF16":
		return "BF16", true
	case "FP32":
		return "FP32", true
	case "FP64":
		return "FP64", true
	case "BYTES":
		return "BYTES", true
	}
	return "", false
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
func (l *jsonLexer) scalarToken(start int) (rawToken, error) {
	b := l.src[start:l.pos]
	switch b[0] {
	case '"':
		s, err := l.unquote(b)
		if err != nil {
			return rawToken{}, err
		}
		return rawToken{kind: '"', str: s}, nil
	case 't', 'f', 'n':
		return rawToken{kind: b[0]}, nil
	}
	return rawToken{kind: '0', num: b}, nil
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

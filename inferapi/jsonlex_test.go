package inferapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// errClass puts an error in the class jsonWalk's callers tell apart: none,
// the input ended (truncated), or malformed.
func errClass(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "end of input"
	}
	return "malformed"
}

// compareWithDecoder walks data with encoding/json's Decoder and with
// jsonLexer side by side, skipping a value where the bits of skips say so,
// and fails at the first token, offset or error class that differs. A
// third walker, the lexer without its numericRun fast path, must agree
// with the lexer exactly: the same errors, word for word, at the same
// offsets.
func compareWithDecoder(t *testing.T, data []byte, skips uint64) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	lex := newJSONLexer(data)
	slow := newJSONLexer(data)
	slow.general = true
	scan := newJSONLexer(data)
	scan.scan = true
	for step := 0; step < 1<<14; step++ {
		skip := skips>>(step%64)&1 == 1
		var want, got, gen, sct json.Token
		var werr, gerr, serr, scerr error
		if skip {
			var raw json.RawMessage
			werr, gerr, serr, scerr = dec.Decode(&raw), lex.Skip(), slow.Skip(), scan.Skip()
		} else {
			want, werr = dec.Token()
			got, gerr = lex.Token()
			gen, serr = slow.Token()
			sct, scerr = scan.Token()
		}
		if fmt.Sprint(gerr) != fmt.Sprint(serr) || lex.InputOffset() != slow.InputOffset() || !reflect.DeepEqual(got, gen) {
			t.Fatalf("step %d (skip %v) of %q: fast path %v at %d, general path %v at %d", step, skip, data, gerr, lex.InputOffset(), serr, slow.InputOffset())
		}
		if errClass(werr) != errClass(gerr) {
			t.Fatalf("step %d (skip %v) of %q: Decoder %v, lexer %v", step, skip, data, werr, gerr)
		}
		if werr != nil {
			return // the scan may fail elsewhere, or pass over what failed
		}
		// Up to the first error, the scan walks valid JSON exactly as the
		// lexer does.
		if scerr != nil || scan.InputOffset() != lex.InputOffset() || !reflect.DeepEqual(sct, got) {
			t.Fatalf("step %d (skip %v) of %q: scan %v %v at %d, lexer %v at %d", step, skip, data, sct, scerr, scan.InputOffset(), got, lex.InputOffset())
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("step %d of %q: Decoder %#v, lexer %#v", step, data, want, got)
		}
		if dec.More() != lex.More() {
			t.Fatalf("step %d of %q: More differs (Decoder %v)", step, data, dec.More())
		}
		if dec.InputOffset() != lex.InputOffset() {
			t.Fatalf("step %d of %q: offset %d, lexer %d", step, data, dec.InputOffset(), lex.InputOffset())
		}
	}
}

func TestJSONLexerMatchesDecoder(t *testing.T) {
	for _, tc := range []struct {
		data  string
		skips uint64
	}{
		{`{"inputs":[{"name":"in0","shape":[2,3],"datatype":"FP32","data":[[1,2,3],[4,5.5e-3,-6]]}]}`, 0},
		{`{"inputs":[{"name":"in0","shape":[2,3],"datatype":"FP32","data":[[1,2,3],[4,5.5e-3,-6]]}]}`, 0b1010101010},
		{`{"a":"x\u00e9\n\"y","b":[true,false,null,{}],"c":{"d":[]}}`, 0b11000},
		{`{"a":[1,2`, 0b100},
		{`{"a":"abc`, 0},
		{`{"a":12`, 0},
		{`[1.`, 0},
		{`[1x]`, 0},
		{`[01]`, 0},
		{`[01]`, 1},
		{`{"a" "b"}`, 0},
		{`{"a":1,}`, 0},
		{`[1,]`, 1},
		{`[1,]`, 0},
		{"[\"a\x01\"]", 1},
		{`["\q"]`, 0},
		{`["\u12g4"]`, 1},
		{`nul`, 0},
		{`truex`, 0},
		{`1 2 [3]`, 0},
		{`{"k":tru}`, 0b10},
		{"\xff", 0},
		{`["\xff"]`, 0},
		{`{"a":}`, 0b10},
		{`{1:2}`, 0},
		{`]`, 0},
		{``, 1},
		{`   `, 0},
		// numericRun, the fast path for arrays of numbers, and where it
		// hands over to the general path.
		{`[ 0 , -0.5 ,1e5,2E-3, 3e+0 , [ ] , [[1, 2], [ -3 ]] ]`, 1},
		{`{"d":[[[[[[[1,2],[3]]]]]]],"e":[[[[[[[[[[1]]]]]]]]]]}`, 0b1010},
		{`[1,2,"x",3,[4,"y"],[[5]],true,null,{"a":[6]},7]`, 1},
		{`[1,2,"x",3,[4,"y"],[[5]],true,null,{"a":[6]},7]`, 0b1011011},
		{`[1,2,-]`, 1},
		{`[1,2,-x]`, 1},
		{`[1,2,1.]`, 1},
		{`[1,2,1.e3]`, 1},
		{`[1,2,1e]`, 1},
		{`[1,2,1e+]`, 1},
		{`[1,2,00]`, 1},
		{`[1,2,-01]`, 1},
		{`[1,2,.5]`, 1},
		{`[1,2,+5]`, 1},
		{`[1,2 3]`, 1},
		{`[1,2,,3]`, 1},
		{`[1,[2,],3]`, 1},
		{`[1,[2 3],3]`, 1},
		{`[[1],[2]]]`, 1},
		{`[[1],[2],`, 1},
		{`[[1],[2`, 1},
		{`[[1],[2.`, 1},
		{`[[1],[2e`, 1},
		{`[[1],[-`, 1},
		{`[[1],[2]   `, 1},
		{"[1,\x002]", 1},
		{"[1,\u00a02]", 1},
		{strings.Repeat(`[`, maxJSONDepth) + `1` + strings.Repeat(`]`, maxJSONDepth), 1},
		{strings.Repeat(`[`, maxJSONDepth+1) + `1` + strings.Repeat(`]`, maxJSONDepth+1), 1},
		{`[` + strings.Repeat(`[1,`, maxJSONDepth) + `2` + strings.Repeat(`]`, maxJSONDepth) + `]`, 1},
		// Strings: plain, escaped, non-ASCII, invalid UTF-8, and the
		// interned words as keys and as values.
		{`{"FP32":"FP32","inputs":"\u0046P32","dat\u0061":"é","\u00e9":"data","BYTES":["BYTES","BYTE"]}`, 0},
		{`{"FP32":"FP32","inputs":"\u0046P32","dat\u0061":"é","\u00e9":"data","BYTES":["BYTES","BYTE"]}`, 0b100100},
		{"{\"a\":\"\xed\xa0\x80\",\"\xc3\":\"\xf4\x90\x80\x80\",\"n\xffme\":\"a\xfe\",\"FP\xc332\":1}", 0},
		// Token past the lexer's shallow state stack, and back.
		{strings.Repeat(`[{"a":`, 20) + `1` + strings.Repeat(`}]`, 20) + strings.Repeat(`[`, 30) + strings.Repeat(`]`, 30), 0},
		{strings.Repeat(`[{"a":`, 20) + `1` + strings.Repeat(`}]`, 20), 0x5555555555555555},
		{strings.Repeat(`{"a":[`, 20) + `"x"` + strings.Repeat(`],"b":2}`, 20), 0},
		{strings.Repeat(`{"a":[`, 20) + `1` + strings.Repeat(`]]`, 20), 0},
	} {
		compareWithDecoder(t, []byte(tc.data), tc.skips)
	}
}

// FuzzJSONLexer holds jsonLexer to encoding/json's Decoder: the same
// tokens, offsets and error classes, with values skipped at the same
// places.
func FuzzJSONLexer(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"in0","shape":[2,3],"datatype":"FP32","data":[[1,2,3],[4,5,6]]}],"outputs":[{"name":"o"}]}`), uint64(0b10100))
	f.Add([]byte(`{"instances":[[1,2],[3,4]],"inputs":{"a":[[1]],"b":2},"examples":[{}]}`), uint64(0xffff))
	f.Add([]byte(`{"a":"x\u00e9\n\"y","b":[true,false,null,-0.5E+7]}`), uint64(0b1001))
	f.Add([]byte(`[[[[[[1]]]]]]`), uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, skips uint64) {
		compareWithDecoder(t, data, skips)
	})
}

func BenchmarkJSONSkip(b *testing.B) {
	data := []byte(`[` + string(bytes.Repeat([]byte(`0.0123456, -1.5e-3, 42, `), 400)) + `7]`)
	b.SetBytes(int64(len(data)))
	b.Run("lexer", func(b *testing.B) {
		for b.Loop() {
			if err := newJSONLexer(data).Skip(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			l := newJSONLexer(data)
			l.scan = true
			if err := l.Skip(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		for b.Loop() {
			var raw json.RawMessage
			if err := json.NewDecoder(bytes.NewReader(data)).Decode(&raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package modelserver

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// dtypeSize is the byte size of one element of a KServe v2 datatype; BYTES
// is variable (0, true).
func dtypeSize(dt string) (int, bool) {
	switch dt {
	case "BOOL", "UINT8", "INT8":
		return 1, true
	case "UINT16", "INT16", "FP16", "BF16":
		return 2, true
	case "UINT32", "INT32", "FP32":
		return 4, true
	case "UINT64", "INT64", "FP64":
		return 8, true
	case "BYTES":
		return 0, true
	}
	return 0, false
}

// elementCount is the product of a shape's dimensions.
func elementCount(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d > 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// checkRaw checks that raw tensor bytes match the datatype and shape.
func checkRaw(dt string, shape []int64, n int) error {
	size, ok := dtypeSize(dt)
	if !ok {
		return fmt.Errorf("unsupported datatype %q", dt)
	}
	elems, err := elementCount(shape)
	if err != nil {
		return err
	}
	if size > 0 && int64(n) != elems*int64(size) {
		return fmt.Errorf("%d bytes of %s data for shape %v, want %d", n, dt, shape, elems*int64(size))
	}
	return nil
}

// jsonToRaw converts KServe v2 JSON tensor data, flat or nested row-major,
// to little-endian raw bytes, returning them and the element count.
// Streaming tokens keeps nested arrays and exact 64-bit integers cheap.
func jsonToRaw(dt string, data json.RawMessage) ([]byte, int64, error) {
	size, ok := dtypeSize(dt)
	if !ok || dt == "FP16" || dt == "BF16" {
		return nil, 0, fmt.Errorf("datatype %q cannot be given as JSON data", dt)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	out := make([]byte, 0, len(data)/2*max(size, 1))
	var n int64
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out, n, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("%s data: %w", dt, err)
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '}' {
				return nil, 0, fmt.Errorf("%s data: objects are not tensor data", dt)
			}
			continue
		case json.Number:
			out, err = appendNumber(out, dt, string(v))
		case bool:
			if dt != "BOOL" {
				err = fmt.Errorf("boolean in %s data", dt)
			} else if v {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		case string:
			if dt != "BYTES" {
				err = fmt.Errorf("string in %s data", dt)
			} else {
				out = binary.LittleEndian.AppendUint32(out, uint32(len(v)))
				out = append(out, v...)
			}
		default:
			err = fmt.Errorf("null in %s data", dt)
		}
		if err != nil {
			return nil, 0, err
		}
		n++
	}
}

func appendNumber(out []byte, dt, s string) ([]byte, error) {
	le := binary.LittleEndian
	switch dt {
	case "FP32":
		f, err := strconv.ParseFloat(s, 32)
		return le.AppendUint32(out, math.Float32bits(float32(f))), err
	case "FP64":
		f, err := strconv.ParseFloat(s, 64)
		return le.AppendUint64(out, math.Float64bits(f)), err
	case "UINT8", "UINT16", "UINT32", "UINT64":
		size, _ := dtypeSize(dt)
		u, err := strconv.ParseUint(s, 10, size*8)
		return appendUint(out, u, size), err
	case "INT8", "INT16", "INT32", "INT64":
		size, _ := dtypeSize(dt)
		i, err := strconv.ParseInt(s, 10, size*8)
		return appendUint(out, uint64(i), size), err
	}
	return out, fmt.Errorf("number in %s data", dt)
}

func appendUint(out []byte, u uint64, size int) []byte {
	le := binary.LittleEndian
	switch size {
	case 1:
		return append(out, byte(u))
	case 2:
		return le.AppendUint16(out, uint16(u))
	case 4:
		return le.AppendUint32(out, uint32(u))
	}
	return le.AppendUint64(out, u)
}

// rawToFloat32 decodes little-endian FP32 bytes.
func rawToFloat32(raw []byte) []float32 {
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[i*4:]))
	}
	return out
}

// float32ToRaw encodes FP32 values little-endian.
func float32ToRaw(v []float32) []byte {
	out := make([]byte, 0, len(v)*4)
	for _, f := range v {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
	}
	return out
}

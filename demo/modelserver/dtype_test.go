package modelserver

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestJSONToRaw(t *testing.T) {
	tests := []struct {
		dt, data string
		want     []byte
		n        int64
		err      bool
	}{
		{dt: "UINT8", data: `[1,2,255]`, want: []byte{1, 2, 255}, n: 3},
		{dt: "INT16", data: `[[1,-2],[3,4]]`, want: []byte{1, 0, 0xfe, 0xff, 3, 0, 4, 0}, n: 4},
		{dt: "FP32", data: `[1.5]`, want: []byte{0, 0, 0xc0, 0x3f}, n: 1},
		{dt: "INT64", data: `[9007199254740993]`, want: []byte{1, 0, 0, 0, 0, 0, 0x20, 0}, n: 1},
		{dt: "BOOL", data: `[true,false]`, want: []byte{1, 0}, n: 2},
		{dt: "BYTES", data: `["ab"]`, want: []byte{2, 0, 0, 0, 'a', 'b'}, n: 1},
		{dt: "UINT8", data: `[256]`, err: true},
		{dt: "FP32", data: `["x"]`, err: true},
		{dt: "FP32", data: `[{"a":1}]`, err: true},
		{dt: "FP32", data: `[null]`, err: true},
		{dt: "FP16", data: `[1]`, err: true},
		{dt: "NOPE", data: `[1]`, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.dt+" "+tc.data, func(t *testing.T) {
			got, n, err := jsonToRaw(tc.dt, json.RawMessage(tc.data))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !tc.err && (!bytes.Equal(got, tc.want) || n != tc.n) {
				t.Errorf("got %v (%d), want %v (%d)", got, n, tc.want, tc.n)
			}
		})
	}
}

func TestCheckRaw(t *testing.T) {
	tests := []struct {
		dt    string
		shape []int64
		n     int
		ok    bool
	}{
		{"FP32", []int64{2, 3}, 24, true},
		{"FP32", []int64{2, 3}, 23, false},
		{"BYTES", []int64{5}, 3, true},
		{"UINT8", []int64{-1}, 0, false},
		{"WHAT", []int64{1}, 1, false},
	}
	for _, tc := range tests {
		if err := checkRaw(tc.dt, tc.shape, tc.n); (err == nil) != tc.ok {
			t.Errorf("checkRaw(%s, %v, %d) = %v, want ok %v", tc.dt, tc.shape, tc.n, err, tc.ok)
		}
	}
}

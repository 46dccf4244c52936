package modelserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestEchoJSONChecked: echo checks JSON input data against its datatype and
// shape as it checks binary and typed data, and as KServe v2 servers do. It
// answered 200 to a shape of 5 with 2 values or a string in INT32 data,
// echoing the bad tensor back, and 400 to the very same request only when
// the output was asked for as binary.
func TestEchoJSONChecked(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	h := s.HTTPHandler()
	for _, tc := range []struct {
		name, body string
		code       int
	}{
		{"fits", `{"inputs":[{"name":"x","shape":[1,3],"datatype":"INT32","data":[[1,2,3]]}]}`, 200},
		{"bytes", `{"inputs":[{"name":"x","shape":[2],"datatype":"BYTES","data":["ab","c"]}]}`, 200},
		{"too few values", `{"inputs":[{"name":"x","shape":[5],"datatype":"INT32","data":[1,2]}]}`, 400},
		{"too many values", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1,2]}]}`, 400},
		{"string in INT32", `{"inputs":[{"name":"x","shape":[2],"datatype":"INT32","data":[1,"a"]}]}`, 400},
		{"out of range", `{"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[300]}]}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v2/models/echo/infer", strings.NewReader(tc.body)))
			if rec.Code != tc.code {
				t.Errorf("status %d, want %d; body %s", rec.Code, tc.code, rec.Body)
			}
		})
	}
}

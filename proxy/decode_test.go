package proxy

import (
	"net/http"
	"testing"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/record"
)

// TestDeferHTTPDecode: every call's bodies are read for the record; only
// the decode sample's are walked validating and timed as the decode phase.
func TestDeferHTTPDecode(t *testing.T) {
	rt := inferapi.HTTPRoute("POST", "/v2/models/m/infer", "")
	hdr := http.Header{"Content-Type": {"application/json"}}
	const resp = `{"model_name":"m","outputs":[{"name":"y","shape":[2],"datatype":"FP32","data":[0.5,1]}]}`
	for _, tc := range []struct {
		name, req string
		full      bool
		wantFail  bool
	}{
		{"scan", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}`, false, false},
		{"scan passes a bad number in data", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,-]}]}`, false, false},
		{"sampled walk finds it", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,-]}]}`, true, true},
		{"scan finds a cut body", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2`, false, true},
		{"sampled", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}`, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, rsp := &capture{max: 1 << 10}, &capture{max: 1 << 10}
			req.write([]byte(tc.req))
			rsp.write([]byte(resp))
			c := record.Call{Code: "200"}
			deferHTTPDecode(rt, hdr, req, hdr, rsp, tc.full)(&c)
			if c.DecodeRan != tc.full || c.DecodeFail != tc.wantFail || c.BatchSize != 2 || c.InputCount != 1 || c.OutputCount != 1 || c.Model != "m" {
				t.Fatalf("decode ran %v fail %v batch %d inputs %d outputs %d model %q", c.DecodeRan, c.DecodeFail, c.BatchSize, c.InputCount, c.OutputCount, c.Model)
			}
			if req.buf != nil || rsp.buf != nil {
				t.Fatalf("captures not released")
			}
		})
	}
}

package inferapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/record"
)

// BenchmarkDecodeV2JSON decodes the demo's MLP request: one 1×784 FP32
// input whose data array is what the decoder must pass over cheaply.
func BenchmarkDecodeV2JSON(b *testing.B) {
	vals := make([]string, 784)
	for i := range vals {
		vals[i] = fmt.Sprintf("%.6f", float64(i)/784)
	}
	body := []byte(`{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[` + strings.Join(vals, ",") + `]}]}`)
	h := http.Header{"Content-Type": {"application/json"}}
	r := HTTPRoute("POST", "/v2/models/mnist-mlp/infer", "")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var c record.Call
		if err := DecodeHTTPRequest(r, h, body, false, &c); err != nil || c.InputCount != 1 {
			b.Fatalf("decode: %v, %d inputs", err, c.InputCount)
		}
	}
}

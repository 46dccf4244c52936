package inferapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/record"
)

// BenchmarkDecodeV2JSON decodes a KServe v2 request of one FP32 input: the
// demo's MLP request (1×784) and a megabyte-sized one (1×131072), whose data
// array is what the decoders must pass over cheaply, with the validating
// walk of the decode sample and the bracket scan of every call.
func BenchmarkDecodeV2JSON(b *testing.B) {
	h := http.Header{"Content-Type": {"application/json"}}
	r := HTTPRoute("POST", "/v2/models/mnist-mlp/infer", "")
	for _, n := range []int{784, 131072} {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = fmt.Sprintf("%.6f", float64(i%997)/997)
		}
		body := []byte(fmt.Sprintf(`{"inputs":[{"name":"input","shape":[1,%d],"datatype":"FP32","data":[`, n) + strings.Join(vals, ",") + `]}]}`)
		for _, m := range []struct {
			name   string
			decode func(Route, http.Header, []byte, bool, *record.Call) error
		}{{"validate", DecodeHTTPRequest}, {"scan", ScanHTTPRequest}} {
			b.Run(fmt.Sprintf("%s/%d", m.name, n), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					var c record.Call
					if err := m.decode(r, h, body, false, &c); err != nil || c.InputCount != 1 {
						b.Fatalf("decode: %v, %d inputs", err, c.InputCount)
					}
				}
			})
		}
	}
}

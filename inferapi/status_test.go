package inferapi

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/inferwatch/inferwatch/record"
)

// TestDecodeStatus: REST model status answers say readiness in their body
// (TF Serving answers 200 while a version loads); other JSON on the path
// says nothing, and only a malformed body is a decode failure.
func TestDecodeStatus(t *testing.T) {
	tf := HTTPRoute("GET", "/v1/models/m", "")
	tfVersion := HTTPRoute("GET", "/v1/models/m/versions/2", "")
	v1 := HTTPRoute("GET", "/v1/models/m", record.APIKServeV1)
	if !tf.ReadsBody() || !tfVersion.ReadsBody() || !v1.ReadsBody() || HTTPRoute("GET", "/v2/models/m/ready", "").ReadsBody() {
		t.Fatalf("ReadsBody: REST status routes %v %v %v, KServe v2 ready %v", tf.ReadsBody(), tfVersion.ReadsBody(), v1.ReadsBody(), HTTPRoute("GET", "/v2/models/m/ready", "").ReadsBody())
	}
	available := `{"model_version_status":[{"version":"1","state":"AVAILABLE","status":{"error_code":"OK","error_message":""}}]}`
	yes, no := record.Call{Ready: record.ReadyYes}, record.Call{Ready: record.ReadyNo}
	runHTTPCases(t, true, []httpCase{
		{name: "TF available", route: tf, header: jsonType, body: available, want: yes},
		{name: "TF loading", route: tf, header: jsonType, body: `{"model_version_status":[{"version":"1","state":"LOADING","status":{"error_code":"OK"}}]}`, want: no},
		{name: "TF one version of two available", route: tf, header: jsonType,
			body: `{"model_version_status":[{"version":"2","state":"LOADING"},{"version":"1","state":"AVAILABLE"}]}`, want: yes},
		{name: "TF version ended", route: tfVersion, header: jsonType, body: `{"model_version_status":[{"version":"2","state":"END"}]}`, want: no},
		{name: "TF no versions", route: tf, header: jsonType, body: `{"model_version_status":[]}`},
		{name: "TF cut after an available one", route: tf, header: jsonType,
			body: `{"model_version_status":[{"state":"AVAILABLE"},{"state":"LOA`, truncated: true, want: yes},
		{name: "TF cut after a loading one: one past the cut may be available", route: tf, header: jsonType,
			body: `{"model_version_status":[{"state":"LOADING"},{"sta`, truncated: true},
		{name: "KServe v1 ready", route: v1, header: jsonType, body: `{"name":"m","ready":true}`, want: yes},
		{name: "KServe v1 not ready", route: v1, header: jsonType, body: `{"name":"m","ready":false}`, want: no},
		{name: "ready not a bool", route: v1, header: jsonType, body: `{"ready":"yes"}`},
		{name: "an OpenAI model object", route: tf, header: jsonType, body: `{"id":"m","object":"model","owned_by":"me"}`},
		{name: "compressed", route: tf, header: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, body: "\x1f\x8b"},
		{name: "plain text", route: tf, header: http.Header{"Content-Type": {"text/plain"}}, body: "AVAILABLE"},
		{name: "state not a string", route: tf, header: jsonType, body: `{"model_version_status":[{"state":30}]}`, wantErr: true},
		{name: "malformed", route: tf, header: jsonType, body: `{"model_version_status":[{"state":"AVAILABLE"}`, wantErr: true},
	})
	// The request side of a status call has nothing to read.
	runHTTPCases(t, false, []httpCase{{name: "request", route: tf, header: jsonType, body: available}})
}

// FuzzStatusDecode: a REST model status body, whole and cut: no panic, an
// error exactly when DecodeFail, a body that decodes whole decodes cut
// anywhere when the cut is said, and the bracket scan agrees.
func FuzzStatusDecode(f *testing.F) {
	f.Add([]byte(`{"model_version_status":[{"version":"1","state":"AVAILABLE","status":{"error_code":"OK"}}]}`), uint16(40))
	f.Add([]byte(`{"name":"m","ready":false}`), uint16(12))
	f.Add([]byte(`{"ready":{"x":[1,2]},"model_version_status":[{"state":"LOADING"},{"state":"AVAILABLE"}]}`), uint16(60))
	route := HTTPRoute("GET", "/v1/models/m", "")
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		prefix := body[:int(cut)%(len(body)+1)]
		var whole record.Call
		err := DecodeHTTPResponse(route, jsonType, body, false, &whole)
		if (err != nil) != whole.DecodeFail {
			t.Fatalf("err %v but DecodeFail %v", err, whole.DecodeFail)
		}
		var part record.Call
		perr := DecodeHTTPResponse(route, jsonType, prefix, true, &part)
		if err == nil && perr != nil {
			t.Fatalf("whole body decodes, its %d-byte prefix fails: %v", len(prefix), perr)
		}
		if part.Ready == record.ReadyNo && whole.Ready == record.ReadyYes && err == nil {
			// A cut may hide an available version, never invent a missing one.
			t.Fatalf("prefix says not ready, whole body ready")
		}
		var scanned record.Call
		serr := ScanHTTPResponse(route, jsonType, body, false, &scanned)
		if err == nil && (serr != nil || !reflect.DeepEqual(scanned, whole)) {
			t.Fatalf("decode accepts %q, scan: %v, %+v vs %+v", body, serr, scanned, whole)
		}
	})
}

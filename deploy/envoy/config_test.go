package envoy

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// The Any types the example configs use must be linked in for protojson to
// resolve them.
var (
	_ = routerv3.Router{}
	_ = upstreamhttpv3.HttpProtocolOptions{}
)

// validator is what go-control-plane's generated validation gives every message.
type validator interface{ ValidateAll() error }

// yamlToProto reads YAML into m with protojson (unknown fields are errors)
// and runs the generated validation rules.
func yamlToProto(t *testing.T, v any, m proto.Message) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("%T: %v", m, err)
	}
	if err := m.(validator).ValidateAll(); err != nil {
		t.Fatalf("%T: %v", m, err)
	}
}

func readYAML(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// unpack unmarshals an Any and validates it.
func unpack(t *testing.T, a *anypb.Any, m proto.Message) {
	t.Helper()
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("typed_config %s: %v", a.GetTypeUrl(), err)
	}
	if err := m.(validator).ValidateAll(); err != nil {
		t.Fatalf("%s: %v", a.GetTypeUrl(), err)
	}
}

// checkExtProc checks an ext_proc filter config observes the way the docs
// say: fails open, sends both headers and bodies, and talks to a cluster
// that exists.
func checkExtProc(t *testing.T, f *filterv3.ExternalProcessor, clusters map[string]*clusterv3.Cluster) {
	t.Helper()
	if !f.GetFailureModeAllow() {
		t.Errorf("ext_proc filter does not fail open (failure_mode_allow)")
	}
	name := f.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if clusters[name] == nil {
		t.Errorf("ext_proc cluster %q not defined", name)
	}
	pm := f.GetProcessingMode()
	if pm.GetRequestHeaderMode() != filterv3.ProcessingMode_SEND || pm.GetResponseHeaderMode() != filterv3.ProcessingMode_SEND {
		t.Errorf("headers are not sent: %v", pm)
	}
	if len(f.GetRequestAttributes()) == 0 || f.GetRequestAttributes()[0] != "request.time" {
		t.Errorf("request_attributes %v lack request.time", f.GetRequestAttributes())
	}
}

// TestEnvoyBootstrapValidates: deploy/envoy/envoy.yaml is a valid
// envoy.config.bootstrap.v3.Bootstrap, down to each typed config, and its
// pieces fit together. No Envoy binary is available here; this is the check.
func TestEnvoyBootstrapValidates(t *testing.T) {
	var b bootstrapv3.Bootstrap
	yamlToProto(t, readYAML(t, "envoy.yaml"), &b)
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
		for _, a := range c.GetTypedExtensionProtocolOptions() {
			unpack(t, a, &upstreamhttpv3.HttpProtocolOptions{})
		}
	}
	if len(b.GetStaticResources().GetListeners()) != 2 {
		t.Fatalf("want a gRPC and an HTTP listener")
	}
	modes := map[bool]bool{}
	for _, l := range b.GetStaticResources().GetListeners() {
		var hcm hcmv3.HttpConnectionManager
		unpack(t, l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig(), &hcm)
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if clusters[r.GetRoute().GetCluster()] == nil {
					t.Errorf("route to undefined cluster %q", r.GetRoute().GetCluster())
				}
			}
		}
		fs := hcm.GetHttpFilters()
		if len(fs) != 2 || fs[1].GetName() != "envoy.filters.http.router" {
			t.Fatalf("listener %s: want ext_proc then the router", l.GetName())
		}
		var ep filterv3.ExternalProcessor
		unpack(t, fs[0].GetTypedConfig(), &ep)
		checkExtProc(t, &ep, clusters)
		modes[ep.GetObservabilityMode()] = true
		if hcm.GetCodecType() == hcmv3.HttpConnectionManager_HTTP2 && ep.GetProcessingMode().GetResponseTrailerMode() != filterv3.ProcessingMode_SEND {
			t.Errorf("gRPC listener does not send response trailers: no grpc-status")
		}
	}
	if !modes[true] || !modes[false] {
		t.Errorf("the example should show both the ordinary and the observability mode")
	}
}

// TestIstioEnvoyFilterValidates: each patch value of the Istio variant is a
// valid Envoy HttpFilter or Cluster.
func TestIstioEnvoyFilterValidates(t *testing.T) {
	doc := readYAML(t, "istio-envoyfilter.yaml").(map[string]any)
	if doc["kind"] != "EnvoyFilter" {
		t.Fatalf("kind %v", doc["kind"])
	}
	patches := doc["spec"].(map[string]any)["configPatches"].([]any)
	clusters := map[string]*clusterv3.Cluster{}
	var filters []*hcmv3.HttpFilter
	for _, p := range patches {
		p := p.(map[string]any)
		value := p["patch"].(map[string]any)["value"]
		switch p["applyTo"] {
		case "HTTP_FILTER":
			var f hcmv3.HttpFilter
			yamlToProto(t, value, &f)
			filters = append(filters, &f)
		case "CLUSTER":
			var c clusterv3.Cluster
			yamlToProto(t, value, &c)
			clusters[c.GetName()] = &c
		default:
			t.Fatalf("unexpected applyTo %v", p["applyTo"])
		}
	}
	if len(filters) != 1 {
		t.Fatalf("%d HTTP filters", len(filters))
	}
	var ep filterv3.ExternalProcessor
	unpack(t, filters[0].GetTypedConfig(), &ep)
	checkExtProc(t, &ep, clusters)
}

package modelserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferwatch/inferwatch/demo/model"
	"github.com/inferwatch/inferwatch/proto/inference"
)

// testServer is a Server behind a real gRPC server and a real HTTP server
// on loopback, with a gRPC client connected.
type testServer struct {
	s      *Server
	client inference.GRPCInferenceServiceClient
	url    string // HTTP base URL
}

func start(t *testing.T, o Options) *testServer {
	t.Helper()
	s := New(o)
	t.Cleanup(s.Close)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	g := grpc.NewServer(GRPCServerOptions()...)
	s.RegisterGRPC(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &testServer{s: s, client: inference.NewGRPCInferenceServiceClient(conn), url: hs.URL}
}

// image returns batch deterministic pseudo-images.
func image(batch int) []float32 {
	r := rand.New(rand.NewPCG(uint64(batch), 2))
	x := make([]float32, batch*model.InputSize)
	for i := range x {
		x[i] = r.Float32()
	}
	return x
}

// parseServerTiming parses "name;dur=ms, ..." into names in order and
// durations, failing on anything malformed.
func parseServerTiming(v string) ([]string, map[string]time.Duration, error) {
	var names []string
	durs := map[string]time.Duration{}
	for _, metric := range strings.Split(v, ",") {
		parts := strings.Split(strings.TrimSpace(metric), ";")
		if len(parts) != 2 || !strings.HasPrefix(parts[1], "dur=") {
			return nil, nil, fmt.Errorf("metric %q is not name;dur=ms", metric)
		}
		ms, err := strconv.ParseFloat(strings.TrimPrefix(parts[1], "dur="), 64)
		if err != nil || ms < 0 {
			return nil, nil, fmt.Errorf("metric %q: bad duration", metric)
		}
		names = append(names, parts[0])
		durs[parts[0]] = time.Duration(ms * float64(time.Millisecond))
	}
	return names, durs, nil
}

// checkServerTiming asserts a complete, well-formed Server-Timing value.
func checkServerTiming(t *testing.T, v string) map[string]time.Duration {
	t.Helper()
	names, durs, err := parseServerTiming(v)
	if err != nil {
		t.Fatalf("server-timing %q: %v", v, err)
	}
	if want := stageNames[:]; !slices.Equal(names, want) {
		t.Fatalf("server-timing stages %v, want %v", names, want)
	}
	return durs
}

func TestTimingFormat(t *testing.T) {
	tests := []struct {
		name string
		t    timing
		want string
	}{
		{"none", timing{}, ""},
		{"queued", timing{d: [numStages]time.Duration{12 * time.Microsecond}, ran: 1},
			"queue;dur=0.012"},
		{"all", timing{d: [numStages]time.Duration{12 * time.Microsecond, 50 * time.Microsecond, 1234 * time.Microsecond, 10 * time.Microsecond}, ran: 4},
			"queue;dur=0.012, preprocess;dur=0.050, infer;dur=1.234, postprocess;dur=0.010"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.t.serverTiming(); got != tc.want {
				t.Errorf("serverTiming() = %q, want %q", got, tc.want)
			}
		})
	}
}

package inferapi

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
)

func tsRequest(t *testing.T, id *string, input int) []byte {
	t.Helper()
	b, err := proto.Marshal(&torchserve.PredictionsRequest{ModelName: "llm", ModelVersion: "1",
		Input: map[string][]byte{"prompt": bytes.Repeat([]byte("p"), input)}, SequenceId: id})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tsResponse(t *testing.T, prediction string, id *string, st *status.Status) []byte {
	t.Helper()
	b, err := proto.Marshal(&torchserve.PredictionResponse{Prediction: []byte(prediction), SequenceId: id, Status: st})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStreamPredictHeads: TorchServe's request and response heads, whole
// and cut where the proxy's 1 KiB head cuts them.
func TestStreamPredictHeads(t *testing.T) {
	seq := proto.String("seq-7")
	long := tsRequest(t, seq, 2000)
	whole := tsRequest(t, seq, 100)
	failed := tsResponse(t, "", seq, &status.Status{Code: 13, Message: "worker died: " + string(bytes.Repeat([]byte("x"), 200))})
	for _, tc := range []struct {
		name string
		read func([]byte) StreamHead
		b    []byte
		want StreamHead
	}{
		{"request with id", PredictionsRequestHead, whole, StreamHead{ID: "seq-7"}},
		{"request without id", PredictionsRequestHead, tsRequest(t, nil, 100), StreamHead{}},
		{"request with an empty id", PredictionsRequestHead, tsRequest(t, proto.String(""), 100), StreamHead{}},
		{"request cut in its input", PredictionsRequestHead, long[:headBytes], StreamHead{}},
		{"request cut in its id", PredictionsRequestHead, whole[:len(whole)-2], StreamHead{}},
		{"request id clipped", PredictionsRequestHead, tsRequest(t, proto.String(string(bytes.Repeat([]byte("i"), 300))), 10), StreamHead{ID: string(bytes.Repeat([]byte("i"), maxID))}},
		{"request not protobuf", PredictionsRequestHead, []byte{0xff, 0xff, 0xff}, StreamHead{}},
		{"response with id", PredictionResponseHead, tsResponse(t, "tok", seq, nil), StreamHead{ID: "seq-7"}},
		{"response without id", PredictionResponseHead, tsResponse(t, "tok", nil, nil), StreamHead{}},
		{"response with status OK", PredictionResponseHead, tsResponse(t, "tok", seq, &status.Status{Code: 0, Message: "fine"}), StreamHead{ID: "seq-7"}},
		{"response with an empty status", PredictionResponseHead, tsResponse(t, "tok", seq, &status.Status{}), StreamHead{ID: "seq-7"}},
		{"response failed", PredictionResponseHead, failed, StreamHead{ID: "seq-7", Error: true}},
		{"response failed, negative code", PredictionResponseHead, tsResponse(t, "", nil, &status.Status{Code: -1}), StreamHead{Error: true}},
		{"response cut in its status message", PredictionResponseHead, failed[:30], StreamHead{ID: "seq-7", Error: true}},
		{"response cut in its id", PredictionResponseHead, tsResponse(t, "tok", seq, nil)[:9], StreamHead{}},
		{"response cut in its prediction", PredictionResponseHead, tsResponse(t, string(bytes.Repeat([]byte("t"), 2000)), seq, nil)[:headBytes], StreamHead{}},
		{"response not protobuf", PredictionResponseHead, []byte{0x1a, 0x80}, StreamHead{}},
	} {
		if got := tc.read(tc.b); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestStreamTrackerTorchServe: TorchServe sends no final flag, so every
// request stays open to the stream's end; the responses still go to the
// requests that were answered, in the patterns clients use.
func TestStreamTrackerTorchServe(t *testing.T) {
	type ev struct {
		req    bool
		id     string
		failed bool
	}
	req := func(id string) ev { return ev{req: true, id: id} }
	res := func(id string) ev { return ev{id: id} }
	fail := func(id string) ev { return ev{id: id, failed: true} }
	type want struct {
		id        string
		responses int
		failed    bool
	}
	for _, tc := range []struct {
		name   string
		method string
		evs    []ev
		want   []want
	}{
		{"StreamPredictions: one request, its tokens", "StreamPredictions",
			[]ev{req(""), res(""), res(""), res(""), res("")}, []want{{"", 4, false}}},
		{"sequential with ids", "StreamPredictions2",
			[]ev{req("a"), res("a"), res("a"), req("b"), res("b"), fail("b"), req("c"), res("c")},
			[]want{{"a", 2, false}, {"b", 1, true}, {"c", 1, false}}},
		{"sequential without ids", "StreamPredictions2",
			[]ev{req(""), res(""), res(""), req(""), res(""), res(""), res(""), req(""), fail("")},
			[]want{{"", 2, false}, {"", 3, false}, {"", 0, true}}},
		{"one sequence id reused", "StreamPredictions2",
			[]ev{req("s"), res("s"), res("s"), req("s"), res("s")},
			[]want{{"s", 2, false}, {"s", 1, false}}},
		{"sent ahead without ids", "StreamPredictions2",
			[]ev{req(""), req(""), req(""), res(""), res(""), res("")},
			[]want{{"", 1, false}, {"", 1, false}, {"", 1, false}}},
		{"responses without ids to requests with ids", "StreamPredictions2",
			[]ev{req("a"), res(""), req("b"), res(""), res("")},
			[]want{{"a", 1, false}, {"b", 2, false}}},
		{"a response to an id never sent", "StreamPredictions2",
			[]ev{req("a"), res("a"), res("zz")},
			[]want{{"a", 1, false}}},
	} {
		start := time.Now()
		tr := NewStreamTracker(GRPCRoute("/"+tsInferenceService+"/"+tc.method), start)
		if tr == nil {
			t.Fatalf("%s: %s not followed", tc.name, tc.method)
		}
		for _, e := range tc.evs {
			if e.req {
				tr.Request(e.id)
			} else {
				tr.Response(e.id, false, e.failed)
			}
		}
		var c record.Call
		tr.Fill(&c)
		if len(c.StreamRequests) != len(tc.want) {
			t.Fatalf("%s: %d requests, want %d", tc.name, len(c.StreamRequests), len(tc.want))
		}
		for i, w := range tc.want {
			r := c.StreamRequests[i]
			if r.ID != w.id || r.Responses != w.responses || r.Error != w.failed || r.Final {
				t.Errorf("%s: request %d: id %q, %d responses, failed %v, final %v; want id %q, %d responses, failed %v", tc.name, i, r.ID, r.Responses, r.Error, r.Final, w.id, w.responses, w.failed)
			}
			if r.Responses > 0 && r.Gaps.Count != r.Responses-1 {
				t.Errorf("%s: request %d: %d gaps for %d responses", tc.name, i, r.Gaps.Count, r.Responses)
			}
		}
	}
}

// TestWatchStreamRoutes: the routes followed message by message, and a
// StreamPredictions2 stream followed from its framed bytes as the proxy
// feeds them.
func TestWatchStreamRoutes(t *testing.T) {
	for _, tc := range []struct {
		method string
		follow bool
	}{
		{"/inference.GRPCInferenceService/ModelStreamInfer", true},
		{"/" + tsInferenceService + "/StreamPredictions", true},
		{"/" + tsInferenceService + "/StreamPredictions2", true},
		{"/inference.GRPCInferenceService/ModelInfer", false},
		{"/" + tsInferenceService + "/Predictions", false},
		{"/tensorflow.serving.PredictionService/Predict", false},
	} {
		r := GRPCRoute(tc.method)
		var req, resp GRPCScanner
		req.Reset(r.Message, 0)
		resp.Reset(r.Reply, 0)
		if got := WatchStream(r, time.Now(), &req, &resp) != nil; got != tc.follow || r.TracksStream() != tc.follow || (NewStreamTracker(r, time.Now()) != nil) != tc.follow {
			t.Errorf("%s: followed %v, want %v", tc.method, got, tc.follow)
		}
	}

	r := GRPCRoute("/" + tsInferenceService + "/StreamPredictions2")
	var req, resp GRPCScanner
	req.Reset(r.Message, 0)
	resp.Reset(r.Reply, 0)
	tr := WatchStream(r, time.Now(), &req, &resp)
	a, b := proto.String("a"), proto.String("b")
	// Request a's id follows 3000 input bytes, a response's id 3000 bytes
	// of prediction, request b's failure a long message: the scanners
	// hand over the fields read, wherever they are.
	feed := func(s *GRPCScanner, m []byte) {
		f := frame(false, m)
		for i := range f { // a byte at a time: heads span chunks
			if err := s.Feed(f[i : i+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed(&req, tsRequest(t, a, 3000))
	feed(&resp, tsResponse(t, string(bytes.Repeat([]byte("x"), 3000)), a, nil))
	feed(&req, tsRequest(t, b, 10))
	feed(&resp, tsResponse(t, "y", a, nil))
	feed(&resp, tsResponse(t, "", b, &status.Status{Code: 13, Message: string(bytes.Repeat([]byte("e"), 3000))}))
	var c record.Call
	tr.Fill(&c)
	if len(c.StreamRequests) != 2 {
		t.Fatalf("%d requests, want 2", len(c.StreamRequests))
	}
	if r := c.StreamRequests[0]; r.ID != "a" || r.Responses != 2 || r.Error {
		t.Errorf("request a: %+v, want 2 responses", r)
	}
	if r := c.StreamRequests[1]; r.ID != "b" || r.Responses != 0 || !r.Error {
		t.Errorf("request b: %+v, want failed without responses", r)
	}
}

// pickRef is what HeadFields hands over of a valid message b, read with
// the protobuf runtime's wire functions: the fields in want re-encoded,
// contents clipped to pickKeep, while they fit max.
func pickRef(b []byte, want uint64, max int) (out []byte, whole, ok bool) {
	whole = true
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return nil, false, false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, false, false
		}
		if num < 64 && want&(1<<num) != 0 {
			if len(out)+2*varintMax+pickKeep > max {
				whole = false
			} else if typ == protowire.BytesType {
				v, _ := protowire.ConsumeBytes(b)
				v = v[:min(len(v), pickKeep)]
				out = protowire.AppendBytes(protowire.AppendTag(out, num, typ), v)
			} else {
				out = append(protowire.AppendTag(out, num, typ), b[:m]...)
			}
		}
		b = b[m:]
	}
	return out, whole, true
}

// heads runs a scanner with HeadFields over a stream fed in chunks of the
// given sizes (cycled; all at once when none) and returns each head.
func heads(stream []byte, want uint64, max int, sizes []byte) (got [][]byte, whole []bool) {
	var s GRPCScanner
	s.Reset(KindOther, 0)
	s.HeadFields(want, max, func(h []byte, w bool) {
		got = append(got, bytes.Clone(h))
		whole = append(whole, w)
	})
	for i := 0; len(stream) > 0; i++ {
		n := len(stream)
		if len(sizes) > 0 {
			n = min(n, int(sizes[i%len(sizes)])+1)
		}
		s.Feed(stream[:n])
		stream = stream[n:]
	}
	return got, whole
}

// TestHeadFields: the picked fields of messages, fed a byte at a time,
// are the reference's.
func TestHeadFields(t *testing.T) {
	seq := proto.String("seq")
	big := bytes.Repeat([]byte("z"), 5000)
	for _, tc := range []struct {
		name    string
		msg     []byte
		want    uint64
		max     int
		partial bool // a field is left out for max
	}{
		{"request id after a large input", tsRequest(t, seq, 5000), 1 << 4, headBytes, false},
		{"request without id", tsRequest(t, nil, 5000), 1 << 4, headBytes, false},
		{"response id and status after a large prediction", tsResponse(t, string(big), seq, &status.Status{Code: 13, Message: string(big)}), 1<<2 | 1<<3, headBytes, false},
		{"varint and fixed fields", protowire.AppendFixed64(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 300), 2, protowire.Fixed64Type), 7), 1<<1 | 1<<2, headBytes, false},
		{"left out for max", tsResponse(t, "", seq, &status.Status{Code: 13}), 1<<2 | 1<<3, 2*varintMax + pickKeep + 3, true},
		{"empty message", nil, 1 << 4, headBytes, false},
	} {
		ref, refWhole, ok := pickRef(tc.msg, tc.want, tc.max)
		if !ok || refWhole == tc.partial {
			t.Fatalf("%s: valid %v, whole %v: not the case the test means", tc.name, ok, refWhole)
		}
		got, whole := heads(frame(false, tc.msg), tc.want, tc.max, []byte{0})
		if len(got) != 1 || !bytes.Equal(got[0], ref) || whole[0] != refWhole {
			t.Errorf("%s: heads %q (whole %v), want %q (whole %v)", tc.name, got, whole, ref, refWhole)
		}
	}
}

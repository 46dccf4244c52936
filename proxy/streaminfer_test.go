package proxy

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// decoupled is a Triton-style decoupled model: each request gets `n`
// responses (its parameter "n", default 3), `gap` apart, the last flagged
// triton_final_response, all with the request's id; requests are served
// concurrently on the one stream. It notes when it sent each first
// response: the ground truth.
type decoupled struct {
	inference.UnimplementedGRPCInferenceServiceServer
	gap time.Duration

	mu    sync.Mutex
	first map[string]time.Time
}

func (d *decoupled) ModelStreamInfer(s grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	var send sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n := 3
		if p := req.Parameters["n"]; p != nil {
			n = int(p.GetInt64Param())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				time.Sleep(d.gap)
				res := &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
					ModelName: req.ModelName, Id: req.Id,
					Parameters: map[string]*inference.InferParameter{
						"triton_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == n-1}},
					},
					RawOutputContents: [][]byte{[]byte(fmt.Sprintf("%s token %d", req.Id, i))},
				}}
				if req.Id == "bad" {
					res = &inference.ModelStreamInferResponse{ErrorMessage: "model failed", InferResponse: &inference.ModelInferResponse{Id: req.Id}}
				}
				send.Lock()
				err := s.Send(res)
				if i == 0 {
					d.mu.Lock()
					d.first[req.Id] = time.Now()
					d.mu.Unlock()
				}
				send.Unlock()
				if err != nil || req.Id == "bad" {
					return
				}
			}
		}()
	}
}

func streamRequest(id string, n int64) []byte {
	b, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "llm", Id: id,
		Parameters:       map[string]*inference.InferParameter{"n": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: n}}},
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{[]byte("prompt " + id)}})
	return b
}

// TestStreamInferDecoupled: several requests multiplexed on one
// ModelStreamInfer stream, each answered by several responses; through the
// sidecar the client receives what it receives directly (the same messages
// per request, in order), and the record matches every response to its
// request by id, with first-response times that agree with when the server
// sent them, gaps, counts, final flags and in-stream errors.
func TestStreamInferDecoupled(t *testing.T) {
	srv := &decoupled{gap: 10 * time.Millisecond, first: map[string]time.Time{}}
	s := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(s, srv)
	l := listen(t)
	go s.Serve(l)
	defer s.Stop()
	h := newHarness(t, l.Addr().String(), true)

	reqs := map[string]int64{"a": 4, "b": 2, "c": 6, "bad": 3}
	run := func(addr string) (map[string][][]byte, map[string]time.Time) {
		cc := dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/inference.GRPCInferenceService/ModelStreamInfer", grpc.ForceCodec(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		sent := map[string]time.Time{}
		for _, id := range []string{"a", "b", "c", "bad"} {
			m := streamRequest(id, reqs[id])
			sent[id] = time.Now()
			if err := st.SendMsg(&m); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Millisecond) // interleave the answers
		}
		st.CloseSend()
		got := map[string][][]byte{}
		for {
			var m []byte
			if err := st.RecvMsg(&m); err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				return got, sent
			}
			var res inference.ModelStreamInferResponse
			if err := proto.Unmarshal(m, &res); err != nil {
				t.Fatal(err)
			}
			id := res.GetInferResponse().GetId()
			got[id] = append(got[id], m)
		}
	}
	direct, _ := run(l.Addr().String())
	srv.mu.Lock()
	clear(srv.first)
	srv.mu.Unlock()
	proxied, _ := run(h.addr)
	for id := range reqs {
		if len(direct[id]) == 0 || len(direct[id]) != len(proxied[id]) {
			t.Fatalf("request %s: %d responses direct, %d proxied", id, len(direct[id]), len(proxied[id]))
		}
		for i := range direct[id] {
			if !slices.Equal(direct[id][i], proxied[id][i]) {
				t.Fatalf("request %s response %d differs through the sidecar", id, i)
			}
		}
	}

	c := h.waitRecords(1)[0]
	if len(c.StreamRequests) != len(reqs) {
		t.Fatalf("%d stream requests in the record, want %d", len(c.StreamRequests), len(reqs))
	}
	for _, r := range c.StreamRequests {
		want := int(reqs[r.ID])
		if r.ID == "bad" {
			want = 1
		}
		if r.Responses != want || r.Final != (r.ID != "bad") || r.Error != (r.ID == "bad") {
			t.Errorf("request %s: %d responses final %v error %v, want %d final %v error %v", r.ID, r.Responses, r.Final, r.Error, want, r.ID != "bad", r.ID == "bad")
		}
		if r.Gaps.Count != want-1 {
			t.Errorf("request %s: %d gaps, want %d", r.ID, r.Gaps.Count, want-1)
		}
		// The first response was read at the sidecar after the server sent
		// it: within a millisecond or so on loopback (logged), never before.
		sentAt := srv.first[r.ID].Sub(c.Start)
		lag := r.FirstResponse - sentAt
		t.Logf("request %s: first response %v after its arrival, %v after the server sent it", r.ID, r.FirstResponse-r.Arrived, lag)
		if lag < -time.Millisecond || lag > 50*time.Millisecond || r.FirstResponse <= r.Arrived {
			t.Errorf("request %s: first response at %v, server sent it at %v, request arrived %v", r.ID, r.FirstResponse, sentAt, r.Arrived)
		}
		for _, g := range r.Gaps.Kept {
			if g < 5*time.Millisecond {
				t.Errorf("request %s: gap %v, the server spaces responses 10ms", r.ID, g)
			}
		}
	}
}

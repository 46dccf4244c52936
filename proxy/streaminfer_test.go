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
// responses (its parameter "n", default 3), the last flagged
// triton_final_response, all with the request's id; requests are served
// concurrently on the one stream. It sends a request's next response only
// after the client has received the previous one (acked), `gap` later: a
// proxy that held a response back would stall the stream instead of
// passing a timing check by luck. It notes when it sent each response,
// before the send: the ground truth a read can only follow.
type decoupled struct {
	inference.UnimplementedGRPCInferenceServiceServer
	gap time.Duration

	mu    sync.Mutex
	sent  map[string][]time.Time
	acks  map[string]chan struct{}
	stall error
}

// reset starts a run: no stamps, an ack channel per request id.
func (d *decoupled) reset(ids map[string]int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent, d.acks, d.stall = map[string][]time.Time{}, map[string]chan struct{}{}, nil
	for id, n := range ids {
		d.acks[id] = make(chan struct{}, n)
	}
}

// ack is the client saying it has received one more response to id.
func (d *decoupled) ack(id string) {
	d.mu.Lock()
	c := d.acks[id]
	d.mu.Unlock()
	if c != nil {
		c <- struct{}{}
	}
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
		d.mu.Lock()
		acks := d.acks[req.Id]
		d.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if i > 0 {
					select {
					case <-acks:
					case <-time.After(5 * time.Second):
						d.mu.Lock()
						d.stall = fmt.Errorf("request %s: response %d not at the client 5s after it was sent", req.Id, i-1)
						d.mu.Unlock()
						return
					}
				}
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
				d.mu.Lock()
				d.sent[req.Id] = append(d.sent[req.Id], time.Now())
				d.mu.Unlock()
				err := s.Send(res)
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
	srv := &decoupled{gap: 10 * time.Millisecond}
	s := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(s, srv)
	l := listen(t)
	go s.Serve(l)
	defer s.Stop()
	h := newHarness(t, l.Addr().String(), true)

	reqs := map[string]int64{"a": 4, "b": 2, "c": 6, "bad": 3}
	run := func(addr string) (map[string][][]byte, map[string]time.Time) {
		srv.reset(reqs)
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
				srv.mu.Lock()
				defer srv.mu.Unlock()
				if srv.stall != nil {
					t.Fatalf("%s: %v", addr, srv.stall)
				}
				return got, sent
			}
			var res inference.ModelStreamInferResponse
			if err := proto.Unmarshal(m, &res); err != nil {
				t.Fatal(err)
			}
			id := res.GetInferResponse().GetId()
			got[id] = append(got[id], m)
			srv.ack(id)
		}
	}
	direct, _ := run(l.Addr().String())
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
			// Its one answer is an error: no output, so no response counted
			// and no first-response time (the TTFT of a failure is not one).
			if r.Responses != 0 || r.Final || !r.Error || r.FirstResponse != 0 || r.Gaps.Count != 0 {
				t.Errorf("request bad: %d responses, first at %v, %d gaps, final %v, error %v; want none, failed", r.Responses, r.FirstResponse, r.Gaps.Count, r.Final, r.Error)
			}
			continue
		}
		if r.Responses != want || !r.Final || r.Error {
			t.Errorf("request %s: %d responses final %v error %v, want %d final, no error", r.ID, r.Responses, r.Final, r.Error, want)
		}
		if r.Gaps.Count != want-1 {
			t.Errorf("request %s: %d gaps, want %d", r.ID, r.Gaps.Count, want-1)
		}
		// Every response was read at the sidecar after the server stamped
		// it (the stamp precedes the send): the first at FirstResponse, the
		// others a kept gap after the one before. How much after is the
		// machine's scheduling (logged); the lockstep server already failed
		// the run if one was held back.
		sent := srv.sent[r.ID]
		if len(r.Gaps.Kept) != r.Gaps.Count || len(sent) != want {
			t.Fatalf("request %s: %d gaps kept of %d, %d sends stamped", r.ID, len(r.Gaps.Kept), r.Gaps.Count, len(sent))
		}
		reads := eventTimes(r.FirstResponse, r.Gaps)
		for i, at := range sent {
			lag := reads[i] - at.Sub(c.Start)
			t.Logf("request %s response %d: read %v after the server sent it", r.ID, i, lag)
			if lag <= 0 || lag > 5*time.Second {
				t.Errorf("request %s response %d: read at %v, server sent it at %v", r.ID, i, reads[i], at.Sub(c.Start))
			}
		}
		if last := reads[len(reads)-1]; r.FirstResponse <= r.Arrived || last != r.LastResponse {
			t.Errorf("request %s: arrived %v, first response %v, last %v, gaps add up to %v", r.ID, r.Arrived, r.FirstResponse, r.LastResponse, last)
		}
	}
}

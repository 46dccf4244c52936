package proxy

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/torchserve"
)

// tsStreamer is a TorchServe LLM: each request's input "tokens" says how
// many responses answer it, each echoing its sequenceId, a millisecond
// apart; a request with sequenceId "bad" is answered by one response whose
// status is INTERNAL, as StreamPredictions2 reports a failed request.
type tsStreamer struct {
	torchserve.UnimplementedInferenceAPIsServiceServer
}

func (tsStreamer) answer(req *torchserve.PredictionsRequest, send func(*torchserve.PredictionResponse) error) error {
	if req.GetSequenceId() == "bad" {
		return send(&torchserve.PredictionResponse{SequenceId: req.SequenceId, Status: &status.Status{Code: 13, Message: "worker died"}})
	}
	n, _ := strconv.Atoi(string(req.Input["tokens"]))
	for i := range n {
		time.Sleep(time.Millisecond)
		if err := send(&torchserve.PredictionResponse{Prediction: []byte(fmt.Sprintf("token %d", i)), SequenceId: req.SequenceId}); err != nil {
			return err
		}
	}
	return nil
}

func (s tsStreamer) StreamPredictions(req *torchserve.PredictionsRequest, st grpc.ServerStreamingServer[torchserve.PredictionResponse]) error {
	return s.answer(req, st.Send)
}

func (s tsStreamer) StreamPredictions2(st grpc.BidiStreamingServer[torchserve.PredictionsRequest, torchserve.PredictionResponse]) error {
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.answer(req, st.Send); err != nil {
			return err
		}
	}
}

// TestStreamPredictionsTracked: TorchServe's StreamPredictions2 with the
// client sending a request, reading its answer, sending the next, and a
// StreamPredictions; the record follows each request's responses (TorchServe
// sends no final flag) and the response whose status is INTERNAL fails its
// request, though the stream goes on OK.
func TestStreamPredictionsTracked(t *testing.T) {
	s := grpc.NewServer()
	torchserve.RegisterInferenceAPIsServiceServer(s, tsStreamer{})
	l := listen(t)
	go s.Serve(l)
	defer s.Stop()
	h := newHarness(t, l.Addr().String(), true)
	ts := torchserve.NewInferenceAPIsServiceClient(dial(t, h.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type sent struct {
		id     *string
		tokens int
		pad    int // input bytes beside the token count
	}
	idOf := func(r sent) string {
		if r.id == nil {
			return ""
		}
		return *r.id
	}
	reqs := []sent{
		{id: proto.String("a"), tokens: 3},
		{id: proto.String("bad")},
		{tokens: 2}, // no sequenceId: matched as the request not yet answered
		// Its id follows 2000 input bytes: read all the same.
		{id: proto.String("c"), tokens: 4, pad: 2000},
	}
	st, err := ts.StreamPredictions2(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		in := map[string][]byte{"tokens": []byte(strconv.Itoa(r.tokens)), "prompt": []byte(strings.Repeat("p", r.pad))}
		if err := st.Send(&torchserve.PredictionsRequest{ModelName: "llm", Input: in, SequenceId: r.id}); err != nil {
			t.Fatal(err)
		}
		for range max(r.tokens, 1) {
			res, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if res.GetSequenceId() != idOf(r) {
				t.Fatalf("response to %q: sequenceId %q", idOf(r), res.GetSequenceId())
			}
		}
	}
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	one, err := ts.StreamPredictions(ctx, &torchserve.PredictionsRequest{ModelName: "llm", Input: map[string][]byte{"tokens": []byte("5")}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := one.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}

	recs := h.waitRecords(2)
	type req struct {
		ID                string
		Responses, Gaps   int
		Error, Final, TTF bool
	}
	for i, want := range [][]req{
		{{"a", 3, 2, false, false, true}, {"bad", 0, 0, true, false, false}, {"", 2, 1, false, false, true}, {"c", 4, 3, false, false, true}},
		{{"", 5, 4, false, false, true}},
	} {
		c := recs[i]
		if c.Method != "stream_predict" || c.Code != "OK" {
			t.Errorf("call %d: %s %s, want stream_predict OK", i, c.Method, c.Code)
		}
		var got []req
		for _, r := range c.StreamRequests {
			got = append(got, req{r.ID, r.Responses, r.Gaps.Count, r.Error, r.Final, r.FirstResponse > r.Arrived && r.LastResponse >= r.FirstResponse})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("call %d: stream requests\n got %+v\nwant %+v", i, got, want)
		}
	}
}

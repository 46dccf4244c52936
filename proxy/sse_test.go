package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/record"
)

// sseServer streams OpenAI chat completion chunks with planned gaps and
// notes when it sent each, before the write: the ground truth the
// sidecar's timing is checked against (a read can only follow its stamp).
// With acks set it is in lockstep with the client: each event after the
// first goes out only once the client has acked the one before, its gap
// counted from the ack, so a sidecar that held an event back stalls the
// stream (stall) instead of passing a timing check by luck, and events
// never reach the sidecar back to back.
type sseServer struct {
	gaps  []time.Duration // before each content event; gaps[0] is the time to the first
	usage bool            // end with a usage chunk (stream_options.include_usage)
	acks  chan struct{}   // lockstep: one per event the client has; nil: free-running

	mu      sync.Mutex
	flushed []time.Time // each event's send, stamped before its write: content events first, then usage, [DONE]
	sent    [][]byte
	stall   error         // lockstep: an event the client never acked
	stopped chan struct{} // closed when the handler returns
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer close(s.stopped)
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	send := func(ev string) bool {
		b := []byte("data: " + ev + "\n\n")
		at := time.Now()
		if _, err := w.Write(b); err != nil {
			return false
		}
		w.(http.Flusher).Flush()
		s.mu.Lock()
		s.flushed = append(s.flushed, at)
		s.sent = append(s.sent, b)
		s.mu.Unlock()
		return true
	}
	// acked waits, in lockstep, until the client has the last event sent.
	acked := func() bool {
		if s.acks == nil {
			return true
		}
		select {
		case <-s.acks:
			return true
		case <-r.Context().Done():
			return false
		case <-time.After(5 * time.Second):
			s.mu.Lock()
			s.stall = fmt.Errorf("event %d not at the client 5s after it was sent", len(s.sent)-1)
			s.mu.Unlock()
			return false
		}
	}
	// A role-only first chunk, as vLLM and OpenAI send: not a token.
	if !send(`{"id":"c1","object":"chat.completion.chunk","model":"llm","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`) {
		return
	}
	for i, g := range s.gaps {
		if !acked() {
			return
		}
		t := time.NewTimer(g)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		fin := "null"
		if i == len(s.gaps)-1 {
			fin = `"stop"`
		}
		if !send(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":"llm","choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":%s}]}`, i, fin)) {
			return
		}
	}
	// The trailing events a little apart, so that each is its own read at
	// the sidecar as in a real server (back to back, TCP may merge them).
	if !acked() {
		return
	}
	time.Sleep(2 * time.Millisecond)
	if s.usage {
		send(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":"llm","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`, len(s.gaps), 12+len(s.gaps)))
		if !acked() {
			return
		}
	}
	time.Sleep(2 * time.Millisecond)
	send("[DONE]")
}

// ack is the client saying it has received one more event (lockstep).
func (s *sseServer) ack() { s.acks <- struct{}{} }

// lockstep makes s wait for the client's acks (buffered: the client never
// blocks on one).
func (s *sseServer) lockstep() *sseServer {
	s.acks = make(chan struct{}, len(s.gaps)+3)
	return s
}

// sseStall and sseSlack: the stall a timing test puts between two tokens,
// and how far after the client read an event the sidecar may note it as
// written. The sidecar takes that time when its write to the client has
// returned, so a client may read the event first; the difference is how
// long the sidecar was descheduled between the write and its clock read:
// microseconds, 200 ms only on a machine stalled far past what a test
// here may assume. A stall attributed to the wrong gap puts an event
// sseStall late (the server waits sseStall after the client's ack), past
// the slack.
const (
	sseStall = 300 * time.Millisecond
	sseSlack = 200 * time.Millisecond
)

// checkTokenTimes checks the sidecar's client-side times of the content
// events (FirstToken, then each kept gap after the one before) against
// ground truth: each after the server stamped the event (stamped[i],
// before its write: deterministic) and by the client's read of it
// (read[i]) plus sseSlack; and the gaps' bookkeeping.
func checkTokenTimes(t *testing.T, c *record.Call, stamped, read []time.Time) {
	t.Helper()
	l := c.LLM
	if len(l.Gaps.Kept) != l.Gaps.Count || len(stamped) != l.ContentEvents || len(read) != l.ContentEvents {
		t.Fatalf("%d gaps kept of %d, %d content events, %d stamped, %d read", len(l.Gaps.Kept), l.Gaps.Count, l.ContentEvents, len(stamped), len(read))
	}
	times := eventTimes(l.FirstToken, l.Gaps)
	var lags []time.Duration
	for i, at := range times {
		from, by := stamped[i].Sub(c.Start), read[i].Sub(c.Start)
		lags = append(lags, at-from)
		if at <= from || at > by+sseSlack {
			t.Errorf("token %d at the client at %v by the sidecar; the server sent it at %v, the client read it at %v", i, at, from, by)
		}
	}
	t.Logf("token times server send -> sidecar's client write: %v", lags)
	if at := times[len(times)-1]; l.LastToken != at || l.Gaps.Max != slices.Max(l.Gaps.Kept) {
		t.Errorf("last token %v, want %v; max gap %v of %v", l.LastToken, at, l.Gaps.Max, l.Gaps.Kept)
	}
}

// eventTimes rebuilds when a stream's events passed from the record: the
// first, then each kept gap after the one before (every gap must be kept).
func eventTimes(first time.Duration, g record.Gaps) []time.Duration {
	times := []time.Duration{first}
	for _, d := range g.Kept {
		times = append(times, times[len(times)-1]+d)
	}
	return times
}

// chunk is one HTTP/1.1 chunk the client read, and when its last byte came.
type chunk struct {
	data []byte
	at   time.Time
}

// streamChat sends a streaming chat request on a raw connection and reads
// the chunked response, timing each chunk; after stopAfter chunks (0: all)
// it hangs up. ack, if not nil, is called on each chunk read.
func streamChat(t *testing.T, addr string, stopAfter int, ack func()) (sentAt time.Time, chunks []chunk) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body := `{"model":"llm","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	sentAt = time.Now()
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !slices.Equal(res.TransferEncoding, []string{"chunked"}) {
		t.Fatalf("status %d, transfer encoding %v", res.StatusCode, res.TransferEncoding)
	}
	// Read the chunked framing by hand: each chunk's boundaries are what is checked.
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("chunk size: %v", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q: %v", line, err)
		}
		if n == 0 {
			return sentAt, chunks
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatalf("chunk: %v", err)
		}
		chunks = append(chunks, chunk{data: data[:n], at: time.Now()})
		if ack != nil {
			ack()
		}
		if stopAfter > 0 && len(chunks) == stopAfter {
			return sentAt, chunks
		}
	}
}

func sseHarness(t *testing.T, srv *sseServer) *harness { return upstreamHarness(t, srv) }

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// upstreamHarness serves h as the HTTP upstream of a sidecar harness.
func upstreamHarness(t *testing.T, h http.Handler) *harness {
	t.Helper()
	l := listen(t)
	hs := &http.Server{Handler: h}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return newHarness(t, l.Addr().String(), false)
}

// TestSSETiming: a stream with known gaps (one a stall) reaches the client
// byte for byte, one chunk per event as the server sent them, none held
// back (the server is in lockstep with the client: a held event stalls the
// stream); the sidecar's token counts, TTFT and inter-token gaps agree with
// the server's ground truth: every token noted at the client after the
// server sent it and by the client's read of it (so none is off by the
// stall). How close to the server's gaps is logged, not asserted: it is
// the machine's scheduling (BenchmarkSSEEventLag measures the lag).
func TestSSETiming(t *testing.T) {
	gaps := []time.Duration{30 * time.Millisecond}
	for range 12 {
		gaps = append(gaps, 4*time.Millisecond)
	}
	gaps = append(gaps, sseStall) // a stall mid-stream
	for range 6 {
		gaps = append(gaps, 3*time.Millisecond)
	}
	for _, usage := range []bool{true, false} {
		t.Run(fmt.Sprintf("usage=%v", usage), func(t *testing.T) {
			srv := (&sseServer{gaps: gaps, usage: usage, stopped: make(chan struct{})}).lockstep()
			h := sseHarness(t, srv)
			sentAt, chunks := streamChat(t, h.addr, 0, srv.ack)
			<-srv.stopped
			if srv.stall != nil {
				t.Fatal(srv.stall)
			}
			c := h.waitRecords(1)[0]

			// Byte for byte, and no chunk split or merged.
			if len(chunks) != len(srv.sent) {
				t.Fatalf("client read %d chunks, server flushed %d events", len(chunks), len(srv.sent))
			}
			var lag []time.Duration
			for i, ch := range chunks {
				if !bytes.Equal(ch.data, srv.sent[i]) {
					t.Fatalf("chunk %d = %q, server sent %q", i, ch.data, srv.sent[i])
				}
				lag = append(lag, ch.at.Sub(srv.flushed[i]))
			}
			slices.Sort(lag)
			t.Logf("event lag server send -> client read: p50 %v p99 %v max %v", lag[len(lag)/2], lag[len(lag)*99/100], lag[len(lag)-1])

			l := c.LLM
			if l == nil {
				t.Fatal("no LLM timing in the record")
			}
			if !l.Streamed || l.ContentEvents != len(gaps) || l.FinishReason != "stop" {
				t.Fatalf("streamed %v, content events %d (want %d), finish %q", l.Streamed, l.ContentEvents, len(gaps), l.FinishReason)
			}
			if l.OutputTokens != len(gaps) || l.TokensEstimated == usage {
				t.Errorf("output tokens %d estimated %v, want %d estimated %v", l.OutputTokens, l.TokensEstimated, len(gaps), !usage)
			}
			if usage && l.PromptTokens != 12 {
				t.Errorf("prompt tokens %d, want 12", l.PromptTokens)
			}
			// Ground truth: the server's sends of content events 1..n and
			// the client's reads of them.
			var read []time.Time
			for _, ch := range chunks[1 : 1+len(gaps)] {
				read = append(read, ch.at)
			}
			checkTokenTimes(t, c, srv.flushed[1:1+len(gaps)], read)
			var errs []time.Duration
			truth := srv.flushed[1 : 1+len(gaps)]
			for i, g := range l.Gaps.Kept {
				errs = append(errs, (g - truth[i+1].Sub(truth[i])).Abs())
			}
			slices.Sort(errs)
			t.Logf("gap error against the server's: p50 %v p90 %v max %v (stall gap %v)", errs[len(errs)/2], errs[len(errs)*9/10], errs[len(errs)-1], l.Gaps.Max)
			// TTFT counts from the request's arrival, after the client
			// sent it.
			ttft, ok := l.TTFT()
			if !ok || ttft <= 0 || ttft >= read[0].Sub(sentAt)+sseSlack {
				t.Errorf("TTFT %v (ok %v), the client saw %v", ttft, ok, read[0].Sub(sentAt))
			}
			if up, ok := l.TTFTUpstream(c); !ok || up > ttft || up < 30*time.Millisecond {
				t.Errorf("upstream TTFT %v (ok %v), TTFT %v, server's first gap 30ms", up, ok, ttft)
			}
			if tpot, ok := l.TPOT(); !ok || tpot <= 0 {
				t.Errorf("TPOT %v %v", tpot, ok)
			}
		})
	}
}

// TestSSEClientDisconnect: the client hangs up mid-stream; the record says
// so and counts only what reached it.
func TestSSEClientDisconnect(t *testing.T) {
	gaps := make([]time.Duration, 50)
	for i := range gaps {
		gaps[i] = 5 * time.Millisecond
	}
	srv := &sseServer{gaps: gaps, stopped: make(chan struct{})}
	h := sseHarness(t, srv)
	_, chunks := streamChat(t, h.addr, 4, nil) // role chunk + 3 tokens
	if len(chunks) != 4 {
		t.Fatalf("read %d chunks", len(chunks))
	}
	select {
	case <-srv.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream kept streaming after the client left")
	}
	c := h.waitRecords(1)[0]
	if c.ErrorKind != record.ErrClientCancel || c.LLM == nil || !c.LLM.Disconnected {
		t.Fatalf("error kind %q, llm %+v", c.ErrorKind, c.LLM)
	}
	if n := c.LLM.ContentEvents; n < 3 || n >= len(gaps) {
		t.Errorf("content events %d, want the 3+ the client got, fewer than %d", n, len(gaps))
	}
	if !c.LLM.TokensEstimated || c.LLM.OutputTokens != c.LLM.ContentEvents {
		t.Errorf("tokens %d estimated %v, want the counted %d", c.LLM.OutputTokens, c.LLM.TokensEstimated, c.LLM.ContentEvents)
	}
}

// TestSSEOverHTTP2: an event stream over h2c (prior knowledge) is timed
// too, on whichever data plane forwards HTTP/2 (CI runs this on both): the
// server in lockstep with the client, each token noted at the client
// between the server's send and the client's read of it.
func TestSSEOverHTTP2(t *testing.T) {
	gaps := []time.Duration{20 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, sseStall, 5 * time.Millisecond}
	srv := (&sseServer{gaps: gaps, usage: true, stopped: make(chan struct{})}).lockstep()
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	l := listen(t)
	hs := &http.Server{Handler: srv, Protocols: h2c}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	h := newHarness(t, l.Addr().String(), true) // an HTTP/2 upstream, the frame plane when it is on

	client := &http.Client{Transport: &http.Transport{Protocols: h2c}}
	req, _ := http.NewRequest("POST", "http://"+h.addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"llm","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtoMajor != 2 {
		t.Fatalf("proto %s", res.Proto)
	}
	// Event by event (each ends in a blank line), acked as read.
	var body []byte
	var read []time.Time
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadBytes('\n')
		body = append(body, line...)
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if string(line) == "\n" {
			read = append(read, time.Now())
			srv.ack()
		}
	}
	res.Body.Close()
	<-srv.stopped
	if srv.stall != nil {
		t.Fatal(srv.stall)
	}
	if want := bytes.Join(srv.sent, nil); !bytes.Equal(body, want) {
		t.Fatalf("body differs through the sidecar:\n%q\nwant\n%q", body, want)
	}
	c := h.waitRecords(1)[0]
	l2 := c.LLM
	if l2 == nil || l2.ContentEvents != len(gaps) || l2.Gaps.Count != len(gaps)-1 || l2.OutputTokens != len(gaps) || l2.TokensEstimated {
		t.Fatalf("llm %+v", l2)
	}
	if len(read) != len(srv.sent) {
		t.Fatalf("client read %d events, server sent %d", len(read), len(srv.sent))
	}
	checkTokenTimes(t, c, srv.flushed[1:1+len(gaps)], read[1:1+len(gaps)])
}

// TestResponsesAPI: OpenAI's Responses API (/v1/responses, vLLM serves it)
// is an LLM route like chat completions: its typed events are timed as they
// pass, and a whole answer's usage (input_tokens, output_tokens) is read.
func TestResponsesAPI(t *testing.T) {
	events := []string{
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\"}}\n\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"He\"}\n\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"llo\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":6,\"output_tokens\":2,\"total_tokens\":8}}}\n\n",
	}
	const whole = `{"id":"resp_1","object":"response","status":"completed","model":"llm","output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":6,"output_tokens":2,"total_tokens":8}}`
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, whole)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})
	h := upstreamHarness(t, mux)
	for _, req := range []string{`{"model":"llm","stream":true,"input":"hi"}`, `{"model":"llm","input":"hi"}`} {
		doHTTP(t, http.DefaultClient, "POST", "http://"+h.addr+"/v1/responses", jsonHeader, []byte(req))
	}
	recs := h.waitRecords(2)
	for i, c := range recs {
		streamed := i == 0
		if c.API != record.APIOpenAI || c.Method != "responses" || c.Model != "llm" || c.Stream != streamed {
			t.Errorf("call %d: api %q method %q model %q stream %v", i, c.API, c.Method, c.Model, c.Stream)
		}
		l := c.LLM
		if l == nil || l.Streamed != streamed || l.PromptTokens != 6 || l.OutputTokens != 2 || l.TokensEstimated {
			t.Fatalf("call %d: LLM record %+v", i, l)
		}
		if streamed && (l.ContentEvents != 2 || l.Gaps.Count != 1 || l.FirstToken <= 0) {
			t.Errorf("streamed: %d output events, %d gaps, first token %v; want 2, 1, > 0", l.ContentEvents, l.Gaps.Count, l.FirstToken)
		}
	}
}

// TestTritonGenerate: Triton's generate extension (POST
// /v2/models/{m}[/versions/{v}]/generate and /generate_stream, the LLM
// endpoint of its TensorRT-LLM and vLLM backends) is an inference call of
// the model in the path, and a generate_stream answer is timed event by
// event: each event carrying text_output is an output event; no usage, so
// tokens are counted from events.
func TestTritonGenerate(t *testing.T) {
	events := []string{
		`data: {"model_name":"llama","model_version":"1","text_output":"He"}` + "\n\n",
		`data: {"model_name":"llama","model_version":"1","text_output":"llo"}` + "\n\n",
		`data: {"model_name":"llama","model_version":"1","text_output":"!"}` + "\n\n",
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/llama/versions/1/generate", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model_name":"llama","model_version":"1","text_output":"Hello!"}`)
	})
	mux.HandleFunc("POST /v2/models/llama/versions/1/generate_stream", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for _, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})
	h := upstreamHarness(t, mux)
	for _, path := range []string{"generate_stream", "generate"} {
		doHTTP(t, http.DefaultClient, "POST", "http://"+h.addr+"/v2/models/llama/versions/1/"+path, jsonHeader,
			[]byte(`{"text_input":"hi","parameters":{"max_tokens":3,"stream":`+strconv.FormatBool(path == "generate_stream")+`}}`))
	}
	recs := h.waitRecords(2)
	for i, c := range recs {
		streamed := i == 0
		want := map[bool]string{true: "generate_stream", false: "generate"}[streamed]
		if c.API != record.APIKServeV2 || c.Method != want || c.Model != "llama" || c.Version != "1" || c.Stream != streamed || c.DecodeFail || c.Code != "200" {
			t.Errorf("call %d: api %q method %q model %q:%q stream %v decode failed %v code %s", i, c.API, c.Method, c.Model, c.Version, c.Stream, c.DecodeFail, c.Code)
		}
		if !streamed {
			continue
		}
		l := c.LLM
		if l == nil || !l.Streamed || l.ContentEvents != 3 || l.Gaps.Count != 2 || l.OutputTokens != 3 || !l.TokensEstimated || l.FirstToken <= 0 {
			t.Fatalf("generate_stream LLM record %+v", l)
		}
	}
}

// TestTGIStagesOverHTTP2: a non-streamed answer's TGI timing headers
// (x-validation-time, x-queue-time, x-inference-time) become server stages
// over h2c too, on whichever data plane forwards HTTP/2 (CI runs this on
// both), as over HTTP/1.1.
func TestTGIStagesOverHTTP2(t *testing.T) {
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	l := listen(t)
	hs := &http.Server{Protocols: h2c, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Validation-Time", "0.5")
		w.Header().Set("X-Queue-Time", "2")
		w.Header().Set("X-Inference-Time", "40.25")
		io.WriteString(w, `{"id":"1","object":"chat.completion","model":"llm","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	h := newHarness(t, l.Addr().String(), true)
	client := &http.Client{Transport: &http.Transport{Protocols: h2c}}
	doHTTP(t, client, "POST", "http://"+h.addr+"/v1/chat/completions", jsonHeader, []byte(`{"model":"llm","messages":[{"role":"user","content":"hi"}]}`))
	c := h.waitRecords(1)[0]
	want := []record.Stage{
		{Name: "validation", Duration: 500 * time.Microsecond, Source: inferapi.StageSourceTGI},
		{Name: "queue", Duration: 2 * time.Millisecond, Source: inferapi.StageSourceTGI},
		{Name: "inference", Duration: 40250 * time.Microsecond, Source: inferapi.StageSourceTGI},
	}
	if !reflect.DeepEqual(c.Stages, want) {
		t.Errorf("stages %+v, want %+v", c.Stages, want)
	}
}

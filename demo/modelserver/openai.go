package modelserver

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/demo/model"
)

// The toy LLM's pace and limits. tokenGap is its decode step: each token
// costs one real MLP forward pass plus this pause, so streamed chunks leave
// the server separated in time the way a real LLM's do.
const (
	tokenGap         = 2 * time.Millisecond
	defaultMaxTokens = 16
	maxMaxTokens     = 1024
)

var toyWords = [...]string{
	"the", "model", "server", "answers", "every", "request", "with", "a",
	"tensor", "while", "sidecar", "measures", "queue", "and", "compute", "time",
	"latency", "grows", "when", "batch", "fills", "workers", "are", "busy",
	"so", "watch", "phases", "not", "averages", "inference", "flows", "quietly",
}

type openAIRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"` // completions: a string or strings
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string or text parts
	} `json:"messages"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Stream              bool `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// text is the prompt as plain text: a completion's prompt or the chat
// messages' contents, joined by newlines.
func (r *openAIRequest) text(chat bool) string {
	if !chat {
		return rawText(r.Prompt)
	}
	parts := make([]string, 0, len(r.Messages))
	for _, m := range r.Messages {
		parts = append(parts, rawText(m.Content))
	}
	return strings.Join(parts, "\n")
}

// rawText reads a JSON string, an array of strings, or an array of
// {"type":"text","text":...} parts.
func rawText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var items []json.RawMessage
	if json.Unmarshal(v, &items) != nil {
		return ""
	}
	var b strings.Builder
	for _, it := range items {
		var part struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(it, &s) == nil {
			b.WriteString(s)
		} else if json.Unmarshal(it, &part) == nil {
			b.WriteString(part.Text)
		}
	}
	return b.String()
}

func (s *Server) httpChatCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveOpenAI(w, r, true)
}

func (s *Server) httpCompletions(w http.ResponseWriter, r *http.Request) {
	s.serveOpenAI(w, r, false)
}

// generation is one toy LLM request in flight.
type generation struct {
	s       *Server
	chat    bool
	id      string
	created int64
	req     openAIRequest
	max     int
	prompt  int    // prompt tokens
	seed    uint64 // from the prompt, so equal prompts give equal text
	words   []string
	started bool // SSE headers sent
	body    []byte
}

func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := readBody(w, r)
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	g := &generation{s: s, chat: chat, created: time.Now().Unix(), max: defaultMaxTokens}
	if err := json.Unmarshal(body, &g.req); err != nil {
		writeOpenAIError(w, status.Errorf(codes.InvalidArgument, "parse request: %v", err))
		return
	}
	if g.req.Model != modelLLM {
		writeOpenAIError(w, status.Errorf(codes.NotFound, "model %q does not exist; this server has %q", g.req.Model, modelLLM))
		return
	}
	for _, v := range []*int{g.req.MaxTokens, g.req.MaxCompletionTokens} {
		if v != nil {
			g.max = *v
		}
	}
	if g.max < 1 || g.max > maxMaxTokens {
		writeOpenAIError(w, status.Errorf(codes.InvalidArgument, "max_tokens %d is outside [1,%d]", g.max, maxMaxTokens))
		return
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	g.id = fmt.Sprintf("%s%d", prefix, s.seq.Add(1))

	m, err := s.find(modelLLM, "")
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	t, err := s.execute(r.Context(), m, job{
		preprocess: func() (int, error) {
			text := g.req.text(chat)
			g.prompt = len(strings.Fields(text))
			h := fnv.New64a()
			h.Write([]byte(text))
			g.seed = h.Sum64()
			return 1, nil
		},
		infer: func(ctx context.Context, sofar timing) (time.Duration, error) {
			if g.req.Stream {
				return g.stream(ctx, w, sofar)
			}
			return 0, g.generate(ctx, nil)
		},
		postprocess: func() error {
			if g.req.Stream {
				return nil
			}
			var err error
			g.body, err = json.Marshal(g.response())
			return err
		},
	})
	if g.started {
		// Declared as a trailer when the stream began: the full stages.
		w.Header().Set("Server-Timing", t.serverTiming())
		return
	}
	setServerTiming(w, t)
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(g.body)
}

// generate produces g.max words, one real MLP pass each, pacing them by
// tokenGap; emit, if set, is called with each word as it is produced.
func (g *generation) generate(ctx context.Context, emit func(i int, word string) error) error {
	x := make([]float32, model.InputSize)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for i := range g.max {
		if i > 0 {
			pause.Reset(tokenGap)
			select {
			case <-pause.C:
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		word := g.next(i, x)
		g.words = append(g.words, word)
		if emit != nil {
			if err := emit(i, word); err != nil {
				return err
			}
		}
	}
	return nil
}

// next picks word i: the MLP scores a state derived from the prompt and the
// position, and the winning class picks the word.
func (g *generation) next(i int, x []float32) string {
	r := rand.New(rand.NewPCG(g.seed, uint64(i)))
	for j := range x {
		x[j] = r.Float32()
	}
	p := g.s.mlp.Infer(x, 1)
	best := 0
	for k, v := range p {
		if v > p[best] {
			best = k
		}
	}
	return toyWords[(best*7+int(g.seed%uint64(len(toyWords)))+i*3)%len(toyWords)]
}

func (g *generation) usage() map[string]int {
	return map[string]int{
		"prompt_tokens": g.prompt, "completion_tokens": len(g.words), "total_tokens": g.prompt + len(g.words),
	}
}

func (g *generation) object(chunk bool) string {
	switch {
	case g.chat && chunk:
		return "chat.completion.chunk"
	case g.chat:
		return "chat.completion"
	}
	return "text_completion"
}

// response is the non-streaming answer.
func (g *generation) response() map[string]any {
	text := strings.Join(g.words, " ")
	choice := map[string]any{"index": 0, "finish_reason": "length"}
	if g.chat {
		choice["message"] = map[string]string{"role": "assistant", "content": text}
	} else {
		choice["text"] = text
	}
	return map[string]any{
		"id": g.id, "object": g.object(false), "created": g.created, "model": modelLLM,
		"choices": []any{choice}, "usage": g.usage(),
	}
}

// chunk is one streamed event: a token, or the final one with finish set.
func (g *generation) chunk(i int, word string, finish bool) map[string]any {
	if i > 0 && word != "" {
		word = " " + word
	}
	choice := map[string]any{"index": 0, "finish_reason": nil}
	if finish {
		choice["finish_reason"] = "length"
	}
	switch {
	case g.chat && finish:
		choice["delta"] = map[string]string{}
	case g.chat && i == 0:
		choice["delta"] = map[string]string{"role": "assistant", "content": word}
	case g.chat:
		choice["delta"] = map[string]string{"content": word}
	default:
		choice["text"] = word
	}
	return map[string]any{
		"id": g.id, "object": g.object(true), "created": g.created, "model": modelLLM, "choices": []any{choice},
	}
}

// stream answers with Server-Sent Events, one flushed event per token. The
// headers carry the stages known so far (queue, preprocess); the full
// Server-Timing follows as a trailer. It returns the time spent encoding
// and writing events, which is postprocess work.
func (g *generation) stream(ctx context.Context, w http.ResponseWriter, sofar timing) (time.Duration, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Trailer", "Server-Timing")
	setServerTiming(w, sofar)
	w.WriteHeader(http.StatusOK)
	g.started = true
	rc := http.NewResponseController(w)

	var emitted time.Duration
	send := func(data []byte) error {
		start := time.Now()
		defer func() { emitted += time.Since(start) }()
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return status.Errorf(codes.Canceled, "write event: %v", err)
		}
		if err := rc.Flush(); err != nil {
			return status.Errorf(codes.Canceled, "flush event: %v", err)
		}
		return nil
	}
	event := func(v any) error {
		start := time.Now()
		b, err := json.Marshal(v)
		emitted += time.Since(start)
		if err != nil {
			return status.Errorf(codes.Internal, "encode event: %v", err)
		}
		return send(b)
	}

	err := g.generate(ctx, func(i int, word string) error { return event(g.chunk(i, word, false)) })
	if err == nil {
		err = event(g.chunk(g.max, "", true))
	}
	if err == nil && g.req.StreamOptions != nil && g.req.StreamOptions.IncludeUsage {
		err = event(map[string]any{
			"id": g.id, "object": g.object(true), "created": g.created, "model": modelLLM,
			"choices": []any{}, "usage": g.usage(),
		})
	}
	if err == nil {
		err = send([]byte("[DONE]"))
	}
	return emitted, err
}

// writeOpenAIError answers in the OpenAI error shape.
func writeOpenAIError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := httpStatus(st.Code())
	typ, short := "invalid_request_error", ""
	switch st.Code() {
	case codes.NotFound:
		short = "model_not_found"
	case codes.InvalidArgument:
	default:
		typ = "server_error"
	}
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"message": st.Message(), "type": typ, "code": nullable(short),
	}})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

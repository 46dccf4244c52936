package modelserver

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestOpenAINonStreaming(t *testing.T) {
	ts := start(t, Options{})
	tests := []struct {
		name, path, body string
		object           string
	}{
		{"chat", "/v1/chat/completions", `{"model":"toy-llm","messages":[{"role":"user","content":"hello there"}],"max_tokens":5}`, "chat.completion"},
		{"completion", "/v1/completions", `{"model":"toy-llm","prompt":"one two three","max_tokens":4}`, "text_completion"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var texts []string
			for range 2 {
				resp, b := post(t, ts.url+tc.path, "application/json", []byte(tc.body), nil)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
				var out struct {
					Object  string `json:"object"`
					Choices []struct {
						Text    string `json:"text"`
						Message struct {
							Content string `json:"content"`
						} `json:"message"`
					} `json:"choices"`
					Usage struct {
						Prompt     int `json:"prompt_tokens"`
						Completion int `json:"completion_tokens"`
						Total      int `json:"total_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(b, &out); err != nil {
					t.Fatalf("%v in %s", err, b)
				}
				text := out.Choices[0].Text + out.Choices[0].Message.Content
				if out.Object != tc.object || out.Usage.Completion != len(strings.Fields(text)) ||
					out.Usage.Total != out.Usage.Prompt+out.Usage.Completion || out.Usage.Prompt == 0 {
					t.Errorf("response %s", b)
				}
				texts = append(texts, text)
				checkServerTiming(t, resp.Header.Get("Server-Timing"))
			}
			if texts[0] != texts[1] {
				t.Errorf("same prompt gave %q then %q", texts[0], texts[1])
			}
		})
	}

	resp, b := post(t, ts.url+"/v1/chat/completions", "application/json", []byte(`{"model":"gpt-9","messages":[]}`), nil)
	if resp.StatusCode != 404 || !strings.Contains(string(b), "model_not_found") {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
}

func TestOpenAIStreaming(t *testing.T) {
	ts := start(t, Options{})
	const tokens = 8
	body := `{"model":"toy-llm","messages":[{"role":"user","content":"stream please"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	// Headers can only hold the stages that ran before the first byte.
	if names, _, err := parseServerTiming(resp.Header.Get("Server-Timing")); err != nil || strings.Join(names, ",") != "queue,preprocess" {
		t.Errorf("header Server-Timing %q: %v", resp.Header.Get("Server-Timing"), err)
	}

	var arrivals []time.Time
	var content strings.Builder
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		arrivals = append(arrivals, time.Now())
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			content.WriteString(c.Delta.Content)
		}
		if chunk.Usage != nil && chunk.Usage.Completion != tokens {
			t.Errorf("usage completion_tokens %d, want %d", chunk.Usage.Completion, tokens)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Error("no data: [DONE]")
	}
	if n := len(strings.Fields(content.String())); n != tokens {
		t.Errorf("streamed %d words (%q), want %d", n, content.String(), tokens)
	}
	// tokens + finish + usage events; the token events must not arrive in
	// one burst: the server flushes each after a real gap.
	if len(arrivals) != tokens+2 {
		t.Fatalf("%d events, want %d", len(arrivals), tokens+2)
	}
	if spread := arrivals[tokens-1].Sub(arrivals[0]); spread < (tokens-1)*tokenGap/2 {
		t.Errorf("token events spread over %v, want ≥ %v", spread, (tokens-1)*tokenGap/2)
	}
	d := checkServerTiming(t, resp.Trailer.Get("Server-Timing"))
	if d["infer"] < (tokens-1)*tokenGap {
		t.Errorf("trailer infer %v, want ≥ %v", d["infer"], (tokens-1)*tokenGap)
	}
}

package diagnosis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Evidence is what an LLM is shown of a report: the model's name, figures,
// phase and stage names and cause names. It holds no other label value (no
// versions, no instance labels), no trace ids, no payload, no request body
// and none of the report's own sentences, which may quote label values.
type Evidence struct {
	Model    string          `json:"model"`
	From     time.Time       `json:"from"`
	To       time.Time       `json:"to"`
	Anomaly  bool            `json:"anomaly"`
	Baseline Span            `json:"baseline"`
	Breach   Span            `json:"breach"`
	Added    float64         `json:"added_seconds"`
	Moved    []Part          `json:"moved"`
	Causes   []EvidenceCause `json:"causes"`
}

// EvidenceCause is one cause as the LLM sees it.
type EvidenceCause struct {
	Name       string             `json:"name"`
	Score      float64            `json:"score"`
	Phase      string             `json:"phase,omitempty"`
	Figures    map[string]float64 `json:"figures"`
	PeriodS    float64            `json:"period_seconds,omitempty"`
	Exhaustion time.Time          `json:"projected_exhaustion,omitzero"`
}

// EvidenceOf strips a report to its evidence.
func EvidenceOf(r Report) Evidence {
	e := Evidence{Model: r.Model, From: r.From, To: r.To, Anomaly: r.Anomaly,
		Baseline: r.Baseline, Breach: r.Breach, Added: r.Added, Moved: r.Moved}
	for _, c := range r.Causes[:min(5, len(r.Causes))] {
		e.Causes = append(e.Causes, EvidenceCause{Name: c.Name, Score: c.Score, Phase: c.Phase,
			Figures: c.Evidence, PeriodS: c.Period.Seconds(), Exhaustion: c.Exhaustion})
	}
	return e
}

// systemPrompt fixes the model's role: it words the evidence, it does not
// find facts.
const systemPrompt = `You write the root-cause paragraph of an inference latency incident report for an SRE.
Use only the facts in the JSON evidence the user sends: causes are ranked by score (0..1), figures are in seconds, bytes or calls per second.
Name the top cause first with its numbers and the phase it shows in, then mention runners-up only if their score is close.
Do not invent facts, commands or numbers. At most five sentences, plain text.`

// Prompt is the chat messages sent for a report.
func Prompt(r Report) ([]ChatMessage, error) {
	b, err := json.Marshal(EvidenceOf(r))
	if err != nil {
		return nil, fmt.Errorf("diagnosis: prompt: %w", err)
	}
	return []ChatMessage{{Role: "system", Content: systemPrompt}, {Role: "user", Content: string(b)}}, nil
}

// ChatMessage is one OpenAI chat message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// LLM is an OpenAI-compatible chat completions endpoint.
type LLM struct {
	URL    string // base URL (…/v1) or the full …/chat/completions URL
	Model  string // the endpoint's model name; "" lets the server choose
	APIKey string // sent as a bearer token when set
	Client *http.Client
}

// Prose asks the endpoint to word the report's evidence; the facts stay the
// report's. Errors wrap the endpoint's answer; the report does not need it.
func (l LLM) Prose(ctx context.Context, r Report) (string, error) {
	msgs, err := Prompt(r)
	if err != nil {
		return "", err
	}
	url := strings.TrimRight(l.URL, "/")
	if !strings.HasSuffix(url, "/chat/completions") {
		url += "/chat/completions"
	}
	body, err := json.Marshal(map[string]any{"model": l.Model, "messages": msgs, "temperature": 0})
	if err != nil {
		return "", fmt.Errorf("diagnosis: llm: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("diagnosis: llm: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if l.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.APIKey)
	}
	c := l.Client
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("diagnosis: llm %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("diagnosis: llm %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("diagnosis: llm %s: %s: %.200s", url, resp.Status, b)
	}
	var out struct {
		Choices []struct {
			Message ChatMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("diagnosis: llm %s: answer: %w", url, err)
	}
	if len(out.Choices) == 0 || strings.TrimSpace(out.Choices[0].Message.Content) == "" {
		return "", errors.New("diagnosis: llm: empty answer")
	}
	return strings.TrimSpace(out.Choices[0].Message.Content), nil
}

package table

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

var base = time.Date(2026, 3, 1, 12, 0, 4, 0, time.UTC)

const ms1 = time.Millisecond

// call is a synthetic record that completes at base+at with the given
// total, a 0.1ms ingress, a 0.05ms egress and the rest split between
// upstream and transfer.
func call(model string, at, total time.Duration, stages ...record.Stage) *record.Call {
	return &record.Call{
		Start:        base.Add(at - total),
		RequestEnd:   100 * time.Microsecond,
		UpstreamSent: 100 * time.Microsecond,
		FirstByte:    total / 2,
		ResponseEnd:  total - 100*time.Microsecond,
		End:          total,
		Egress:       50 * time.Microsecond,
		Protocol:     record.ProtocolGRPC,
		Model:        model,
		Code:         "OK",
		Stages:       stages,
	}
}

func failed(c *record.Call) *record.Call { c.Code = "UNAVAILABLE"; return c }

func decodeFailed(c *record.Call) *record.Call {
	c.DecodeFail, c.Decode, c.DecodeRan = true, 200*time.Microsecond, true
	return c
}

func TestRender(t *testing.T) {
	infer := func(d time.Duration) record.Stage {
		return record.Stage{Name: "infer", Duration: d, Source: "server-timing"}
	}
	queue := func(d time.Duration) record.Stage {
		return record.Stage{Name: "queue", Duration: d, Source: "server-timing"}
	}
	tests := []struct {
		name  string
		calls []*record.Call
		now   time.Time
		want  string
	}{
		{
			name: "empty",
			now:  base.Add(1500 * ms1),
			want: "calls completed 12:00:04–12:00:05 (ms; phases and server stages are means)\nno calls\n",
		},
		{
			name: "one model",
			calls: []*record.Call{
				call("mnist-mlp", 100*ms1, 1*ms1, infer(500*time.Microsecond)),
				call("mnist-mlp", 200*ms1, 2*ms1, infer(700*time.Microsecond)),
				call("mnist-mlp", 300*ms1, 3*ms1),
				call("mnist-mlp", 999*ms1, 4*ms1),
				call("mnist-mlp", 1000*ms1, 50*ms1), // the next second
				call("mnist-mlp", -1*ms1, 50*ms1),   // the second before
			},
			now: base.Add(1200 * ms1),
			want: `calls completed 12:00:04–12:00:05 (ms; phases and server stages are means)
MODEL      QPS  ERR   P50   P99  INGRESS  DECODE  UPSTREAM  TRANSFER  EGRESS  INFER
mnist-mlp    4    0  2.00  4.00     0.10       -      1.15      1.15    0.05   0.60
`,
		},
		{
			name: "models sorted, errors, unknown",
			calls: []*record.Call{
				call("zeta", 10*ms1, 10*ms1, queue(ms1), infer(2*ms1)),
				failed(call("alpha", 20*ms1, 20*ms1)),
				decodeFailed(call("alpha", 30*ms1, 30*ms1)),
				call("", 40*ms1, 1*ms1),
			},
			now: base.Add(time.Second),
			want: `calls completed 12:00:04–12:00:05 (ms; phases and server stages are means)
MODEL    QPS  ERR    P50    P99  INGRESS  DECODE  UPSTREAM  TRANSFER  EGRESS  QUEUE  INFER
alpha      2    2  20.00  30.00     0.10    0.20     12.40     12.40    0.05      -      -
unknown    1    0   1.00   1.00     0.10       -      0.40      0.40    0.05      -      -
zeta       1    0  10.00  10.00     0.10       -      4.90      4.90    0.05   1.00   2.00
`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := New(nil)
			for _, c := range tc.calls {
				tb.Observe(c)
			}
			if got := tb.Render(tc.now); got != tc.want {
				t.Errorf("Render:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestRenderSections(t *testing.T) {
	tb := New(nil)
	tb.Observe(call("m", 0, ms1))
	tb.AddSection("triton statistics", func() []string { return []string{"mnist-mlp queue 0.01ms", "echo queue 0.02ms"} })
	tb.AddSection("run-queue delay", func() []string { return nil })
	got := tb.Render(base.Add(time.Second))
	want := `
triton statistics:
  mnist-mlp queue 0.01ms
  echo queue 0.02ms

run-queue delay:
`
	if !strings.HasSuffix(got, want) {
		t.Errorf("Render:\n%s\nwant it to end with:\n%s", got, want)
	}
}

func TestObserveBounded(t *testing.T) {
	tb := New(nil)
	const n = maxSamples + 500
	for i := range n {
		tb.Observe(call("m", time.Duration(i)*time.Nanosecond, ms1))
	}
	for i := range maxModels + 10 {
		tb.Observe(call(fmt.Sprintf("model-%03d", i), 0, ms1))
	}
	for i := range maxStages + 5 {
		tb.Observe(call("m", 0, ms1, record.Stage{Name: fmt.Sprintf("s%d", i), Duration: ms1}))
	}
	b := tb.models["m"][int(base.Unix()%keepSeconds)]
	if len(b.totals) != maxSamples || b.count != n+maxStages+5 {
		t.Errorf("kept %d samples of %d calls, want %d of %d", len(b.totals), b.count, maxSamples, n+maxStages+5)
	}
	if len(tb.models) > maxModels+1 || tb.models[otherModel] == nil {
		t.Errorf("%d model rows, want at most %d with %q", len(tb.models), maxModels+1, otherModel)
	}
	if len(tb.stages) != maxStages {
		t.Errorf("%d stage columns, want %d", len(tb.stages), maxStages)
	}
}

func TestObserveConcurrent(t *testing.T) {
	tb := New(nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				tb.Observe(call(fmt.Sprintf("m%d", g%2), time.Duration(i)*time.Microsecond, ms1))
				if i%100 == 0 {
					tb.Render(base.Add(time.Second))
				}
			}
		})
	}
	wg.Wait()
	got := tb.Render(base.Add(time.Second))
	for _, row := range []string{"m0     4000", "m1     4000"} {
		if !strings.Contains(got, row) {
			t.Errorf("Render lacks %q:\n%s", row, got)
		}
	}
}

// syncBuffer is a bytes.Buffer safe to read while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRun(t *testing.T) {
	var out syncBuffer
	tb := New(&out)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		tb.Run(ctx, 100*time.Millisecond, func() []string { return []string{"admin http://127.0.0.1:9901/"} })
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "admin http://") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	got := out.String()
	if strings.Count(got, "admin http://127.0.0.1:9901/\ncalls completed ") < 2 {
		t.Errorf("want at least two frames, header first:\n%s", got)
	}
	if strings.Contains(got, clearScreen) {
		t.Error("cleared the screen of a non-terminal")
	}
}

// TestRenderLLMColumns: generative calls (an SSE stream, a decoupled
// stream's requests) add TTFT and ITL percentiles; other models show "-".
func TestRenderLLMColumns(t *testing.T) {
	tb := New(nil)
	tb.Observe(call("mnist", 500*ms1, 2*ms1))
	sse := call("llm", 500*ms1, 100*ms1)
	sse.LLM = &record.LLM{Streamed: true, FirstToken: 10 * ms1, ContentEvents: 3}
	sse.LLM.Gaps.Add(2 * ms1)
	sse.LLM.Gaps.Add(4 * ms1)
	tb.Observe(sse)
	st := call("llm", 600*ms1, 100*ms1)
	r := record.StreamRequest{Arrived: ms1, FirstResponse: 31 * ms1, Responses: 2}
	r.Gaps.Add(6 * ms1)
	st.StreamRequests = []record.StreamRequest{r}
	tb.Observe(st)
	out := tb.Render(base.Add(time.Second))
	lines := strings.Split(out, "\n")
	var header, llm, mnist []string
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "MODEL":
			header = f
		case len(f) > 0 && f[0] == "llm":
			llm = f
		case len(f) > 0 && f[0] == "mnist":
			mnist = f
		}
	}
	n := len(header)
	if n < 4 || header[n-4] != "TTFT50" || header[n-1] != "ITL99" || len(llm) != n || len(mnist) != n {
		t.Fatalf("table:\n%s", out)
	}
	if got := llm[n-4:]; strings.Join(got, " ") != "10.00 30.00 4.00 6.00" {
		t.Errorf("llm TTFT50 TTFT99 ITL50 ITL99 = %v, want 10 30 4 6 ms\n%s", got, out)
	}
	if got := mnist[n-4:]; strings.Join(got, " ") != "- - - -" {
		t.Errorf("mnist LLM columns %v, want -", got)
	}
}

package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// ModelLLM is the demo server's toy generative model: over HTTP a
// streamed OpenAI chat completion (server-sent events, usage included),
// over gRPC a ModelStreamInfer request answered token by token. A call
// lasts until the last token arrived.
const ModelLLM = "toy-llm"

// llmMaxTokens is the length of each generation the load asks for.
const llmMaxTokens = 24

type llmHTTPCaller struct {
	client *http.Client
	url    string
	seq    atomic.Int64 // varies the prompt
}

func newLLMHTTPCaller(t Target, maxInFlight int) *llmHTTPCaller {
	return &llmHTTPCaller{
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: maxInFlight, MaxIdleConnsPerHost: maxInFlight, DisableCompression: true}},
		url:    "http://" + t.Addr + "/v1/chat/completions",
	}
}

func (c *llmHTTPCaller) call(ctx context.Context) (string, error) {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":[{"role":"user","content":"prompt %d"}]}`,
		ModelLLM, llmMaxTokens, c.seq.Add(1)%97)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return codeHTTPError, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return codeHTTPCanceled, err
		}
		return codeHTTPError, err
	}
	defer resp.Body.Close()
	code := strconv.Itoa(resp.StatusCode)
	if resp.StatusCode/100 != 2 {
		return code, fmt.Errorf("POST %s: HTTP %s", c.url, code)
	}
	// Read event by event to the end marker, as a chat client does.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if bytes.Equal(bytes.TrimSpace(sc.Bytes()), []byte("data: [DONE]")) {
			_, _ = io.Copy(io.Discard, resp.Body)
			return code, nil
		}
	}
	if err := sc.Err(); err != nil {
		return code, fmt.Errorf("read events: %w", err)
	}
	return code, errors.New("event stream ended without [DONE]")
}

func (c *llmHTTPCaller) close() { c.client.CloseIdleConnections() }

type llmGRPCCaller struct {
	conn *grpc.ClientConn
	seq  atomic.Int64
}

func newLLMGRPCCaller(t Target) (*llmGRPCCaller, error) {
	conn, err := grpc.NewClient(t.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("grpc client: %w", err)
	}
	return &llmGRPCCaller{conn: conn}, nil
}

// call sends one request on a ModelStreamInfer stream and reads responses
// until the one flagged final.
func (c *llmGRPCCaller) call(ctx context.Context) (string, error) {
	n := c.seq.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := inference.NewGRPCInferenceServiceClient(c.conn).ModelStreamInfer(ctx)
	if err != nil {
		return codeName(status.Code(err)), err
	}
	prompt := "prompt " + strconv.FormatInt(n%97, 10)
	raw := binary.LittleEndian.AppendUint32(nil, uint32(len(prompt)))
	req := &inference.ModelInferRequest{ModelName: ModelLLM, Id: "load-" + strconv.FormatInt(n, 10),
		Parameters:       map[string]*inference.InferParameter{"max_tokens": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: llmMaxTokens}}},
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{append(raw, prompt...)}}
	if err := st.Send(req); err != nil {
		return codeName(status.Code(err)), err
	}
	for {
		res, err := st.Recv()
		if err != nil {
			return codeName(status.Code(err)), err
		}
		if msg := res.GetErrorMessage(); msg != "" {
			return "ERROR_MESSAGE", errors.New(msg)
		}
		if res.GetInferResponse().GetParameters()["triton_final_response"].GetBoolParam() {
			st.CloseSend()
			for {
				if _, err := st.Recv(); err != nil {
					if err == io.EOF {
						return "OK", nil
					}
					return codeName(status.Code(err)), err
				}
			}
		}
	}
}

func (c *llmGRPCCaller) close() { _ = c.conn.Close() }

package loadgen

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
)

const (
	imageSize    = 784 // the MLP's input: one 28×28 image
	smallPayload = 8   // echo bytes when Target.Payload is 0
)

// tensorData is a target's input: its raw little-endian bytes and, for JSON
// bodies, the same values as JSON numbers.
type tensorData struct {
	name, datatype string
	shape          []int64
	raw            []byte
	values         any // for JSON: []float32 or []uint8 as numbers
}

// input builds a target's input once, deterministically.
func input(t Target) tensorData {
	r := rand.New(rand.NewPCG(7, 11))
	if t.Model == ModelMLP {
		img := make([]float32, imageSize)
		raw := make([]byte, 0, imageSize*4)
		for i := range img {
			img[i] = r.Float32()
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(img[i]))
		}
		return tensorData{name: "input", datatype: "FP32", shape: []int64{1, imageSize}, raw: raw, values: img}
	}
	n := t.Payload
	if n == 0 {
		n = smallPayload
	}
	raw := make([]byte, n)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	// Go encodes []byte as base64, so JSON data goes out as a list of ints.
	nums := make([]uint16, n)
	for i, b := range raw {
		nums[i] = uint16(b)
	}
	return tensorData{name: "input", datatype: "UINT8", shape: []int64{1, int64(n)}, raw: raw, values: nums}
}

// grpcRequest is the ModelInferRequest for t, encoded once.
func grpcRequest(t Target) ([]byte, error) {
	in := input(t)
	b, err := proto.Marshal(&inference.ModelInferRequest{
		ModelName:        t.Model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: in.name, Datatype: in.datatype, Shape: in.shape}},
		RawInputContents: [][]byte{in.raw},
	})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}

// httpRequest is the KServe v2 body for t, encoded once, and the value of
// the binary extension's Inference-Header-Content-Length ("" for JSON).
func httpRequest(t Target) (body []byte, headerLen string, err error) {
	in := input(t)
	tensor := map[string]any{"name": in.name, "datatype": in.datatype, "shape": in.shape}
	req := map[string]any{"inputs": []any{tensor}}
	if t.JSON {
		tensor["data"] = in.values
		body, err = json.Marshal(req)
		if err != nil {
			return nil, "", fmt.Errorf("encode request: %w", err)
		}
		return body, "", nil
	}
	tensor["parameters"] = map[string]any{"binary_data_size": len(in.raw)}
	req["parameters"] = map[string]any{"binary_data_output": true}
	head, err := json.Marshal(req)
	if err != nil {
		return nil, "", fmt.Errorf("encode request header: %w", err)
	}
	body = append(append(make([]byte, 0, len(head)+len(in.raw)), head...), in.raw...)
	return body, strconv.Itoa(len(head)), nil
}

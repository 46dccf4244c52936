package inferapi

import "google.golang.org/protobuf/encoding/protowire"

// Fields of ModelStreamInfer's messages the proxy reads per message (field
// numbers of the KServe v2 / Triton grpc_service.proto).
const (
	fInferID         = 3 // ModelInferRequest.id, ModelInferResponse.id
	fInferParameters = 4 // ModelInferResponse.parameters (map<string, InferParameter>)
	fStreamError     = 1 // ModelStreamInferResponse.error_message
	fStreamResponse  = 2 // ModelStreamInferResponse.infer_response
	fMapKey          = 1
	fMapValue        = 2
	fBoolParam       = 1 // InferParameter.bool_param

	// FinalResponseParam is the response parameter a Triton decoupled model
	// sets on a request's last response (asked for with the request
	// parameter enable_empty_final_response).
	FinalResponseParam = "triton_final_response"
	// maxID bounds a kept request id: it goes into records and traces.
	maxID = 128
)

// StreamHead is what the front of one ModelStreamInfer message says.
type StreamHead struct {
	ID    string
	Error bool // a response carrying error_message
	Final bool // a response with triton_final_response true
}

// InferRequestHead reads the id from the front of a ModelInferRequest. A
// head cut short still yields what it holds.
func InferRequestHead(b []byte) StreamHead {
	var h StreamHead
	walkFields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if num == fInferID && typ == protowire.BytesType {
			h.ID = clipID(v)
			return false
		}
		return num < fInferID // fields come in number order: past 3 there is no id
	})
	return h
}

// StreamResponseHead reads the front of a ModelStreamInferResponse: an
// error message, or the wrapped response's id and final flag.
func StreamResponseHead(b []byte) StreamHead {
	var h StreamHead
	walkFields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == fStreamError && typ == protowire.BytesType:
			h.Error = len(v) > 0
		case num == fStreamResponse && typ == protowire.BytesType:
			inferResponseHead(v, &h)
		}
		return true
	})
	return h
}

func inferResponseHead(b []byte, h *StreamHead) {
	walkFields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if typ != protowire.BytesType {
			return true
		}
		switch num {
		case fInferID:
			h.ID = clipID(v)
		case fInferParameters:
			var key string
			var val []byte
			walkFields(v, func(n protowire.Number, t protowire.Type, x []byte) bool {
				if t == protowire.BytesType && n == fMapKey {
					key = string(x)
				} else if t == protowire.BytesType && n == fMapValue {
					val = x
				}
				return true
			})
			if key == FinalResponseParam {
				walkFields(val, func(n protowire.Number, t protowire.Type, x []byte) bool {
					if n == fBoolParam && t == protowire.VarintType {
						v, _ := protowire.ConsumeVarint(x)
						h.Final = v != 0
					}
					return true
				})
			}
		default:
			return num < fInferParameters // outputs and data follow
		}
		return true
	})
}

// walkFields calls fn with each field of b (a varint field's value as its
// encoded bytes, a length-delimited one's contents; a length-delimited
// field cut by the end of b is given what is there) until fn returns false
// or b ends or breaks.
func walkFields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) bool) {
	walkCut(b, func(num protowire.Number, typ protowire.Type, v []byte, _ bool) bool { return fn(num, typ, v) })
}

// walkCut is walkFields telling fn whether the field is cut by the end of b.
func walkCut(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, cut bool) bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.VarintType:
			_, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return
			}
			v, b = b[:m], b[m:]
		case protowire.BytesType:
			l, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return
			}
			b = b[m:]
			if l > uint64(len(b)) {
				fn(num, typ, b, true) // cut: what the head holds
				return
			}
			v, b = b[:l], b[l:]
		case protowire.Fixed32Type, protowire.Fixed64Type:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return
			}
			v, b = b[:m], b[m:]
		default:
			return // groups: KServe never sends them
		}
		if !fn(num, typ, v, false) {
			return
		}
	}
}

func clipID(v []byte) string {
	if len(v) > maxID {
		v = v[:maxID]
	}
	return string(v)
}

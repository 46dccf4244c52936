package inferapi

import "google.golang.org/protobuf/encoding/protowire"

// Fields of TorchServe's StreamPredictions and StreamPredictions2 messages
// the proxy reads per message (TorchServe's inference.proto).
const (
	fTSRequestSeqID  = 4 // PredictionsRequest.sequenceId
	fTSResponseSeqID = 2 // PredictionResponse.sequenceId
	fTSStatus        = 3 // PredictionResponse.status, a google.rpc.Status
	fStatusCode      = 1 // google.rpc.Status.code
)

// PredictionsRequestHead reads the sequenceId of a TorchServe
// PredictionsRequest from its head. The id follows the input map, so the
// proxy's scanners hand over the fields read (GRPCScanner.HeadFields), not
// the message's first bytes; from bytes cut before the id there is none,
// and an id cut is not read either: a prefix would match no response.
func PredictionsRequestHead(b []byte) StreamHead {
	var h StreamHead
	walkCut(b, func(num protowire.Number, typ protowire.Type, v []byte, cut bool) bool {
		if num == fTSRequestSeqID && typ == protowire.BytesType && !cut {
			h.ID = clipID(v)
			return false
		}
		return true
	})
	return h
}

// PredictionResponseHead reads the head of a TorchServe PredictionResponse:
// its sequenceId (when the head holds it whole, as for requests), and
// whether its status carries a code other than OK (0), which is how
// StreamPredictions2 answers a request that failed. TorchServe has no final
// flag: Final stays false.
func PredictionResponseHead(b []byte) StreamHead {
	var h StreamHead
	walkCut(b, func(num protowire.Number, typ protowire.Type, v []byte, cut bool) bool {
		if typ != protowire.BytesType {
			return true
		}
		switch {
		case num == fTSResponseSeqID && !cut:
			h.ID = clipID(v)
		case num == fTSStatus:
			// The code leads the status: a status cut after it still says it.
			walkFields(v, func(n protowire.Number, t protowire.Type, x []byte) bool {
				if n == fStatusCode && t == protowire.VarintType {
					c, _ := protowire.ConsumeVarint(x)
					h.Error = c != 0 // a later code field wins, as in a parse
				}
				return true
			})
		}
		return true
	})
	return h
}

package inferapi

// MessageKind says which KServe v2 message a gRPC stream carries, so that the
// scanner knows which fields hold the model and the tensors.
type MessageKind uint8

// Message kinds.
const (
	KindOther               MessageKind = iota // not scanned: only framed and counted
	KindInferRequest                           // ModelInferRequest
	KindInferResponse                          // ModelInferResponse
	KindStreamInferResponse                    // ModelStreamInferResponse wrapping a ModelInferResponse
	KindModelRequest                           // ModelReadyRequest, ModelMetadataRequest, ModelStatisticsRequest: name = 1, version = 2
	KindRepositoryRequest                      // RepositoryModelLoadRequest, RepositoryModelUnloadRequest: model_name = 2
	KindModelReadyResponse                     // ModelReadyResponse: ready = 1
)

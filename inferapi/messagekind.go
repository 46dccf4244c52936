package inferapi

// MessageKind says which message a gRPC stream carries (KServe v2,
// TensorFlow Serving or TorchServe), so that the scanner knows which fields
// hold the model and the tensors.
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

	// TensorFlow Serving. ModelSpec: name = 1, version = 2 (Int64Value),
	// version_label = 4. TensorProto: dtype = 1, tensor_shape = 2 (dim = 2,
	// size = 1), typed contents 4-17.
	KindTFRequest         // Classify/Regress/GetModelMetadata/GetModelStatus request: model_spec = 1
	KindTFResponse        // Classification/RegressionResponse: model_spec = 2
	KindTFPredictRequest  // PredictRequest: model_spec = 1, inputs = 2 (map<string, TensorProto>)
	KindTFPredictResponse // PredictResponse: outputs = 1 (map<string, TensorProto>), model_spec = 2
	KindTFMultiRequest    // MultiInferenceRequest: tasks = 1, the first one's model_spec = 1
	KindTFStatusResponse  // GetModelStatusResponse: model_version_status = 1, each with state = 2

	// KindTSRequest is TorchServe's PredictionsRequest (model_name = 1,
	// model_version = 2, input = 3: map<string, bytes>); its management
	// requests but RegisterModel share the first two fields.
	KindTSRequest

	kindCount // the number of kinds, for tests
)

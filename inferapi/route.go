package inferapi

import (
	"net/url"
	"strings"

	"github.com/inferwatch/inferwatch/record"
)

// Method values for Route.Method.
const (
	MethodInfer           = "infer"
	MethodStreamInfer     = "stream_infer"
	MethodModelMetadata   = "model_metadata"
	MethodModelReady      = "model_ready"
	MethodServerLive      = "server_live"
	MethodServerReady     = "server_ready"
	MethodServerMetadata  = "server_metadata"
	MethodStatistics      = "statistics"
	MethodPredict         = "predict"
	MethodExplain         = "explain"
	MethodClassify        = "classify"
	MethodRegress         = "regress"
	MethodCompletions     = "completions"
	MethodChatCompletions = "chat_completions"
	MethodEmbeddings      = "embeddings"
	MethodResponses       = "responses" // OpenAI's Responses API (/v1/responses)
	// Triton's generate extension: POST /v2/models/{m}[/versions/{v}]/generate
	// answers once, /generate_stream with server-sent events.
	MethodGenerate       = "generate"
	MethodGenerateStream = "generate_stream"
	MethodHealth         = "health"
	// TensorFlow Serving's MultiInference (several heads of one model, gRPC).
	MethodMultiInference = "multi_inference"
	// TorchServe's gRPC StreamPredictions and StreamPredictions2: streamed
	// answers to one request, or a stream of requests and answers.
	MethodStreamPredict = "stream_predict"
	// Triton's model repository extension (record.Call.Control).
	MethodRepositoryIndex  = record.MethodRepositoryIndex
	MethodRepositoryLoad   = record.MethodRepositoryLoad
	MethodRepositoryUnload = record.MethodRepositoryUnload
	MethodUnknown          = "unknown"
)

// Route is what the request line alone tells about a call.
type Route struct {
	API     string // record.API* constant
	Method  string // Method* constant
	Model   string // from the path (or later the body); "" when unknown
	Version string // version, or TF Serving version label; "" when unknown
	Infer   bool   // carries an inference payload worth decoding
	// Message and Reply say, for gRPC, what the request and the response
	// messages are, so each direction's GRPCScanner can be Reset with them.
	Message MessageKind
	Reply   MessageKind
}

var unknownRoute = Route{API: record.APIUnknown, Method: MethodUnknown}

// Generative says the route runs a text generation whose event stream is
// timed token by token (EventTimer): an OpenAI-compatible route other than
// embeddings (which generate nothing), or Triton's generate extension.
func (r Route) Generative() bool {
	return r.API == record.APIOpenAI && r.Method != MethodEmbeddings || r.Method == MethodGenerate || r.Method == MethodGenerateStream
}

// ReadsBody says an HTTP call's bodies go to the decoders (a front
// captures them): inference calls, and the REST model status calls whose
// answer says readiness in its body — KServe v1's and TF Serving's GET
// /v1/models/{m}; TF Serving answers it 200 while a version still loads.
func (r Route) ReadsBody() bool {
	return r.Infer || r.Method == MethodModelReady && (r.API == record.APIKServeV1 || r.API == record.APITFServing)
}

// The gRPC services GRPCRoute recognises.
const (
	// grpcService is the KServe v2 (Open Inference Protocol) service, which
	// Triton shares.
	grpcService         = "inference.GRPCInferenceService"
	tfPredictionService = "tensorflow.serving.PredictionService"
	tfModelService      = "tensorflow.serving.ModelService"
	tsInferenceService  = "org.pytorch.serve.grpc.inference.InferenceAPIsService"
	tsManagementService = "org.pytorch.serve.grpc.management.ManagementAPIsService"
)

// GRPCRoute recognises a gRPC full method name such as
// "/inference.GRPCInferenceService/ModelInfer": the KServe v2 service with
// Triton's repository extension, TensorFlow Serving's PredictionService and
// ModelService, and TorchServe's inference and management services. The
// model is in the request body (Route.Message says where). Other methods of
// a recognised service (Triton's trace and logging extensions, TorchServe's
// ListModels) have method "unknown"; any other service is unknown.
func GRPCRoute(fullMethod string) Route {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return unknownRoute
	}
	switch service {
	case grpcService:
		return kserveGRPCRoute(method)
	case tfPredictionService, tfModelService:
		return tfGRPCRoute(service, method)
	case tsInferenceService, tsManagementService:
		return torchServeGRPCRoute(service, method)
	}
	return unknownRoute
}

// kserveGRPCRoute reads a method of the KServe v2 service.
func kserveGRPCRoute(method string) Route {
	r := Route{API: record.APIKServeV2, Method: MethodUnknown}
	switch method {
	case "ModelInfer":
		r.Method, r.Infer = MethodInfer, true
		r.Message, r.Reply = KindInferRequest, KindInferResponse
	case "ModelStreamInfer":
		r.Method, r.Infer = MethodStreamInfer, true
		r.Message, r.Reply = KindInferRequest, KindStreamInferResponse
	case "ModelMetadata":
		r.Method, r.Message = MethodModelMetadata, KindModelRequest
	case "ModelReady":
		r.Method, r.Message, r.Reply = MethodModelReady, KindModelRequest, KindModelReadyResponse
	case "ServerLive":
		r.Method = MethodServerLive
	case "ServerReady":
		r.Method = MethodServerReady
	case "ServerMetadata":
		r.Method = MethodServerMetadata
	case "ModelStatistics":
		r.Method, r.Message = MethodStatistics, KindModelRequest
	case "RepositoryIndex":
		r.Method = MethodRepositoryIndex
	case "RepositoryModelLoad":
		r.Method, r.Message = MethodRepositoryLoad, KindRepositoryRequest
	case "RepositoryModelUnload":
		r.Method, r.Message = MethodRepositoryUnload, KindRepositoryRequest
	}
	return r
}

// tfGRPCRoute reads a method of TensorFlow Serving's PredictionService or
// ModelService. GetModelStatus is the gRPC form of REST's GET
// /v1/models/{m}, recorded as that is: model_ready.
func tfGRPCRoute(service, method string) Route {
	r := Route{API: record.APITFServing, Method: MethodUnknown}
	switch service + "/" + method {
	case tfPredictionService + "/Predict":
		r.Method, r.Infer = MethodPredict, true
		r.Message, r.Reply = KindTFPredictRequest, KindTFPredictResponse
	case tfPredictionService + "/Classify":
		r.Method, r.Infer, r.Message, r.Reply = MethodClassify, true, KindTFRequest, KindTFResponse
	case tfPredictionService + "/Regress":
		r.Method, r.Infer, r.Message, r.Reply = MethodRegress, true, KindTFRequest, KindTFResponse
	case tfPredictionService + "/MultiInference":
		r.Method, r.Infer, r.Message = MethodMultiInference, true, KindTFMultiRequest
	case tfPredictionService + "/GetModelMetadata":
		r.Method, r.Message = MethodModelMetadata, KindTFRequest
	case tfModelService + "/GetModelStatus":
		r.Method, r.Message, r.Reply = MethodModelReady, KindTFRequest, KindTFStatusResponse
	}
	return r
}

// torchServeGRPCRoute reads a method of TorchServe's inference or
// management service.
func torchServeGRPCRoute(service, method string) Route {
	r := Route{API: record.APITorchServe, Method: MethodUnknown}
	switch service + "/" + method {
	case tsInferenceService + "/Predictions":
		r.Method, r.Infer, r.Message = MethodPredict, true, KindTSRequest
	case tsInferenceService + "/StreamPredictions", tsInferenceService + "/StreamPredictions2":
		r.Method, r.Infer, r.Message = MethodStreamPredict, true, KindTSRequest
	case tsInferenceService + "/Ping":
		r.Method = MethodHealth
	case tsManagementService + "/DescribeModel":
		r.Method, r.Message = MethodModelMetadata, KindTSRequest
	case tsManagementService + "/UnregisterModel":
		r.Method, r.Message = MethodRepositoryUnload, KindTSRequest
	case tsManagementService + "/ScaleWorker", tsManagementService + "/SetDefault":
		r.Message = KindTSRequest // model_name = 1, model_version = 2 too
	}
	return r
}

// Streaming says the method streams by definition (not merely when a call
// carries several messages): KServe's ModelStreamInfer and TorchServe's
// StreamPredictions.
func (r Route) Streaming() bool {
	return r.Method == MethodStreamInfer || r.Method == MethodStreamPredict
}

// HTTPRoute recognises an HTTP request from its method and path. The path may
// be escaped (a query is ignored); segments are unescaped after splitting so an
// escaped slash or colon stays part of a model name. hint settles the one
// ambiguous form, POST /v1/models/{m}:predict (and GET /v1/models/{m}), shared
// by KServe v1 and TF Serving: record.APITFServing picks TF Serving, anything
// else KServe v1.
func HTTPRoute(method, path, hint string) Route {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimSuffix(path, "/")
	if !strings.HasPrefix(path, "/") {
		return unknownRoute
	}
	segs := strings.Split(path[1:], "/")
	switch segs[0] {
	case "v2":
		return kserveV2Route(method, segs[1:])
	case "v1":
		if len(segs) >= 2 && segs[1] == "models" {
			return v1ModelsRoute(method, segs[2:], hint)
		}
		return openAIRoute(segs[1:])
	case "openai":
		// KServe's Hugging Face (vLLM) runtime serves the OpenAI API
		// under /openai by default (KSERVE_OPENAI_ROUTE_PREFIX), apart
		// from its v1 protocol's /v1/models.
		if len(segs) >= 2 && segs[1] == "v1" {
			return openAIRoute(segs[2:])
		}
	case "predictions", "explanations":
		return torchServeRoute(segs)
	case "ping":
		if len(segs) == 1 {
			return Route{API: record.APITorchServe, Method: MethodHealth}
		}
	}
	return unknownRoute
}

// kserveV2Route reads the segments after /v2.
func kserveV2Route(method string, segs []string) Route {
	r := Route{API: record.APIKServeV2, Method: MethodUnknown}
	switch {
	case len(segs) == 0:
		r.Method = MethodServerMetadata
		return r
	case segs[0] == "health":
		if len(segs) == 2 && segs[1] == "live" {
			r.Method = MethodServerLive
			return r
		}
		if len(segs) == 2 && segs[1] == "ready" {
			r.Method = MethodServerReady
			return r
		}
		return unknownRoute
	case segs[0] == "repository":
		return repositoryRoute(method, segs[1:])
	case segs[0] != "models" || len(segs) < 2:
		return unknownRoute
	}
	segs = segs[1:]
	if len(segs) == 1 && segs[0] == "stats" {
		r.Method = MethodStatistics
		return r
	}
	r.Model = unescape(segs[0])
	segs = segs[1:]
	if len(segs) >= 2 && segs[0] == "versions" {
		r.Version = unescape(segs[1])
		segs = segs[2:]
	}
	switch {
	case len(segs) == 0:
		if isRead(method) {
			r.Method = MethodModelMetadata
		}
	case len(segs) > 1:
		return unknownRoute
	case segs[0] == "infer":
		r.Method, r.Infer = MethodInfer, true
	case segs[0] == "generate" && !isRead(method):
		r.Method, r.Infer = MethodGenerate, true
	case segs[0] == "generate_stream" && !isRead(method):
		r.Method, r.Infer = MethodGenerateStream, true
	case segs[0] == "ready":
		r.Method = MethodModelReady
	case segs[0] == "stats":
		r.Method = MethodStatistics
	default:
		return unknownRoute
	}
	return r
}

// repositoryRoute reads the segments after /v2/repository: Triton's model
// repository extension, POST /v2/repository/index and POST
// /v2/repository/models/{m}/load|unload.
func repositoryRoute(method string, segs []string) Route {
	if method != "POST" {
		return unknownRoute
	}
	r := Route{API: record.APIKServeV2}
	switch {
	case len(segs) == 1 && segs[0] == "index":
		r.Method = MethodRepositoryIndex
	case len(segs) == 3 && segs[0] == "models" && segs[1] != "" && segs[2] == "load":
		r.Method, r.Model = MethodRepositoryLoad, unescape(segs[1])
	case len(segs) == 3 && segs[0] == "models" && segs[1] != "" && segs[2] == "unload":
		r.Method, r.Model = MethodRepositoryUnload, unescape(segs[1])
	default:
		return unknownRoute
	}
	return r
}

// v1ModelsRoute reads the segments after /v1/models, shared by KServe v1 and
// TF Serving.
func v1ModelsRoute(method string, segs []string, hint string) Route {
	if len(segs) == 0 || segs[0] == "" {
		return unknownRoute
	}
	// The verb hangs off the last segment after its last (unescaped) colon.
	last := segs[len(segs)-1]
	verb := ""
	if i := strings.LastIndexByte(last, ':'); i >= 0 {
		segs[len(segs)-1], verb = last[:i], last[i+1:]
	}
	r := Route{Model: unescape(segs[0])}
	tfOnly := false // a form only TF Serving has
	segs = segs[1:]
	if len(segs) >= 2 && (segs[0] == "versions" || segs[0] == "labels") {
		r.Version = unescape(segs[1])
		segs = segs[2:]
		tfOnly = true
	}
	switch {
	case verb == "":
		if !isRead(method) {
			return unknownRoute
		}
		switch {
		case len(segs) == 0:
			r.Method = MethodModelReady // model status
		case len(segs) == 1 && segs[0] == "metadata":
			r.Method, tfOnly = MethodModelMetadata, true
		default:
			return unknownRoute
		}
	case len(segs) != 0:
		return unknownRoute
	case verb == "predict":
		r.Method, r.Infer = MethodPredict, true
	case verb == "explain" && !tfOnly:
		r.Method, r.Infer = MethodExplain, true
		r.API = record.APIKServeV1
		return r
	case verb == "classify":
		r.Method, r.Infer, tfOnly = MethodClassify, true, true
	case verb == "regress":
		r.Method, r.Infer, tfOnly = MethodRegress, true, true
	default:
		return unknownRoute
	}
	if tfOnly || hint == record.APITFServing {
		r.API = record.APITFServing
	} else {
		r.API = record.APIKServeV1
	}
	return r
}

// openAIRoute reads the segments after /v1 that are not /v1/models.
func openAIRoute(segs []string) Route {
	r := Route{API: record.APIOpenAI, Infer: true}
	switch strings.Join(segs, "/") {
	case "completions":
		r.Method = MethodCompletions
	case "chat/completions":
		r.Method = MethodChatCompletions
	case "embeddings":
		r.Method = MethodEmbeddings
	case "responses":
		r.Method = MethodResponses
	default:
		return unknownRoute
	}
	return r
}

// torchServeRoute reads /predictions/{m}[/{v}] and /explanations/{m}[/{v}],
// and /predictions/{m}/{v}/v1/..., where TorchServe's vLLM handler (its
// LLM launcher's) serves the OpenAI API: a generation, timed as one.
func torchServeRoute(segs []string) Route {
	if len(segs) > 4 && segs[0] == "predictions" && segs[1] != "" && segs[3] == "v1" {
		r := openAIRoute(segs[4:])
		if r.API == record.APIOpenAI {
			r.Model, r.Version = unescape(segs[1]), unescape(segs[2])
		}
		return r
	}
	if len(segs) < 2 || len(segs) > 3 || segs[1] == "" {
		return unknownRoute
	}
	r := Route{API: record.APITorchServe, Method: MethodPredict, Infer: true, Model: unescape(segs[1])}
	if segs[0] == "explanations" {
		r.Method = MethodExplain
	}
	if len(segs) == 3 {
		r.Version = unescape(segs[2])
	}
	return r
}

// isRead reports whether an HTTP method only reads (metadata, status).
func isRead(method string) bool {
	return method == "GET" || method == "HEAD" || method == ""
}

// unescape decodes one path segment, keeping it as sent when it is not
// valid escaping: a route is never rejected. What it returns is a model or
// version name, kept as Label keeps one read from a message: a path may carry
// a megabyte, or bytes that are not UTF-8 ("%ff"), and the name becomes a
// span attribute, a sampling key and a metric label's raw value. A cut name
// is copied so that it does not hold the whole path in memory.
func unescape(seg string) string {
	if strings.IndexByte(seg, '%') >= 0 {
		if s, err := url.PathUnescape(seg); err == nil {
			seg = s
		}
	}
	if l := Label(seg); l != seg {
		return strings.Clone(l)
	}
	return seg
}

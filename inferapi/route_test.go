package inferapi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inferwatch/inferwatch/record"
)

func TestGRPCRoute(t *testing.T) {
	tests := []struct {
		in   string
		want Route
	}{
		{"/inference.GRPCInferenceService/ModelInfer", Route{API: record.APIKServeV2, Method: MethodInfer, Infer: true, Message: KindInferRequest, Reply: KindInferResponse}},
		{"/inference.GRPCInferenceService/ModelStreamInfer", Route{API: record.APIKServeV2, Method: MethodStreamInfer, Infer: true, Message: KindInferRequest, Reply: KindStreamInferResponse}},
		{"/inference.GRPCInferenceService/ModelMetadata", Route{API: record.APIKServeV2, Method: MethodModelMetadata, Message: KindModelRequest}},
		{"/inference.GRPCInferenceService/ModelReady", Route{API: record.APIKServeV2, Method: MethodModelReady, Message: KindModelRequest, Reply: KindModelReadyResponse}},
		{"/inference.GRPCInferenceService/ServerLive", Route{API: record.APIKServeV2, Method: MethodServerLive}},
		{"/inference.GRPCInferenceService/ServerReady", Route{API: record.APIKServeV2, Method: MethodServerReady}},
		{"/inference.GRPCInferenceService/ServerMetadata", Route{API: record.APIKServeV2, Method: MethodServerMetadata}},
		{"/inference.GRPCInferenceService/ModelStatistics", Route{API: record.APIKServeV2, Method: MethodStatistics, Message: KindModelRequest}},
		{"inference.GRPCInferenceService/ModelInfer", Route{API: record.APIKServeV2, Method: MethodInfer, Infer: true, Message: KindInferRequest, Reply: KindInferResponse}},
		{"/inference.GRPCInferenceService/RepositoryIndex", Route{API: record.APIKServeV2, Method: MethodRepositoryIndex}},
		{"/inference.GRPCInferenceService/RepositoryModelLoad", Route{API: record.APIKServeV2, Method: MethodRepositoryLoad, Message: KindRepositoryRequest}},
		{"/inference.GRPCInferenceService/RepositoryModelUnload", Route{API: record.APIKServeV2, Method: MethodRepositoryUnload, Message: KindRepositoryRequest}},
		{"/inference.GRPCInferenceService/LogSettings", Route{API: record.APIKServeV2, Method: MethodUnknown}},
		// TensorFlow Serving.
		{"/tensorflow.serving.PredictionService/Predict", Route{API: record.APITFServing, Method: MethodPredict, Infer: true, Message: KindTFPredictRequest, Reply: KindTFPredictResponse}},
		{"/tensorflow.serving.PredictionService/Classify", Route{API: record.APITFServing, Method: MethodClassify, Infer: true, Message: KindTFRequest, Reply: KindTFResponse}},
		{"/tensorflow.serving.PredictionService/Regress", Route{API: record.APITFServing, Method: MethodRegress, Infer: true, Message: KindTFRequest, Reply: KindTFResponse}},
		{"/tensorflow.serving.PredictionService/MultiInference", Route{API: record.APITFServing, Method: MethodMultiInference, Infer: true, Message: KindTFMultiRequest}},
		{"/tensorflow.serving.PredictionService/GetModelMetadata", Route{API: record.APITFServing, Method: MethodModelMetadata, Message: KindTFRequest}},
		{"/tensorflow.serving.ModelService/GetModelStatus", Route{API: record.APITFServing, Method: MethodModelReady, Message: KindTFRequest, Reply: KindTFStatusResponse}},
		{"/tensorflow.serving.ModelService/HandleReloadConfigRequest", Route{API: record.APITFServing, Method: MethodUnknown}},
		{"/tensorflow.serving.ModelService/Predict", Route{API: record.APITFServing, Method: MethodUnknown}},
		{"/tensorflow.serving.SessionService/SessionRun", unknownRoute},
		// TorchServe.
		{"/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions", Route{API: record.APITorchServe, Method: MethodPredict, Infer: true, Message: KindTSRequest}},
		{"/org.pytorch.serve.grpc.inference.InferenceAPIsService/StreamPredictions", Route{API: record.APITorchServe, Method: MethodStreamPredict, Infer: true, Message: KindTSRequest}},
		{"/org.pytorch.serve.grpc.inference.InferenceAPIsService/StreamPredictions2", Route{API: record.APITorchServe, Method: MethodStreamPredict, Infer: true, Message: KindTSRequest}},
		{"/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping", Route{API: record.APITorchServe, Method: MethodHealth}},
		{"/org.pytorch.serve.grpc.management.ManagementAPIsService/DescribeModel", Route{API: record.APITorchServe, Method: MethodModelMetadata, Message: KindTSRequest}},
		{"/org.pytorch.serve.grpc.management.ManagementAPIsService/UnregisterModel", Route{API: record.APITorchServe, Method: MethodRepositoryUnload, Message: KindTSRequest}},
		{"/org.pytorch.serve.grpc.management.ManagementAPIsService/ScaleWorker", Route{API: record.APITorchServe, Method: MethodUnknown, Message: KindTSRequest}},
		{"/org.pytorch.serve.grpc.management.ManagementAPIsService/RegisterModel", Route{API: record.APITorchServe, Method: MethodUnknown}},
		{"/org.pytorch.serve.grpc.management.ManagementAPIsService/ListModels", Route{API: record.APITorchServe, Method: MethodUnknown}},
		{"/org.pytorch.serve.grpc.inference.ManagementAPIsService/DescribeModel", unknownRoute},
		{"/grpc.health.v1.Health/Check", unknownRoute},
		{"", unknownRoute},
		{"/", unknownRoute},
		{"/inference.GRPCInferenceService", unknownRoute},
	}
	for _, tt := range tests {
		if got := GRPCRoute(tt.in); got != tt.want {
			t.Errorf("GRPCRoute(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestHTTPRoute(t *testing.T) {
	v2 := func(method, model, version string, infer bool) Route {
		return Route{API: record.APIKServeV2, Method: method, Model: model, Version: version, Infer: infer}
	}
	kv1 := func(method, model string) Route {
		return Route{API: record.APIKServeV1, Method: method, Model: model, Infer: method == MethodPredict || method == MethodExplain}
	}
	tf := func(method, model, version string) Route {
		infer := method == MethodPredict || method == MethodClassify || method == MethodRegress
		return Route{API: record.APITFServing, Method: method, Model: model, Version: version, Infer: infer}
	}
	tests := []struct {
		method, path, hint string
		want               Route
	}{
		// KServe v2 REST.
		{"POST", "/v2/models/resnet/infer", "", v2(MethodInfer, "resnet", "", true)},
		{"POST", "/v2/models/resnet/versions/3/infer", "", v2(MethodInfer, "resnet", "3", true)},
		{"POST", "/v2/models/my%20model/versions/v%2F1/infer?x=1", "", v2(MethodInfer, "my model", "v/1", true)},
		{"GET", "/v2/models/resnet", "", v2(MethodModelMetadata, "resnet", "", false)},
		{"GET", "/v2/models/resnet/versions/2", "", v2(MethodModelMetadata, "resnet", "2", false)},
		{"POST", "/v2/models/resnet", "", v2(MethodUnknown, "resnet", "", false)},
		{"GET", "/v2/models/resnet/ready", "", v2(MethodModelReady, "resnet", "", false)},
		{"GET", "/v2/models/resnet/versions/1/ready", "", v2(MethodModelReady, "resnet", "1", false)},
		{"GET", "/v2/models/resnet/stats", "", v2(MethodStatistics, "resnet", "", false)},
		{"GET", "/v2/models/resnet/versions/1/stats", "", v2(MethodStatistics, "resnet", "1", false)},
		{"GET", "/v2/models/stats", "", v2(MethodStatistics, "", "", false)},
		{"GET", "/v2/health/live", "", v2(MethodServerLive, "", "", false)},
		{"GET", "/v2/health/ready", "", v2(MethodServerReady, "", "", false)},
		{"GET", "/v2", "", v2(MethodServerMetadata, "", "", false)},
		{"GET", "/v2/", "", v2(MethodServerMetadata, "", "", false)},
		{"GET", "/v2/health/other", "", unknownRoute},
		{"POST", "/v2/models/llama/generate", "", Route{API: record.APIKServeV2, Method: MethodGenerate, Model: "llama", Infer: true}},
		{"POST", "/v2/models/llama/versions/1/generate_stream", "", Route{API: record.APIKServeV2, Method: MethodGenerateStream, Model: "llama", Version: "1", Infer: true}},
		{"GET", "/v2/models/llama/generate", "", unknownRoute},
		{"POST", "/v2/models/resnet/explain", "", unknownRoute},
		{"POST", "/v2/models/resnet/infer/extra", "", unknownRoute},
		{"GET", "/v2/repository/index", "", unknownRoute},
		{"POST", "/v2/repository/index", "", v2(MethodRepositoryIndex, "", "", false)},
		{"POST", "/v2/repository/models/resnet/load", "", v2(MethodRepositoryLoad, "resnet", "", false)},
		{"POST", "/v2/repository/models/my%20model/unload/", "", v2(MethodRepositoryUnload, "my model", "", false)},
		{"GET", "/v2/repository/models/resnet/load", "", unknownRoute},
		{"POST", "/v2/repository/models//load", "", unknownRoute},
		{"POST", "/v2/repository/models/resnet/reload", "", unknownRoute},
		{"POST", "/v2/repository/models/resnet", "", unknownRoute},
		{"GET", "/v2/models%ZZ/x", "", unknownRoute},
		{"POST", "/v2/models/bad%ZZ/infer", "", v2(MethodInfer, "bad%ZZ", "", true)},

		// KServe v1 and TF Serving.
		{"POST", "/v1/models/iris:predict", "", kv1(MethodPredict, "iris")},
		{"POST", "/v1/models/iris:predict", record.APIKServeV1, kv1(MethodPredict, "iris")},
		{"POST", "/v1/models/iris:predict", record.APITFServing, tf(MethodPredict, "iris", "")},
		{"POST", "/v1/models/iris:explain", record.APITFServing, kv1(MethodExplain, "iris")},
		{"POST", "/v1/models/iris:classify", "", tf(MethodClassify, "iris", "")},
		{"POST", "/v1/models/iris:regress", "", tf(MethodRegress, "iris", "")},
		{"POST", "/v1/models/iris/versions/7:predict", "", tf(MethodPredict, "iris", "7")},
		{"POST", "/v1/models/iris/labels/stable:predict", "", tf(MethodPredict, "iris", "stable")},
		{"POST", "/v1/models/iris/versions/7:explain", "", unknownRoute},
		{"POST", "/v1/models/a%3Ab:predict", "", kv1(MethodPredict, "a:b")},
		{"POST", "/v1/models/iris:frobnicate", "", unknownRoute},
		{"GET", "/v1/models/iris", "", kv1(MethodModelReady, "iris")},
		{"GET", "/v1/models/iris", record.APITFServing, tf(MethodModelReady, "iris", "")},
		{"GET", "/v1/models/iris/versions/3", "", tf(MethodModelReady, "iris", "3")},
		{"GET", "/v1/models/iris/metadata", "", tf(MethodModelMetadata, "iris", "")},
		{"GET", "/v1/models/iris/versions/3/metadata", "", tf(MethodModelMetadata, "iris", "3")},
		{"GET", "/v1/models/iris/labels/canary/metadata", "", tf(MethodModelMetadata, "iris", "canary")},
		{"POST", "/v1/models/iris", "", unknownRoute},
		{"GET", "/v1/models", "", unknownRoute},
		{"GET", "/v1/models/", "", unknownRoute},
		{"GET", "/v1/models/iris/other", "", unknownRoute},

		// TorchServe.
		{"POST", "/predictions/bert", "", Route{API: record.APITorchServe, Method: MethodPredict, Model: "bert", Infer: true}},
		{"POST", "/predictions/bert/2.0", "", Route{API: record.APITorchServe, Method: MethodPredict, Model: "bert", Version: "2.0", Infer: true}},
		{"POST", "/explanations/bert", "", Route{API: record.APITorchServe, Method: MethodExplain, Model: "bert", Infer: true}},
		{"GET", "/ping", "", Route{API: record.APITorchServe, Method: MethodHealth}},
		{"POST", "/predictions", "", unknownRoute},
		{"POST", "/predictions/a/b/c", "", unknownRoute},
		// TorchServe's vLLM handler serves the OpenAI API under a model's
		// version (examples/large_models/vllm, ts.llm_launcher).
		{"POST", "/predictions/model/1.0/v1/chat/completions", "", Route{API: record.APIOpenAI, Method: MethodChatCompletions, Model: "model", Version: "1.0", Infer: true}},
		{"POST", "/predictions/llama-8b-lora/1.0/v1/completions", "", Route{API: record.APIOpenAI, Method: MethodCompletions, Model: "llama-8b-lora", Version: "1.0", Infer: true}},
		{"GET", "/predictions/model/1.0/v1/models", "", unknownRoute},
		{"POST", "/predictions/model/1.0/v2/chat/completions", "", unknownRoute},
		{"POST", "/explanations/model/1.0/v1/completions", "", unknownRoute},

		// OpenAI-compatible.
		{"POST", "/v1/completions", "", Route{API: record.APIOpenAI, Method: MethodCompletions, Infer: true}},
		{"POST", "/v1/chat/completions", "", Route{API: record.APIOpenAI, Method: MethodChatCompletions, Infer: true}},
		{"POST", "/v1/embeddings", "", Route{API: record.APIOpenAI, Method: MethodEmbeddings, Infer: true}},
		{"POST", "/v1/responses", "", Route{API: record.APIOpenAI, Method: MethodResponses, Infer: true}},
		{"GET", "/v1/responses/resp_123", "", unknownRoute}, // a stored response read back, not a generation
		{"POST", "/v1/chat/completions/", "", Route{API: record.APIOpenAI, Method: MethodChatCompletions, Infer: true}},
		{"POST", "/v1/audio/speech", "", unknownRoute},
		// KServe's Hugging Face runtime serves them under /openai by default.
		{"POST", "/openai/v1/chat/completions", "", Route{API: record.APIOpenAI, Method: MethodChatCompletions, Infer: true}},
		{"POST", "/openai/v1/completions", "", Route{API: record.APIOpenAI, Method: MethodCompletions, Infer: true}},
		{"POST", "/openai/v1/embeddings", "", Route{API: record.APIOpenAI, Method: MethodEmbeddings, Infer: true}},
		{"GET", "/openai/v1/models", "", unknownRoute},
		{"POST", "/openai/v2/models/m/infer", "", unknownRoute},
		{"POST", "/openai", "", unknownRoute},

		// Unknown.
		{"GET", "/", "", unknownRoute},
		{"GET", "", "", unknownRoute},
		{"GET", "metrics", "", unknownRoute},
		{"GET", "/metrics", "", unknownRoute},
		{"GET", "//", "", unknownRoute},
	}
	for _, tt := range tests {
		if got := HTTPRoute(tt.method, tt.path, tt.hint); got != tt.want {
			t.Errorf("HTTPRoute(%q, %q, %q) = %+v, want %+v", tt.method, tt.path, tt.hint, got, tt.want)
		}
	}
}

func TestRouteStreaming(t *testing.T) {
	for path, want := range map[string]bool{
		"/inference.GRPCInferenceService/ModelStreamInfer":                          true,
		"/org.pytorch.serve.grpc.inference.InferenceAPIsService/StreamPredictions":  true,
		"/org.pytorch.serve.grpc.inference.InferenceAPIsService/StreamPredictions2": true,
		"/inference.GRPCInferenceService/ModelInfer":                                false,
		"/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions":        false,
		"/tensorflow.serving.PredictionService/Predict":                             false,
	} {
		if got := GRPCRoute(path).Streaming(); got != want {
			t.Errorf("GRPCRoute(%q).Streaming() = %v, want %v", path, got, want)
		}
	}
}

// TestHTTPRouteBoundsNames: a model or version named in the path is kept as
// Label keeps one read from a message, within MaxLabelBytes and UTF-8 only:
// it becomes a span attribute, a sampling key and a metric label's raw value,
// and a path can carry a megabyte, or bytes that are not UTF-8 ("%ff").
func TestHTTPRouteBoundsNames(t *testing.T) {
	long := strings.Repeat("m", 1<<20)
	for _, path := range []string{
		"/v2/models/" + long + "/versions/" + long + "/infer",
		"/v2/repository/models/" + long + "/load",
		"/v1/models/" + long + "/versions/" + long + ":predict",
		"/predictions/" + long + "/" + long,
		"/predictions/" + long + "/" + long + "/v1/chat/completions",
		"/v2/models/m%ff" + long + "/versions/v%c3/infer",
	} {
		r := HTTPRoute("POST", path, "")
		if r.API == record.APIUnknown {
			t.Fatalf("%.40s…: not recognised", path)
		}
		for _, s := range []string{r.Model, r.Version} {
			if len(s) > MaxLabelBytes || !utf8.ValidString(s) {
				t.Errorf("%.40s…: kept %d bytes (valid UTF-8 %v), want at most %d of UTF-8",
					path, len(s), utf8.ValidString(s), MaxLabelBytes)
			}
		}
	}
	if r := HTTPRoute("POST", "/v2/models/m%ff/infer", ""); r.Model != "m" {
		t.Errorf("model %q, want %q (Label drops what is not UTF-8)", r.Model, "m")
	}
}

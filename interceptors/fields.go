package interceptors

import (
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// Field numbers read from KServe's control messages and from TensorFlow
// Serving's and TorchServe's messages (inferapi.MessageKind says which
// message has which).
const (
	kserveName      = 1 // ModelReadyRequest etc.: name
	kserveVersion   = 2 // and version
	kserveRepoModel = 2 // RepositoryModelLoadRequest.model_name
	kserveReady     = 1 // ModelReadyResponse.ready

	tfRequestSpec  = 1 // model_spec of a request; InferenceTask's too
	tfResponseSpec = 2 // model_spec of ClassificationResponse, RegressionResponse, PredictResponse
	tfInputs       = 2 // PredictRequest.inputs
	tfOutputs      = 1 // PredictResponse.outputs
	tfTasks        = 1 // MultiInferenceRequest.tasks

	specName         = 1 // ModelSpec.name
	specVersion      = 2 // ModelSpec.version, a google.protobuf.Int64Value
	specVersionLabel = 4 // ModelSpec.version_label
	int64Value       = 1 // Int64Value.value

	tensorDtype         = 1  // TensorProto.dtype
	tensorShape         = 2  // TensorProto.tensor_shape
	tensorFirstContents = 4  // tensor_content, then the typed value lists,
	tensorLastContents  = 17 // up to uint64_val
	shapeDim            = 2  // TensorShapeProto.dim
	dimSize             = 1  // TensorShapeProto.Dim.size

	tfVersionStatus = 1  // GetModelStatusResponse.model_version_status
	tfVersionState  = 2  // ModelVersionStatus.state
	tfAvailable     = 30 // ModelVersionStatus.State AVAILABLE: the version serves

	tsModel   = 1 // PredictionsRequest.model_name (management requests' too)
	tsVersion = 2 // PredictionsRequest.model_version
	tsInput   = 3 // PredictionsRequest.input, a map<string, bytes>

	tsRequestSeqID  = 4 // PredictionsRequest.sequenceId
	tsResponseSeqID = 2 // PredictionResponse.sequenceId
	tsStatus        = 3 // PredictionResponse.status, a google.rpc.Status
	statusCode      = 1 // google.rpc.Status.code
)

// fillFirst records what the first message m of one direction of a call
// says; kind is what the route says that direction carries (Route.Message
// or Route.Reply). It is the one reader of messages for the interceptors
// and the StatsHandler, and records what the sidecar's scanner records of
// the same message on the wire.
//
// KServe v2's messages are read as the generated types this package links.
// TensorFlow Serving's and TorchServe's are the application's own generated
// types, which this package must not link (a second registration of the same
// proto names conflicts), so they are read through protobuf reflection, by
// field number as the scanner reads the wire, each field's kind checked
// before it is used: a field missing or of another kind is passed over.
// Nothing is marshalled (a tensor may be hundreds of MiB): value sizes come
// from the lengths and counts reflection gives.
func fillFirst(c *record.Call, kind inferapi.MessageKind, m any) {
	switch mr := m.(type) {
	case *inference.ModelInferRequest:
		if mr != nil {
			fillRequest(c, mr)
		}
		return
	case *inference.ModelInferResponse:
		if mr != nil {
			fillResponse(c, mr)
		}
		return
	case *inference.ModelStreamInferResponse:
		if ir := mr.GetInferResponse(); ir != nil {
			fillResponse(c, ir)
		}
		return
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return
	}
	msg := pm.ProtoReflect()
	if msg == nil || !msg.IsValid() {
		return // a nil message: grpc-go sends it as an empty one, whose fields say nothing
	}
	switch kind {
	case inferapi.KindModelRequest: // KServe ModelReady/ModelMetadata/ModelStatistics
		setRequestModel(c, text(msg, kserveName), text(msg, kserveVersion))
	case inferapi.KindRepositoryRequest: // KServe RepositoryModelLoad/Unload
		setRequestModel(c, text(msg, kserveRepoModel), "")
	case inferapi.KindModelReadyResponse:
		c.Ready = record.ReadyNo // proto3: an absent bool is false
		if fd := singular(msg, kserveReady, protoreflect.BoolKind); fd != nil && msg.Get(fd).Bool() {
			c.Ready = record.ReadyYes
		}
	case inferapi.KindTFRequest, inferapi.KindTFPredictRequest:
		var model, version string
		readSpec(subMessage(msg, tfRequestSpec), &model, &version)
		setRequestModel(c, model, version)
		if kind == inferapi.KindTFPredictRequest {
			// The batch size is the first tensor's, in name order, as the
			// scanner records a map's entries: a map has no order (grpc-go
			// marshals it in a random one).
			if shape := tfTensors(msg, tfInputs, c.AddInput); len(shape) > 0 {
				c.BatchSize = inferapi.BatchSize(shape)
			}
		}
	case inferapi.KindTFMultiRequest:
		var model, version string
		// The first task's model, as the scanner reads it: TF Serving
		// asks every task to name the same one.
		if l := repeated(msg, tfTasks, protoreflect.MessageKind); l != nil && l.Len() > 0 {
			readSpec(subMessage(l.Get(0).Message(), tfRequestSpec), &model, &version)
		}
		setRequestModel(c, model, version)
	case inferapi.KindTFResponse, inferapi.KindTFPredictResponse:
		if kind == inferapi.KindTFPredictResponse {
			tfTensors(msg, tfOutputs, c.AddOutput)
		}
		var model, version string
		readSpec(subMessage(msg, tfResponseSpec), &model, &version)
		// The model that answered, when the request did not name it.
		if c.Model == "" {
			c.Model = model
		}
		if c.Version == "" {
			c.Version = version
		}
	case inferapi.KindTFStatusResponse:
		c.Ready = record.ReadyNo // no version AVAILABLE, or none listed
		if l := repeated(msg, tfVersionStatus, protoreflect.MessageKind); l != nil {
			for i := range l.Len() {
				st := l.Get(i).Message()
				if fd := singular(st, tfVersionState, protoreflect.EnumKind); fd != nil && st.Get(fd).Enum() == tfAvailable {
					c.Ready = record.ReadyYes
					break
				}
			}
		}
	case inferapi.KindTSRequest:
		setRequestModel(c, text(msg, tsModel), text(msg, tsVersion))
		tsInputs(msg, c.AddInput)
	}
}

// setRequestModel records the model and version a request names, each when
// it names one.
func setRequestModel(c *record.Call, model, version string) {
	if model != "" {
		c.Model = model
	}
	if version != "" {
		c.Version = version
	}
}

// readSpec reads a TensorFlow Serving ModelSpec (nil: none) into model and
// version, each when the spec has it: the version is the numeric one in
// decimal or the version label.
func readSpec(spec protoreflect.Message, model, version *string) {
	if spec == nil {
		return
	}
	if s := text(spec, specName); s != "" {
		*model = s
	}
	if v := subMessage(spec, specVersion); v != nil {
		if fd := singular(v, int64Value, protoreflect.Int64Kind); fd != nil && v.Has(fd) {
			*version = strconv.FormatInt(v.Get(fd).Int(), 10)
		}
	}
	if s := text(spec, specVersionLabel); s != "" {
		*version = s
	}
}

// tfTensors hands each entry of m's map<string, TensorProto> field n to add
// in key order, and returns the first one's shape. Past record.MaxTensors
// entries are only counted, as add keeps no more.
func tfTensors(m protoreflect.Message, n protowire.Number, add func(record.Tensor)) (first []int64) {
	mp, keys := stringMap(m, n, protoreflect.MessageKind)
	for i, k := range keys {
		if i >= record.MaxTensors {
			add(record.Tensor{})
			continue
		}
		t := tfTensor(mp.Get(protoreflect.ValueOfString(k).MapKey()).Message())
		t.Name = inferapi.Label(k)
		if i == 0 {
			first = t.Shape
		}
		add(t)
	}
	return first
}

// tfTensor reads a TensorProto: its datatype, its shape and the wire size of
// its values.
func tfTensor(m protoreflect.Message) record.Tensor {
	var t record.Tensor
	if !m.IsValid() { // a nil entry in the map: marshalled as an empty tensor
		return t
	}
	if fd := singular(m, tensorDtype, protoreflect.EnumKind); fd != nil {
		// An enum is an int32 on the wire, sign-extended as a varint.
		t.Datatype = inferapi.TFDatatype(uint64(int64(m.Get(fd).Enum())))
	}
	if sh := subMessage(m, tensorShape); sh != nil {
		if l := repeated(sh, shapeDim, protoreflect.MessageKind); l != nil {
			for i := 0; i < l.Len() && len(t.Shape) < inferapi.MaxDims; i++ {
				d := l.Get(i).Message()
				// Every Dim is a dimension, an unset size a 0 one (proto3
				// does not send it), as the scanner reads the wire.
				var size int64
				if fd := singular(d, dimSize, protoreflect.Int64Kind); fd != nil {
					size = d.Get(fd).Int()
				}
				t.Shape = append(t.Shape, size)
			}
		}
	}
	fields := m.Descriptor().Fields()
	for n := protowire.Number(tensorFirstContents); n <= tensorLastContents; n++ {
		fd := fields.ByNumber(n)
		switch {
		case fd == nil || fd.IsMap():
		case fd.IsList():
			t.Bytes += listBytes(fd.Kind(), m.Get(fd).List())
		case m.Has(fd):
			t.Bytes += valueBytes(fd.Kind(), m.Get(fd))
		}
	}
	return t
}

// listBytes is the wire size of the values of a repeated field of kind k:
// for a list of numbers, its payload packed; for strings, bytes and
// messages, their lengths added up (tags and length prefixes, which the
// scanner does not count, left out). A list of varints declared unpacked
// (proto2, or [packed = false]) counts as packed too; the scanner counts
// its values as 0 (TensorProto, proto3, packs them all).
func listBytes(k protoreflect.Kind, l protoreflect.List) int64 {
	switch k {
	case protoreflect.BoolKind:
		return int64(l.Len())
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return 4 * int64(l.Len())
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return 8 * int64(l.Len())
	}
	var n int64
	for i := range l.Len() {
		n += valueBytes(k, l.Get(i))
	}
	return n
}

// valueBytes is the wire size of value v of kind k, without its tag (and,
// for strings, bytes and messages, without its length prefix).
func valueBytes(k protoreflect.Kind, v protoreflect.Value) int64 {
	switch k {
	case protoreflect.BoolKind:
		return 1
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return 4
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return 8
	case protoreflect.EnumKind: // an int32, sign-extended
		return int64(protowire.SizeVarint(uint64(int64(v.Enum()))))
	case protoreflect.Int32Kind, protoreflect.Int64Kind: // Int is an int32's value sign-extended
		return int64(protowire.SizeVarint(uint64(v.Int())))
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return int64(protowire.SizeVarint(protowire.EncodeZigZag(v.Int())))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return int64(protowire.SizeVarint(v.Uint()))
	case protoreflect.StringKind:
		return int64(len(v.String()))
	case protoreflect.BytesKind:
		return int64(len(v.Bytes()))
	case protoreflect.MessageKind:
		return int64(proto.Size(v.Message().Interface()))
	}
	return 0 // a group: the scanner passes groups over
}

// tsInputs hands each entry of a TorchServe PredictionsRequest's
// map<string, bytes> input to add in key order: a tensor named by the key,
// whose bytes are the value's length.
func tsInputs(m protoreflect.Message, add func(record.Tensor)) {
	mp, keys := stringMap(m, tsInput, protoreflect.BytesKind)
	for i, k := range keys {
		if i >= record.MaxTensors {
			add(record.Tensor{})
			continue
		}
		add(record.Tensor{Name: inferapi.Label(k), Bytes: int64(len(mp.Get(protoreflect.ValueOfString(k).MapKey()).Bytes()))})
	}
}

// stringMap is m's map field n, when it is a map from strings to values of
// kind value, and its keys in sorted order: reflection ranges over a map in
// a random order, and a record must not depend on it.
func stringMap(m protoreflect.Message, n protowire.Number, value protoreflect.Kind) (protoreflect.Map, []string) {
	fd := m.Descriptor().Fields().ByNumber(n)
	if fd == nil || !fd.IsMap() || fd.MapKey().Kind() != protoreflect.StringKind || fd.MapValue().Kind() != value {
		return nil, nil
	}
	mp := m.Get(fd).Map()
	if mp.Len() == 0 {
		return nil, nil
	}
	keys := make([]string, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k.String())
		return true
	})
	slices.Sort(keys)
	return mp, keys
}

// singular is m's field n when it is declared singular and of kind k; nil
// otherwise.
func singular(m protoreflect.Message, n protowire.Number, k protoreflect.Kind) protoreflect.FieldDescriptor {
	fd := m.Descriptor().Fields().ByNumber(n)
	if fd == nil || fd.Cardinality() == protoreflect.Repeated || fd.Kind() != k {
		return nil
	}
	return fd
}

// repeated is m's field n when it is a list (not a map) of kind k; nil
// otherwise.
func repeated(m protoreflect.Message, n protowire.Number, k protoreflect.Kind) protoreflect.List {
	fd := m.Descriptor().Fields().ByNumber(n)
	if fd == nil || !fd.IsList() || fd.Kind() != k {
		return nil
	}
	return m.Get(fd).List()
}

// subMessage is m's singular message field n when it is set; nil otherwise.
func subMessage(m protoreflect.Message, n protowire.Number) protoreflect.Message {
	fd := singular(m, n, protoreflect.MessageKind)
	if fd == nil || !m.Has(fd) {
		return nil
	}
	return m.Get(fd).Message()
}

// text is m's singular string field n as a label ("" when unset). A bytes
// field is read too: the two are the same on the wire, which is all the
// scanner sees.
func text(m protoreflect.Message, n protowire.Number) string {
	fd := m.Descriptor().Fields().ByNumber(n)
	if fd == nil || fd.Cardinality() == protoreflect.Repeated {
		return ""
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return inferapi.Label(m.Get(fd).String())
	case protoreflect.BytesKind:
		b := m.Get(fd).Bytes()
		return inferapi.Label(string(b[:min(len(b), inferapi.MaxLabelBytes)]))
	}
	return ""
}

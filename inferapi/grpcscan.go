package inferapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferwatch/inferwatch/record"
)

// ErrTooLarge is wrapped by the error Feed returns when a gRPC message prefix
// declares more bytes than the scanner's limit.
var ErrTooLarge = errors.New("inferapi: grpc message exceeds the size limit")

// Bounds on what the scanner keeps of a message: it reads metadata, never
// payload, so these hold whatever the sender puts on the wire.
const (
	maxField  = MaxLabelBytes // bytes kept of a model, version, tensor name or datatype
	maxDims   = MaxDims
	grpcFrame = 5 // compressed flag and big-endian length
	// maxText bounds the string arena: model, version and the name and
	// datatype of every kept tensor, even if a sender repeats fields.
	maxText = (2 + 2*record.MaxTensors) * maxField
)

// msgType is the protobuf message a scan level is inside.
type msgType uint8

const (
	mRequest    msgType = iota // ModelInferRequest
	mResponse                  // ModelInferResponse
	mStream                    // ModelStreamInferResponse
	mTensor                    // InferInputTensor or InferOutputTensor: same fields
	mModel                     // ModelReadyRequest, ModelMetadataRequest, ModelStatisticsRequest
	mRepository                // RepositoryModelLoadRequest or RepositoryModelUnloadRequest
	mReady                     // ModelReadyResponse

	// TensorFlow Serving.
	mTFRequest    // a request with model_spec = 1
	mTFResponse   // a response with model_spec = 2
	mTFPredict    // PredictRequest
	mTFPredictOut // PredictResponse
	mTFMulti      // MultiInferenceRequest
	mTFTask       // InferenceTask
	mModelSpec    // ModelSpec
	mInt64Value   // ModelSpec.version, a google.protobuf.Int64Value
	mTFEntry      // an entry of a map<string, TensorProto>: key = 1, value = 2
	mTFTensor     // TensorProto
	mTFShape      // TensorShapeProto
	mTFDim        // TensorShapeProto.Dim
	mTFStatus     // GetModelStatusResponse
	mTFVersion    // ModelVersionStatus

	// TorchServe.
	mTSRequest // PredictionsRequest
	mTSEntry   // an entry of its map<string, bytes> input
)

// scanState is what the bytes at the scan position are.
type scanState uint8

const (
	sTag    scanState = iota // a field tag
	sLength                  // the length of a length-delimited field
	sVarint                  // a varint field value
	sSkip                    // bytes to count and pass over
	sString                  // a string field to keep (bounded)
	sPacked                  // packed varint shape dimensions
)

// stringField is which kept string an sString field fills.
type stringField uint8

const (
	fieldModel stringField = iota
	fieldVersion
	fieldName     // of the current tensor
	fieldDatatype // of the current tensor
)

// level is one open protobuf message; end is the message offset it ends at.
type level struct {
	typ msgType
	end int64
}

// span is a string kept in the scanner's text arena.
type span struct{ off, n int32 }

// tensorMeta is what the scanner keeps of one tensor.
type tensorMeta struct {
	name, datatype span
	dimOff, dims   int32 // into the dims arena
	contents       int64 // wire bytes of typed contents
}

// GRPCScanner reads a stream of length-prefixed gRPC messages as the proxy
// forwards it, chunk by chunk, and keeps only the call's metadata: the model,
// the version and the tensors' names, datatypes, shapes and sizes, all from
// the first message. Tensor data is counted and passed over, never copied, so
// a 16 MiB request costs about as much as a small one. Malformed protobuf does
// not stop the scan: it marks the call and the rest of the message is counted.
//
// The zero value is ready after Reset, and a scanner may be reused by calling
// Reset again; it keeps its small buffers, so steady-state Feed does not
// allocate.
type GRPCScanner struct {
	kind MessageKind
	max  int64
	err  error // sticky ErrTooLarge

	fed        int64
	messages   int
	malformed  bool
	compressed bool

	// Framing.
	prefix  [grpcFrame]byte
	nprefix int
	inBody  bool
	size    int64 // length of the current message
	pos     int64 // bytes of the current message consumed
	scan    bool  // the current message's fields are being read

	// Protobuf reading, valid while scan is set.
	// levels: the deepest nesting read is TensorFlow's PredictRequest >
	// inputs entry > TensorProto > TensorShapeProto > Dim.
	levels [5]level
	depth  int
	state  scanState
	field  protowire.Number
	v      uint64 // varint being read
	vbytes uint8
	left   int64       // bytes left of a skip, string or packed field
	str    stringField // sString's destination
	cur    int         // tensor being read, when the top level is mTensor
	// groups counts the open groups (a proto2 encoding KServe never uses,
	// but protobuf parsers accept as unknown fields), whose fields are only
	// passed over.
	groups int

	// What the first message said.
	text     []byte  // arena of kept strings
	dims     []int64 // arena of kept shape dimensions
	model    span
	version  span
	tensors  [record.MaxTensors]tensorMeta
	ntensors int // tensors seen, kept or not
	raw      [record.MaxTensors]int64
	nraw     int // raw contents seen
	ready    record.Readiness
	dimKept  bool // the TensorFlow Dim being read has its place in dims
	taskSeen bool // a MultiInferenceRequest's first task was read

	// Heads: the first bytes of every message, for a per-message callback.
	headMax int
	headFn  func(head []byte, whole bool)
	head    []byte
	pick    *fieldPick // HeadFields: picked fields instead of the first bytes

	// Capture of the first message.
	captureMax int
	reserve    func(n int64) bool
	capturing  bool
	captured   []byte
}

// Reset prepares the scanner for a new stream of kind messages. maxMessage
// bounds a single message's declared length; <= 0 means no limit. Capture
// must be asked for again after Reset.
func (s *GRPCScanner) Reset(kind MessageKind, maxMessage int64) {
	text, dims := s.text[:0], s.dims[:0]
	*s = GRPCScanner{kind: kind, max: maxMessage, text: text, dims: dims, head: s.head[:0]}
}

// Capture asks the scanner, before the first Feed, to keep a copy of the first
// message's body (without its 5-byte prefix) when it is uncompressed and at
// most max bytes, for a full decode off the data path. When reserve is not
// nil it is asked for the message's declared size before anything is
// allocated, and a refusal means no capture: the caller keeps a shared
// budget of captured bytes that way, and gives the bytes back once the
// capture is decoded or dropped.
func (s *GRPCScanner) Capture(max int, reserve func(n int64) bool) {
	s.captureMax, s.reserve = max, reserve
}

// Heads asks for fn to be called as each message ends, with its first max
// bytes (whole reports that they are all of it): the per-message fields of a
// stream (a request's id, a response's final flag) sit at the front, where
// protobuf encoders put low field numbers, ahead of the tensor data. The
// head is copied into a buffer the scanner reuses; fn must not keep it.
// Compressed messages are not shown. Reset clears the request.
func (s *GRPCScanner) Heads(max int, fn func(head []byte, whole bool)) {
	s.headMax, s.headFn, s.pick = max, fn, nil
}

// Captured returns the first message's body when Capture asked for it and it
// arrived whole; nil otherwise. The slice is the caller's: the scanner never
// writes to it again.
func (s *GRPCScanner) Captured() []byte {
	if s.capturing {
		return nil
	}
	return s.captured
}

// Messages is the number of complete gRPC messages seen.
func (s *GRPCScanner) Messages() int { return s.messages }

// Bytes is the number of bytes fed, prefixes included.
func (s *GRPCScanner) Bytes() int64 { return s.fed }

// Malformed reports whether the first message's protobuf did not parse, or a
// frame carried a flag other than 0 or 1. It checks the structure the scanner
// walks, less than a full parse does (not UTF-8, nor inside skipped fields);
// later messages are framed and counted, not parsed.
func (s *GRPCScanner) Malformed() bool { return s.malformed }

// Compressed reports whether a message carried the compressed flag; such a
// message is counted but its body is not read.
func (s *GRPCScanner) Compressed() bool { return s.compressed }

// Feed scans the next bytes of the stream, in whatever chunks they arrived.
// Its only error wraps ErrTooLarge, when a prefix declares a message over the
// limit; from then on the scanner only counts bytes and returns that error.
func (s *GRPCScanner) Feed(p []byte) error {
	s.fed += int64(len(p))
	if s.err != nil {
		return s.err
	}
	for len(p) > 0 {
		if !s.inBody {
			n := copy(s.prefix[s.nprefix:], p)
			s.nprefix += n
			p = p[n:]
			if s.nprefix < grpcFrame {
				return nil
			}
			if err := s.begin(); err != nil {
				return err
			}
			if s.size == 0 {
				s.finish()
			}
			continue
		}
		n := min(int64(len(p)), s.size-s.pos)
		chunk := p[:n]
		p = p[n:]
		if s.capturing {
			s.captured = append(s.captured, chunk...)
		}
		if s.pick != nil {
			if s.prefix[0] == 0 { // a compressed message's head is not shown
				s.pick.feed(chunk)
			}
		} else if s.headFn != nil && len(s.head) < s.headMax {
			s.head = append(s.head, chunk[:min(len(chunk), s.headMax-len(s.head))]...)
		}
		if s.scan {
			s.fields(chunk)
		} else {
			s.pos += n
		}
		if s.pos == s.size {
			s.finish()
		}
	}
	return nil
}

// begin starts a message once its prefix is whole.
func (s *GRPCScanner) begin() error {
	flag := s.prefix[0]
	size := int64(binary.BigEndian.Uint32(s.prefix[1:]))
	if s.max > 0 && size > s.max {
		s.err = fmt.Errorf("grpc message %d declares %d bytes, limit %d: %w", s.messages+1, size, s.max, ErrTooLarge)
		return s.err
	}
	s.inBody, s.size, s.pos = true, size, 0
	s.head = s.head[:0]
	if s.pick != nil {
		s.pick.reset()
	}
	switch flag {
	case 0:
	case 1:
		s.compressed = true
	default: // gRPC defines only 0 and 1
		s.malformed = true
	}
	first := s.messages == 0
	if !first || flag != 0 {
		return nil
	}
	if s.captureMax > 0 && size <= int64(s.captureMax) && (s.reserve == nil || s.reserve(size)) {
		s.captured = make([]byte, 0, size)
		s.capturing = true
	}
	top := mRequest
	switch s.kind {
	case KindInferRequest:
	case KindModelRequest:
		top = mModel
	case KindRepositoryRequest:
		top = mRepository
	case KindModelReadyResponse:
		top = mReady
		s.ready = record.ReadyNo // proto3: an absent bool is false
	case KindInferResponse:
		top = mResponse
	case KindStreamInferResponse:
		top = mStream
	case KindTFRequest:
		top = mTFRequest
	case KindTFResponse:
		top = mTFResponse
	case KindTFPredictRequest:
		top = mTFPredict
	case KindTFPredictResponse:
		top = mTFPredictOut
	case KindTFMultiRequest:
		top = mTFMulti
	case KindTFStatusResponse:
		top = mTFStatus
		s.ready = record.ReadyNo // no version AVAILABLE, or none listed
	case KindTSRequest:
		top = mTSRequest
	default:
		return nil
	}
	s.scan = true
	s.levels[0] = level{typ: top, end: size}
	s.depth = 1
	s.state = sTag
	return nil
}

// finish ends the current message.
func (s *GRPCScanner) finish() {
	if s.scan {
		s.fields(nil) // closes the levels that end with the message, or fails
	}
	if s.headFn != nil && s.prefix[0] == 0 { // a compressed message's head says nothing
		if p := s.pick; p != nil {
			s.headFn(p.out, p.state == pTag && p.vbytes == 0 && !p.skipped)
		} else {
			s.headFn(s.head, s.size <= int64(s.headMax))
		}
	}
	s.messages++
	s.inBody, s.nprefix, s.scan, s.capturing = false, 0, false, false
}

// fail marks the message malformed and counts the rest of chunk p.
func (s *GRPCScanner) fail(p []byte) {
	s.malformed = true
	s.scan = false
	s.pos += int64(len(p))
}

// fields reads protobuf fields from p, all of which belongs to the current
// message, keeping its place between calls.
func (s *GRPCScanner) fields(p []byte) {
	for {
		for s.depth > 0 && s.pos == s.levels[s.depth-1].end {
			if s.state != sTag || s.vbytes != 0 || s.groups != 0 {
				s.fail(p) // a field or group runs past its message
				return
			}
			s.depth--
		}
		if len(p) == 0 {
			return
		}
		if s.depth == 0 {
			s.fail(p)
			return
		}
		avail := int(min(int64(len(p)), s.levels[s.depth-1].end-s.pos))
		switch s.state {
		case sTag, sLength, sVarint:
			v, n, done, ok := s.readVarint(p[:avail])
			s.pos += int64(n)
			p = p[n:]
			if !ok || done && !s.onVarint(v) {
				s.fail(p)
				return
			}
			continue
		case sSkip:
			n := int(min(int64(avail), s.left))
			s.left -= int64(n)
			s.pos += int64(n)
			p = p[n:]
		case sString:
			n := int(min(int64(avail), s.left))
			s.keep(p[:n])
			s.left -= int64(n)
			s.pos += int64(n)
			p = p[n:]
		case sPacked:
			n, ok := s.packed(p[:int(min(int64(avail), s.left))])
			s.left -= int64(n)
			s.pos += int64(n)
			p = p[n:]
			if !ok || s.left == 0 && s.vbytes != 0 {
				s.fail(p) // an overlong varint, or one cut by the field's end
				return
			}
		}
		if s.left == 0 {
			s.state = sTag
		}
	}
}

// readVarint continues the varint in progress with p. It returns the value
// when done, the bytes used, and ok=false on an overlong varint.
func (s *GRPCScanner) readVarint(p []byte) (v uint64, n int, done, ok bool) {
	if s.vbytes == 0 {
		if v, n := protowire.ConsumeVarint(p); n > 0 {
			return v, n, true, true
		}
	}
	for n < len(p) {
		b := p[n]
		n++
		if s.vbytes == 9 && b > 1 {
			return 0, n, false, false
		}
		s.v |= uint64(b&0x7f) << (7 * s.vbytes)
		s.vbytes++
		if b < 0x80 {
			v = s.v
			s.v, s.vbytes = 0, 0
			return v, n, true, true
		}
	}
	return 0, n, false, true
}

// packed reads shape dimensions from p, which lies within a packed field.
func (s *GRPCScanner) packed(p []byte) (int, bool) {
	for n, b := range p {
		if s.vbytes == 9 && b > 1 {
			return n + 1, false
		}
		s.v |= uint64(b&0x7f) << (7 * s.vbytes)
		s.vbytes++
		if b < 0x80 {
			s.dim(int64(s.v))
			s.v, s.vbytes = 0, 0
		}
	}
	return len(p), true
}

// onVarint acts on a complete varint read in the current state.
func (s *GRPCScanner) onVarint(v uint64) bool {
	switch s.state {
	case sTag:
		if v>>3 > uint64(protowire.MaxValidNumber) {
			return false
		}
		num, typ := protowire.DecodeTag(v)
		if num < protowire.MinValidNumber {
			return false
		}
		s.field = num
		switch typ {
		case protowire.VarintType:
			s.state = sVarint
		case protowire.Fixed32Type:
			s.state, s.left = sSkip, 4
			s.fixedValue(4)
		case protowire.Fixed64Type:
			s.state, s.left = sSkip, 8
			s.fixedValue(8)
		case protowire.BytesType:
			s.state = sLength
		case protowire.StartGroupType:
			s.groups++
		case protowire.EndGroupType:
			if s.groups == 0 {
				return false
			}
			s.groups--
		default:
			return false
		}
	case sVarint:
		if s.groups == 0 {
			s.varintField(v)
		}
		s.state = sTag
	case sLength:
		if v > uint64(s.levels[s.depth-1].end-s.pos) {
			return false
		}
		if s.groups > 0 {
			s.state, s.left = sSkip, int64(v)
			if v == 0 {
				s.state = sTag
			}
			break
		}
		s.lengthDelimited(int64(v))
	}
	return true
}

// varintField acts on a varint field just read, outside any group.
func (s *GRPCScanner) varintField(v uint64) {
	switch typ := s.levels[s.depth-1].typ; {
	case typ == mTensor && s.field == 3:
		s.dim(int64(v)) // an unpacked dimension
	case typ == mTFDim && s.field == 1:
		if s.dimKept {
			s.dims[len(s.dims)-1] = int64(v)
		}
	case typ == mReady && s.field == 1:
		s.ready = record.ReadyNo
		if v != 0 {
			s.ready = record.ReadyYes
		}
	case typ == mTFVersion && s.field == 2:
		if v == tfAvailable {
			s.ready = record.ReadyYes
		}
	case typ == mInt64Value && s.field == 1:
		var b [20]byte
		s.setText(fieldVersion, strconv.AppendInt(b[:0], int64(v), 10))
	case typ == mTFTensor && s.field == 1:
		if d := TFDatatype(v); d != "" {
			s.setText(fieldDatatype, []byte(d))
		}
	}
}

// fixedValue counts a fixed-size field of n bytes: in a TensorProto, an
// unpacked float or double value. (Unpacked varint values are not counted:
// proto3 encoders pack them.)
func (s *GRPCScanner) fixedValue(n int64) {
	if s.groups == 0 && s.levels[s.depth-1].typ == mTFTensor && tfContents(s.field) {
		s.tensors[s.cur].contents += n
	}
}

// lengthDelimited decides what to do with a length-delimited field of n bytes
// that starts at the scan position.
func (s *GRPCScanner) lengthDelimited(n int64) {
	s.state, s.left = sSkip, n
	f := s.field
	switch typ := s.levels[s.depth-1].typ; typ {
	case mStream:
		if f == 2 {
			s.push(mResponse, n)
		}
	case mRequest, mResponse:
		switch {
		case f == 1:
			s.startString(fieldModel)
		case f == 2:
			s.startString(fieldVersion)
		case f == 5:
			s.tensor(mTensor, n)
		case typ == mRequest && f == 7, typ == mResponse && f == 6:
			if s.nraw < record.MaxTensors {
				s.raw[s.nraw] = n
			}
			s.nraw++
		}
	case mModel, mTSRequest:
		switch {
		case f == 1:
			s.startString(fieldModel)
		case f == 2:
			s.startString(fieldVersion)
		case f == 3 && typ == mTSRequest:
			s.tensor(mTSEntry, n)
		}
	case mRepository:
		if f == 2 {
			s.startString(fieldModel)
		}
	case mTensor:
		switch f {
		case 1:
			s.startString(fieldName)
		case 2:
			s.startString(fieldDatatype)
		case 3:
			s.state = sPacked
		case 5:
			s.tensors[s.cur].contents += n
		}
	case mTFRequest, mTFTask, mTFPredict:
		switch {
		case f == 1:
			s.push(mModelSpec, n)
		case f == 2 && typ == mTFPredict:
			s.tensor(mTFEntry, n)
		}
	case mTFResponse, mTFPredictOut:
		switch {
		case f == 2:
			s.push(mModelSpec, n)
		case f == 1 && typ == mTFPredictOut:
			s.tensor(mTFEntry, n)
		}
	case mTFMulti:
		// The first task's model: TF Serving asks every task to name the
		// same one.
		if f == 1 && !s.taskSeen {
			s.taskSeen = true
			s.push(mTFTask, n)
		}
	case mModelSpec:
		switch f {
		case 1:
			s.startString(fieldModel)
		case 2:
			s.push(mInt64Value, n)
		case 4: // version_label
			s.startString(fieldVersion)
		}
	case mTFEntry:
		switch f {
		case 1:
			s.startString(fieldName)
		case 2:
			s.push(mTFTensor, n)
		}
	case mTFTensor:
		switch {
		case f == 2:
			s.push(mTFShape, n)
		case tfContents(f):
			s.tensors[s.cur].contents += n
		}
	case mTFShape:
		if f == 2 {
			// A size of 0 is absent on the wire (proto3): the dimension
			// is kept as 0 until its size, if any, arrives.
			s.dimKept = s.dim(0)
			s.push(mTFDim, n)
		}
	case mTFStatus:
		if f == 1 {
			s.push(mTFVersion, n)
		}
	case mTSEntry:
		switch f {
		case 1:
			s.startString(fieldName)
		case 2:
			s.tensors[s.cur].contents += n
		}
	}
	if s.left == 0 {
		s.state = sTag
	}
}

// tensor starts the next tensor, a message of typ and n bytes at the scan
// position; past record.MaxTensors it is only counted and passed over.
func (s *GRPCScanner) tensor(typ msgType, n int64) {
	s.ntensors++
	if s.ntensors <= record.MaxTensors {
		s.cur = s.ntensors - 1
		s.tensors[s.cur] = tensorMeta{dimOff: int32(len(s.dims))}
		s.push(typ, n)
	}
}

// push opens a nested message of n bytes at the scan position.
func (s *GRPCScanner) push(typ msgType, n int64) {
	s.levels[s.depth] = level{typ: typ, end: s.pos + n}
	s.depth++
	s.state, s.left = sTag, 0
}

// startString starts reading a string field into the arena. A repeated field
// replaces the earlier value, as protobuf says; the arena reuses its bytes
// when they are the last ones kept.
func (s *GRPCScanner) startString(f stringField) {
	s.state, s.str = sString, f
	dst := s.stringSpan()
	if dst.n > 0 && int(dst.off+dst.n) == len(s.text) {
		s.text = s.text[:dst.off]
	}
	*dst = span{off: int32(len(s.text))}
}

// stringSpan is where the string being read is kept.
func (s *GRPCScanner) stringSpan() *span {
	switch s.str {
	case fieldModel:
		return &s.model
	case fieldVersion:
		return &s.version
	case fieldName:
		return &s.tensors[s.cur].name
	}
	return &s.tensors[s.cur].datatype
}

// setText sets kept string f to v, read whole from a varint field.
func (s *GRPCScanner) setText(f stringField, v []byte) {
	s.startString(f)
	s.keep(v)
}

// keep appends string bytes to the current value, up to the bounds.
func (s *GRPCScanner) keep(p []byte) {
	dst := s.stringSpan()
	room := min(maxField-int(dst.n), maxText-len(s.text))
	if room <= 0 {
		return
	}
	p = p[:min(len(p), room)]
	s.text = append(s.text, p...)
	dst.n += int32(len(p))
}

// dim appends a shape dimension to the current tensor, up to maxDims, and
// reports whether it was kept.
func (s *GRPCScanner) dim(d int64) bool {
	t := &s.tensors[s.cur]
	if t.dims < maxDims {
		s.dims = append(s.dims, d)
		t.dims++
		return true
	}
	return false
}

// FillRequest records what the request stream said: the message count, the
// first message's model, version and inputs, the batch size (the first
// input's leading dimension) and whether anything was malformed. Call it once
// per call.
func (s *GRPCScanner) FillRequest(c *record.Call) {
	c.RequestMessages = s.messages
	if s.malformed {
		c.DecodeFail = true
	}
	if s.model.n > 0 {
		c.Model = s.value(s.model)
	}
	if s.version.n > 0 {
		c.Version = s.value(s.version)
	}
	order, n := s.order()
	s.fillTensors(order[:n], c.AddInput)
	c.InputCount += s.ntensors - n
	if t := s.tensors[order[0]]; n > 0 && t.dims > 0 {
		c.BatchSize = BatchSize(s.dims[t.dimOff : t.dimOff+t.dims])
	}
}

// FillResponse records what the response stream said: the message count, the
// first message's outputs and, when the call has none yet, its model and
// version; for a ModelReady answer, the readiness. A malformed response also
// marks the call. Call it once per call.
func (s *GRPCScanner) FillResponse(c *record.Call) {
	c.ResponseMessages = s.messages
	if s.malformed {
		c.DecodeFail = true
	}
	if s.messages > 0 && !s.malformed && !s.compressed {
		c.Ready = s.ready
	}
	if c.Model == "" && s.model.n > 0 {
		c.Model = s.value(s.model)
	}
	if c.Version == "" && s.version.n > 0 {
		c.Version = s.value(s.version)
	}
	order, n := s.order()
	s.fillTensors(order[:n], c.AddOutput)
	c.OutputCount += s.ntensors - n
}

// order is the order the n kept tensors are recorded in: as they came, or,
// for the entries of a map (TF Serving's tensors, TorchServe's inputs), by
// name: a map has no order, and its senders (grpc-go's among them) marshal
// it in a random one, which would make the first tensor, and so the batch
// size, vary from call to call.
func (s *GRPCScanner) order() (idx [record.MaxTensors]int, n int) {
	n = min(s.ntensors, record.MaxTensors)
	for i := range n {
		idx[i] = i
	}
	switch s.kind {
	case KindTFPredictRequest, KindTFPredictResponse, KindTSRequest:
		name := func(i int) []byte { sp := s.tensors[i].name; return s.text[sp.off : sp.off+sp.n] }
		slices.SortStableFunc(idx[:n], func(a, b int) int { return bytes.Compare(name(a), name(b)) })
	}
	return idx, n
}

// fillTensors hands the kept tensors to add in the order given; raw
// contents belong to tensors by position on the wire.
func (s *GRPCScanner) fillTensors(order []int, add func(record.Tensor)) {
	for _, i := range order {
		m := &s.tensors[i]
		t := record.Tensor{
			Name:     s.value(m.name),
			Datatype: s.value(m.datatype),
			Bytes:    m.contents,
		}
		if m.dims > 0 {
			t.Shape = append([]int64(nil), s.dims[m.dimOff:m.dimOff+m.dims]...)
		}
		if i < s.nraw {
			t.Bytes += s.raw[i]
		}
		add(t)
	}
}

// value returns a kept string (already within maxField bytes) as a label.
func (s *GRPCScanner) value(sp span) string {
	return Label(string(s.text[sp.off : sp.off+sp.n]))
}

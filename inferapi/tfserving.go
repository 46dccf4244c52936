package inferapi

import "google.golang.org/protobuf/encoding/protowire"

// What the scanner knows of TensorFlow Serving's messages beyond their
// field numbers (which are in grpcscan.go's lengthDelimited and
// varintField, beside KServe's and TorchServe's).

// tfAvailable is ModelVersionStatus.State AVAILABLE: the version serves.
const tfAvailable = 30

// tfDatatypes names TensorFlow's DataType values: KServe v2's datatype where
// it has one, so that one vocabulary covers every API; TensorFlow's own name
// otherwise.
var tfDatatypes = [...]string{
	1: "FP32", 2: "FP64", 3: "INT32", 4: "UINT8", 5: "INT16", 6: "INT8", 7: "BYTES",
	8: "DT_COMPLEX64", 9: "INT64", 10: "BOOL", 11: "DT_QINT8", 12: "DT_QUINT8",
	13: "DT_QINT32", 14: "BF16", 15: "DT_QINT16", 16: "DT_QUINT16", 17: "UINT16",
	18: "DT_COMPLEX128", 19: "FP16", 20: "DT_RESOURCE", 21: "DT_VARIANT", 22: "UINT32", 23: "UINT64",
}

// TFDatatype names TensorFlow DataType value v as the scanner records it
// ("" for a value it does not know).
func TFDatatype(v uint64) string {
	if v < uint64(len(tfDatatypes)) {
		return tfDatatypes[v]
	}
	return ""
}

// tfContents says whether TensorProto field f holds the tensor's values:
// tensor_content = 4 and the typed repeated fields up to uint64_val = 17.
func tfContents(f protowire.Number) bool { return f >= 4 && f <= 17 }

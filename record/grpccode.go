package record

// grpcCodes spells gRPC status codes by number, as Call.Code holds them.
var grpcCodes = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// GRPCCodeName returns the name of gRPC status code n, "UNKNOWN" for a
// number the protocol does not define.
func GRPCCodeName(n int) string {
	if n < 0 || n >= len(grpcCodes) {
		return "UNKNOWN"
	}
	return grpcCodes[n]
}

// GRPCCodeNumber returns the number of a gRPC status code name.
func GRPCCodeNumber(name string) (int, bool) {
	for i, s := range grpcCodes {
		if s == name {
			return i, true
		}
	}
	return 0, false
}

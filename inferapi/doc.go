// Package inferapi recognises which inference API a call speaks and reads its
// model, version and tensor metadata from the bytes the proxy already holds.
//
// In the call pipeline it sits between a front (the proxy, which forwards
// bytes untouched) and the call record: Route tells what the request line
// says, GRPCScanner reads gRPC messages as they stream past without keeping
// their payload, and the HTTP decoders read the bounded body prefix the proxy
// captured. Everything it reads is untrusted; nothing it reads can fail the
// call, only mark it undecodable.
package inferapi

package sampling

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// The OpenTelemetry consistent-probability scheme compares 56 bits of trace
// randomness R with a 56-bit rejection threshold T and keeps a trace when
// R >= T. T = (1-p)·2^56, so 2^56 - T traces in 2^56 are kept.
const (
	maxAdjusted = uint64(1) << 56 // 2^56: distinct randomness values
	randMask    = maxAdjusted - 1
	thDigits    = 14 // hex digits of a 56-bit value

	// thPrecision is how many significant hex digits of T are kept, counted
	// after T's leading f's, as the spec recommends for SDKs: a th of at
	// most 4+z digits for p near 16^-z, and the probability it encodes is
	// within about 1/2^13 (relative) of the one asked for.
	thPrecision = 4
)

// threshold is a sampling probability in the form the decision uses.
type threshold struct {
	t  uint64  // rejection threshold: keep when randomness >= t
	p  float64 // the probability t encodes exactly, (2^56 - t) / 2^56
	th string  // t as the value of the tracestate `th` sub-key
}

// acceptCount rounds p to the number of randomness values a threshold for it
// accepts (2^56 - T), at thPrecision. Returns maxAdjusted for p = 1.
func acceptCount(p float64) uint64 {
	if !(p < 1) {
		return maxAdjusted
	}
	a := uint64(math.Round(p * float64(maxAdjusted)))
	if a < 1 {
		// 2^-56 is the smallest probability the scheme can express.
		return 1
	}
	if a >= maxAdjusted {
		return maxAdjusted
	}
	// Leading zero hex digits of a are leading f digits of T; the
	// precision counts from the first digit that is not an f.
	z := (bits.LeadingZeros64(a) - (64 - 56)) / 4
	if keep := thPrecision + z; keep < thDigits {
		step := uint64(1) << (4 * (thDigits - keep))
		a = (a + step/2) / step * step
	}
	return min(a, maxAdjusted)
}

func newThreshold(p float64) threshold {
	a := acceptCount(p)
	t := maxAdjusted - a
	return threshold{t: t, p: thresholdProbability(t), th: encodeTH(t)}
}

// thresholdProbability is the probability a rejection threshold encodes.
func thresholdProbability(t uint64) float64 {
	return float64(maxAdjusted-t) / float64(maxAdjusted)
}

// encodeTH writes T as 14 hex digits with trailing zeros removed; T = 0
// (keep everything) is "0".
func encodeTH(t uint64) string {
	if t == 0 {
		return "0"
	}
	// The extra top bit makes FormatUint pad to exactly 14 digits.
	s := strconv.FormatUint(t|maxAdjusted, 16)[1:]
	return strings.TrimRight(s, "0")
}

// parseTH reads a `th` value: 1 to 14 hex digits, implicitly followed by
// zeros up to 14.
func parseTH(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > thDigits {
		return 0, false
	}
	v, ok := parseHex(s)
	if !ok {
		return 0, false
	}
	return v << (4 * (thDigits - len(s))), true
}

// parseRV reads an `rv` value: exactly 14 hex digits.
func parseRV(s string) (uint64, bool) {
	if len(s) != thDigits {
		return 0, false
	}
	return parseHex(s)
}

func parseHex(s string) (uint64, bool) {
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// traceRandomness is the trace id's randomness: its least significant 56
// bits (W3C Trace Context Level 2 makes the last 7 bytes random).
func traceRandomness(id [16]byte) uint64 {
	return binary.BigEndian.Uint64(id[8:]) & randMask
}

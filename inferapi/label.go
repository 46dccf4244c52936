package inferapi

import "strings"

// Bounds on what a record keeps of the strings and shapes in a message,
// whatever the sender put there.
const (
	MaxLabelBytes = 256 // of a model, version or tensor name (Label)
	MaxDims       = 64  // shape dimensions per tensor
)

// Label is what the scanner keeps of a string read from a message, a model,
// version or tensor name that may become a metric label: its first
// MaxLabelBytes, less any that are not UTF-8 (a rune cut by the bound, or a
// sender's garbage). Fronts that read decoded messages keep the same.
func Label(s string) string {
	if len(s) > MaxLabelBytes {
		s = s[:MaxLabelBytes]
	}
	return strings.ToValidUTF8(s, "")
}

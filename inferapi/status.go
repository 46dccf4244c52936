package inferapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/inferwatch/inferwatch/record"
)

// tfStateAvailable is TF Serving's REST spelling of ModelVersionStatus
// AVAILABLE (tfAvailable on gRPC).
const tfStateAvailable = "AVAILABLE"

// decodeStatus reads readiness from a REST model status answer, where the
// status code alone does not say it (TF Serving answers 200 while a
// version still loads): KServe v1's {"name": m, "ready": bool}, and TF
// Serving's {"model_version_status": [{"version": "1", "state":
// "AVAILABLE", ...}]}, ready when a version is AVAILABLE, as its gRPC
// GetModelStatus is read. Any other JSON (an OpenAI-style model object on
// the same path) leaves the call's readiness unknown.
func decodeStatus(h http.Header, body []byte, truncated bool, c *record.Call, scan bool) error {
	if kindOf(h, body) != bodyJSON || len(body) == 0 {
		return nil
	}
	ready := record.ReadyUnknown
	var states, available int
	w := newJSONWalk(body).scanning(scan)
	err := w.object("body", func(key string) error {
		switch key {
		case "ready":
			tok, err := w.dec.Token()
			if err != nil {
				return err
			}
			if b, ok := tok.(bool); ok {
				ready = record.ReadyNo
				if b {
					ready = record.ReadyYes
				}
				return nil
			}
			return w.skipFrom(tok)
		case "model_version_status":
			_, err := w.array(key, func(int) error {
				return w.object("model_version_status", func(k string) error {
					if k != "state" {
						return w.skip()
					}
					s, err := w.string("state")
					if err == nil {
						states++
						if s == tfStateAvailable {
							available++
						}
					}
					return err
				})
			})
			return err
		}
		return w.skip()
	})
	cut := err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
	if err := finish(err, truncated); err != nil {
		return err
	}
	switch {
	case available > 0:
		ready = record.ReadyYes
	case states > 0:
		ready = record.ReadyNo
	}
	if ready == record.ReadyUnknown || cut && ready == record.ReadyNo {
		return nil // past a cut may be what says ready
	}
	c.Ready = ready
	return nil
}

package alertmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
)

// WebhookVersion is the version field of the webhook document; it changes
// only when the document changes incompatibly.
const WebhookVersion = "1"

// Webhook POSTs alerts as a JSON document to a generic URL:
//
//	{"version": "1", "status": "firing", "alerts": [
//	  {"status": "firing", "labels": {...}, "annotations": {...},
//	   "startsAt": "...", "endsAt": "...", "generatorURL": "...",
//	   "fingerprint": "...", "snapshot": {...}}]}
//
// The document's status is "firing" when any alert in it fires, else
// "resolved"; endsAt appears on resolved alerts only (the send time if the
// alert has none); snapshot is the root-cause capture when the alert
// carries one.
type Webhook struct {
	d *dispatcher
}

var _ alerting.Notifier = (*Webhook)(nil)

// NewWebhook returns a Webhook posting to url. It runs until ctx is done or
// Close is called. Options.ResolveTimeout does not apply.
func NewWebhook(ctx context.Context, url string, o Options) (*Webhook, error) {
	o, err := o.withDefaults("webhook")
	if err != nil {
		return nil, fmt.Errorf("webhook notifier: %w", err)
	}
	o.hidePath = true
	d, err := newDispatcher(ctx, []string{url}, o, encodeWebhook, nil)
	if err != nil {
		return nil, fmt.Errorf("webhook notifier: %w", err)
	}
	return &Webhook{d: d}, nil
}

// Notify queues firing and resolved alerts and returns at once (pending
// alerts are not sent), with the same contract as Client.Notify.
func (w *Webhook) Notify(_ context.Context, alerts []alerting.Alert) {
	w.d.notify(alerts)
}

// Close stops the Webhook like Client.Close.
func (w *Webhook) Close() error {
	return w.d.close()
}

// WebhookMessage is the document a Webhook posts.
type WebhookMessage struct {
	Version string         `json:"version"`
	Status  string         `json:"status"` // "firing" or "resolved"
	Alerts  []WebhookAlert `json:"alerts"`
}

// WebhookAlert is one alert of a WebhookMessage.
type WebhookAlert struct {
	Status       string             `json:"status"` // "firing" or "resolved"
	Labels       map[string]string  `json:"labels"`
	Annotations  map[string]string  `json:"annotations,omitempty"`
	StartsAt     time.Time          `json:"startsAt,omitzero"`
	EndsAt       time.Time          `json:"endsAt,omitzero"`
	GeneratorURL string             `json:"generatorURL,omitempty"`
	Fingerprint  string             `json:"fingerprint"`
	Snapshot     *alerting.Snapshot `json:"snapshot,omitempty"`
}

func encodeWebhook(batch []alerting.Alert, now time.Time) ([]byte, error) {
	m := WebhookMessage{Version: WebhookVersion, Status: string(alerting.StateResolved), Alerts: make([]WebhookAlert, len(batch))}
	for i, a := range batch {
		w := WebhookAlert{
			Status:       string(alerting.StateFiring),
			Labels:       a.Labels,
			Annotations:  a.Annotations,
			StartsAt:     a.StartsAt,
			GeneratorURL: a.GeneratorURL,
			Fingerprint:  a.Fingerprint(),
			Snapshot:     a.Snapshot,
		}
		if a.State == alerting.StateResolved {
			w.Status = string(alerting.StateResolved)
			w.EndsAt = a.EndsAt
			if w.EndsAt.IsZero() {
				w.EndsAt = now
			}
		} else {
			m.Status = string(alerting.StateFiring)
		}
		m.Alerts[i] = w
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode webhook message: %w", err)
	}
	return b, nil
}

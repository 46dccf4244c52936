package alertmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inferwatch/inferwatch/alerting"
)

// Client sends alerts to one or more Alertmanagers (an HA set: every alert
// goes to each) through POST {url}/api/v2/alerts.
type Client struct {
	d *dispatcher
}

var _ alerting.Notifier = (*Client)(nil)

// NewClient returns a Client for the given Alertmanager base URLs (e.g.
// "http://alertmanager:9093", or with a path prefix for one behind a
// proxy; a URL already ending in /api/v2/alerts is taken as is). It runs
// until ctx is done or Close is called.
func NewClient(ctx context.Context, urls []string, o Options) (*Client, error) {
	o, err := o.withDefaults("alertmanager")
	if err != nil {
		return nil, fmt.Errorf("alertmanager client: %w", err)
	}
	endpoints := make([]string, len(urls))
	for i, u := range urls {
		if endpoints[i], err = alertsEndpoint(u); err != nil {
			return nil, fmt.Errorf("alertmanager client: %w", err)
		}
	}
	resolve := o.ResolveTimeout
	d, err := newDispatcher(ctx, endpoints, o, func(batch []alerting.Alert, now time.Time) ([]byte, error) {
		return encodePostableAlerts(batch, now, resolve)
	}, validateAlert)
	if err != nil {
		return nil, fmt.Errorf("alertmanager client: %w", err)
	}
	d.split400 = true
	return &Client{d: d}, nil
}

// alertsEndpoint turns an Alertmanager base URL into its v2 alerts URL.
func alertsEndpoint(base string) (string, error) {
	if err := checkURL(base); err != nil {
		return "", err
	}
	u, _ := url.Parse(base) // checked above
	if !strings.HasSuffix(u.Path, "/api/v2/alerts") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v2/alerts"
		u.RawPath = ""
	}
	return u.String(), nil
}

// Notify queues firing and resolved alerts for every Alertmanager and
// returns at once (pending alerts are not sent). It never blocks on the
// network; ctx is not used, delivery has the Client's own lifetime. The
// caller may reuse the label and annotation maps afterwards, but must not
// modify a Snapshot it passed.
func (c *Client) Notify(_ context.Context, alerts []alerting.Alert) {
	c.d.notify(alerts)
}

// Close stops the Client: queued alerts are sent for at most
// Options.FlushTimeout, then dropped. It waits for that and reports the
// alerts left undelivered. Later Notify calls only count drops.
func (c *Client) Close() error {
	return c.d.close()
}

// validateAlert checks what Alertmanager checks of an alert's labels and
// annotations: at least one label, names of letters, digits and underscores
// not starting with a digit, values in UTF-8. Alertmanager answers 400 to a
// request holding one bad alert (storing the others), which costs a resend
// of the batch alert by alert.
func validateAlert(a alerting.Alert) error {
	if len(a.Labels) == 0 {
		return errors.New("no labels")
	}
	for _, set := range []struct {
		what string
		m    map[string]string
	}{{"label", a.Labels}, {"annotation", a.Annotations}} {
		for name, value := range set.m {
			if !validLabelName(name) {
				return fmt.Errorf("invalid %s name %q", set.what, name)
			}
			if !utf8.ValidString(value) {
				return fmt.Errorf("%s %s: value is not UTF-8", set.what, name)
			}
		}
	}
	return nil
}

func validLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// postableAlert is one element of Alertmanager's v2 POST /alerts body.
type postableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// encodePostableAlerts builds the request body. A firing alert ends
// resolveTimeout after now, so that Alertmanager resolves it by itself once
// re-sends stop; a resolved alert ends when it was resolved (now, if the
// engine left that unset), never before it started, which Alertmanager
// refuses.
func encodePostableAlerts(batch []alerting.Alert, now time.Time, resolveTimeout time.Duration) ([]byte, error) {
	out := make([]postableAlert, len(batch))
	for i, a := range batch {
		p := postableAlert{
			Labels:       a.Labels,
			Annotations:  a.Annotations,
			StartsAt:     a.StartsAt.UTC(),
			GeneratorURL: a.GeneratorURL,
		}
		switch a.State {
		case alerting.StateResolved:
			p.EndsAt = a.EndsAt
			if p.EndsAt.IsZero() {
				p.EndsAt = now
			}
		default:
			p.EndsAt = now.Add(resolveTimeout)
		}
		if !p.StartsAt.IsZero() && p.EndsAt.Before(p.StartsAt) {
			p.EndsAt = p.StartsAt
		}
		p.EndsAt = p.EndsAt.UTC()
		out[i] = p
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode alerts: %w", err)
	}
	return b, nil
}

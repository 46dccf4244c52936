package metricset

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// labelNameRe is the Prometheus label-name syntax.
var labelNameRe = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// reservedLabels are the label names of the families a push carries: this
// package's and those other packages register in Metrics() (sidecar,
// modelload, tracing, sampling, alerting, alertmanager, gpu, bpf). An extra
// label with one of these names would give a pushed series the label twice.
// A new label name on a family in the set belongs here too.
var reservedLabels = map[string]bool{
	// this package
	"protocol": true, "api": true, "method": true, "model": true, "version": true,
	"code": true, "phase": true, "stage": true, "kind": true, "direction": true,
	"side": true, "le": true, "source": true, "reason": true,
	// other packages' families in the set
	"route": true, "bound": true, "op": true, "to": true, "quantile": true,
	"alertname": true, "notifier": true, "result": true, "gpu": true, "uuid": true,
	"pid": true, "upstream": true, "xid": true, "call": true, "error": true,
	"estimated": true, "probe": true, "what": true,
}

// InitPush starts pushing the whole set (this package's metrics and those
// registered by others) to url every interval until ctx is done. url is a
// VictoriaMetrics import endpoint such as
// http://vm:8428/api/v1/import/prometheus. extraLabels (pod, namespace, ...)
// are added to every pushed series, not to the /metrics page, where the
// scraper adds its own target labels.
func (s *Set) InitPush(ctx context.Context, url string, interval time.Duration, extraLabels map[string]string) error {
	extra, err := formatExtraLabels(extraLabels)
	if err != nil {
		return fmt.Errorf("metricset: push to %q: %w", url, err)
	}
	opts := &metrics.PushOptions{
		ExtraLabels: extra,
		Method:      http.MethodPost,
		LogErr:      (&pushLog{}).printf,
	}
	if err := metrics.InitPushExtWithOptions(ctx, url, interval, s.WritePrometheus, opts); err != nil {
		return fmt.Errorf("metricset: push to %q every %v: %w", url, interval, err)
	}
	return nil
}

// formatExtraLabels validates the labels and renders them in the library's
// `name="value",...` form, sorted so that the pushed text is stable.
func formatExtraLabels(m map[string]string) (string, error) {
	names := make([]string, 0, len(m))
	for name, value := range m {
		switch {
		case !labelNameRe.MatchString(name):
			return "", fmt.Errorf("extra label name %q is not a valid Prometheus label name", name)
		case strings.HasPrefix(name, "__"):
			return "", fmt.Errorf("extra label name %q: names starting with __ are reserved", name)
		case reservedLabels[name]:
			return "", fmt.Errorf("extra label name %q is already a label of inferwatch metrics", name)
		case value == "":
			return "", fmt.Errorf("extra label %q has an empty value", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + `="` + EscapeLabelValue(m[name]) + `"`
	}
	return strings.Join(parts, ","), nil
}

// pushRepeatEvery is how often an unchanged push error is logged again.
const pushRepeatEvery = time.Minute

// pushLog keeps a VictoriaMetrics outage from logging once per interval: an
// error is logged when it differs from the last one or a minute has passed.
type pushLog struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

func (l *pushLog) printf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if msg == l.last && time.Since(l.at) < pushRepeatEvery {
		return
	}
	l.last, l.at = msg, time.Now()
	log.Printf("inferwatch: %s", msg)
}

// CheckExtraLabels reports the first extra label InitPush would refuse, so
// configuration can be rejected before anything starts.
func CheckExtraLabels(m map[string]string) error {
	_, err := formatExtraLabels(m)
	return err
}

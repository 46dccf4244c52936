package alerting

import (
	"context"
	"maps"
	"slices"
	"time"
)

// RuleMemoryLeakSuspected is the alertname of the upstream memory-leak
// condition the sidecar raises through SetCondition (docs/alerting.md).
const RuleMemoryLeakSuspected = "MemoryLeakSuspected"

// SetCondition raises or clears an alert that the engine does not judge
// from window statistics itself — a condition of the upstream's host such
// as RuleMemoryLeakSuspected, judged by its owner. name is the alertname;
// labels (with the engine's Options.Labels) identify the episode. Raising
// a condition that is not firing starts an episode and notifies it at once;
// raising it again refreshes its annotations (it is re-sent with the other
// firing alerts every Resend); clearing a firing one resolves and notifies
// it. Alerts lists conditions with the rules' alerts.
func (e *Engine) SetCondition(ctx context.Context, name string, labels, annotations map[string]string, firing bool, at time.Time) {
	l := make(map[string]string, len(labels)+len(e.o.Labels)+1)
	maps.Copy(l, e.o.Labels)
	maps.Copy(l, labels)
	l["alertname"] = name
	fp := fingerprint(l)
	var out []Alert
	e.notifyMu.Lock() // see Engine.notifyMu
	defer e.notifyMu.Unlock()
	e.mu.Lock()
	ep := e.conds[fp]
	switch {
	case firing && ep == nil:
		if e.conds == nil {
			e.conds = make(map[string]*episode)
		}
		a := Alert{Labels: l, Annotations: maps.Clone(annotations), State: StateFiring, StartsAt: at, GeneratorURL: e.o.GeneratorURL}
		e.conds[fp] = &episode{alert: a, lastSent: at}
		out = append(out, a)
	case firing:
		ep.alert.Annotations = maps.Clone(annotations)
	case ep != nil:
		a := ep.alert
		a.State, a.EndsAt = StateResolved, at
		a.Annotations = maps.Clone(a.Annotations) // the firing copies went out with theirs
		maps.Copy(a.Annotations, annotations)
		delete(e.conds, fp)
		e.resolved = append(e.resolved, a)
		if len(e.resolved) > maxResolved {
			e.resolved = slices.Delete(e.resolved, 0, len(e.resolved)-maxResolved)
		}
		out = append(out, a)
	}
	e.mu.Unlock()
	if len(out) > 0 {
		for _, n := range e.o.Notifiers {
			n.Notify(ctx, out)
		}
	}
}

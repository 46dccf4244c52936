package alerting

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/inferwatch/inferwatch/metricset"
)

// Thresholds are one model's rule settings; counts are in windows. In
// Config.Models a zero field inherits Config.Defaults, and there a zero field
// takes the seed's default shown.
type Thresholds struct {
	// LatencyMeanOverSLA: the EMA of the mean latency above SLAFactor × SLA
	// for MeanFor windows. No SLA, no rule.
	SLA       time.Duration `yaml:"sla" json:"sla"`
	SLAFactor float64       `yaml:"sla_factor" json:"slaFactor"` // 1.2
	MeanFor   int           `yaml:"mean_for" json:"meanFor"`     // 1

	// P99OverBaseline: a window's P99 above P99Factor × baseline for P99For
	// consecutive windows; the baseline is the median P99 of the last
	// BaselineWindows windows not in a breach, and needs BaselineMin of them.
	P99Factor       float64 `yaml:"p99_factor" json:"p99Factor"`             // 1.3
	P99For          int     `yaml:"p99_for" json:"p99For"`                   // 3
	BaselineWindows int     `yaml:"baseline_windows" json:"baselineWindows"` // 30
	BaselineMin     int     `yaml:"baseline_min" json:"baselineMin"`         // 6
	// P99NoiseK, when above 0, also asks of a breach that the P99 exceed the
	// baseline by P99NoiseK robust standard deviations (1.4826 × the median
	// absolute deviation of the baseline windows), so that hours when the
	// P99's own noise exceeds 30% (little traffic, a jittery host) do not
	// fire. Default 3: on the latency-incidents bench it cuts false alarms
	// from 9.3 to 1.6 a day for 8 points of recall (docs/alerting.md). A
	// negative value turns the guard off: the seed's rule alone.
	P99NoiseK float64 `yaml:"p99_noise_k" json:"p99NoiseK"`
	// P99MinExcess is an absolute floor: a breach must also exceed the
	// baseline by this much, so that a millisecond model's 1 → 2 ms is not
	// an incident. Default 2ms: on the latency-incidents bench it costs no
	// recall (docs/baseline.md). A negative value turns the floor off.
	P99MinExcess time.Duration `yaml:"p99_min_excess" json:"p99MinExcess"`

	// LatencyStdDevJump: a window's standard deviation above (1+StdDevJump)
	// × the median of the StdDevReference windows before it (not in a
	// breach), and at least MinStdDev, for StdDevFor windows.
	StdDevJump      float64       `yaml:"stddev_jump" json:"stddevJump"`           // 0.5
	StdDevFor       int           `yaml:"stddev_for" json:"stddevFor"`             // 2
	StdDevReference int           `yaml:"stddev_reference" json:"stddevReference"` // 3
	MinStdDev       time.Duration `yaml:"min_stddev" json:"minStddev"`             // 1ms
	// StdDevMinExcess is the std-dev rule's absolute floor: a breach must
	// also exceed the reference by this much. Default 2ms; negative: off.
	StdDevMinExcess time.Duration `yaml:"stddev_min_excess" json:"stddevMinExcess"`

	// ThroughputLatencySlopeChange: the slope of latency against throughput,
	// fitted over the last windows, differs from the mean slope of the
	// SlopeReference fits that ended one fit span earlier (so on disjoint
	// windows) by more than SlopeK combined standard errors, and by enough
	// to move latency across the throughput range seen by SlopeMinEffect of
	// its mean, for SlopeFor windows. Fits of fewer than SlopeMinWindows
	// windows are not compared.
	SlopeK          float64 `yaml:"slope_k" json:"slopeK"`                    // 3
	SlopeFor        int     `yaml:"slope_for" json:"slopeFor"`                // 2
	SlopeReference  int     `yaml:"slope_reference" json:"slopeReference"`    // 6
	SlopeMinWindows int     `yaml:"slope_min_windows" json:"slopeMinWindows"` // 10
	SlopeMinEffect  float64 `yaml:"slope_min_effect" json:"slopeMinEffect"`   // 0.25

	// MinCount is the calls a window needs before its P99 and standard
	// deviation are judged.
	MinCount int `yaml:"min_count" json:"minCount"` // 100
	// HoldDown is how many windows a firing rule must be clear to resolve.
	HoldDown int `yaml:"hold_down" json:"holdDown"` // 2
	// AdaptAfter is how many windows a breach may last before its windows
	// start entering the baseline and references: a change that persists
	// becomes the new normal (LatencyMeanOverSLA, absolute, never adapts).
	AdaptAfter int `yaml:"adapt_after" json:"adaptAfter"` // 30

	// LLMTimeToFirstTokenOverSLO: the P99 time to first token of a window's
	// generations (streamed OpenAI calls, ModelStreamInfer requests) above
	// TTFTSLO for TTFTFor windows, judged on windows with at least
	// MinTTFTCount generations. No TTFT SLO, no rule.
	TTFTSLO      time.Duration `yaml:"ttft_slo" json:"ttftSLO"`
	TTFTFor      int           `yaml:"ttft_for" json:"ttftFor"`            // 3
	MinTTFTCount int           `yaml:"min_ttft_count" json:"minTTFTCount"` // 20
	// Disabled names rules (alertnames) not evaluated for the model.
	Disabled []string `yaml:"disabled" json:"disabled,omitempty"`
}

// DefaultThresholds are the seed's thresholds and this package's choices of
// the rest.
func DefaultThresholds() Thresholds {
	return Thresholds{
		SLAFactor:       1.2,
		MeanFor:         1,
		P99Factor:       1.3,
		P99For:          3,
		P99NoiseK:       3,
		P99MinExcess:    2 * time.Millisecond,
		BaselineWindows: 30,
		BaselineMin:     6,
		StdDevJump:      0.5,
		StdDevFor:       2,
		StdDevReference: 3,
		MinStdDev:       time.Millisecond,
		StdDevMinExcess: 2 * time.Millisecond,
		SlopeK:          3,
		SlopeFor:        2,
		SlopeReference:  6,
		SlopeMinWindows: 10,
		SlopeMinEffect:  0.25,
		MinCount:        100,
		HoldDown:        2,
		AdaptAfter:      30,
		TTFTFor:         3,
		MinTTFTCount:    20,
	}
}

// Config is the rule settings: defaults and per-model overrides, keyed by
// model name (all versions).
type Config struct {
	Defaults Thresholds            `yaml:"defaults" json:"defaults"`
	Models   map[string]Thresholds `yaml:"models" json:"models,omitempty"`
}

// over returns t with o's non-zero fields laid over it.
func (t Thresholds) over(o Thresholds) Thresholds {
	set := func(dst *float64, v float64) {
		if v != 0 {
			*dst = v
		}
	}
	seti := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setd := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	setd(&t.SLA, o.SLA)
	set(&t.SLAFactor, o.SLAFactor)
	seti(&t.MeanFor, o.MeanFor)
	set(&t.P99Factor, o.P99Factor)
	seti(&t.P99For, o.P99For)
	seti(&t.BaselineWindows, o.BaselineWindows)
	seti(&t.BaselineMin, o.BaselineMin)
	set(&t.P99NoiseK, o.P99NoiseK)
	setd(&t.P99MinExcess, o.P99MinExcess)
	setd(&t.StdDevMinExcess, o.StdDevMinExcess)
	set(&t.StdDevJump, o.StdDevJump)
	seti(&t.StdDevFor, o.StdDevFor)
	seti(&t.StdDevReference, o.StdDevReference)
	setd(&t.MinStdDev, o.MinStdDev)
	set(&t.SlopeK, o.SlopeK)
	seti(&t.SlopeFor, o.SlopeFor)
	seti(&t.SlopeReference, o.SlopeReference)
	seti(&t.SlopeMinWindows, o.SlopeMinWindows)
	set(&t.SlopeMinEffect, o.SlopeMinEffect)
	seti(&t.MinCount, o.MinCount)
	seti(&t.HoldDown, o.HoldDown)
	seti(&t.AdaptAfter, o.AdaptAfter)
	setd(&t.TTFTSLO, o.TTFTSLO)
	seti(&t.TTFTFor, o.TTFTFor)
	seti(&t.MinTTFTCount, o.MinTTFTCount)
	if o.Disabled != nil {
		t.Disabled = o.Disabled
	}
	return t
}

func (t Thresholds) validate() error {
	var errs []error
	check := func(ok bool, field string, v any, want string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s %v: %s", field, v, want))
		}
	}
	check(t.SLA >= 0, "sla", t.SLA, "must not be negative")
	check(t.TTFTSLO >= 0, "ttft_slo", t.TTFTSLO, "must not be negative")
	check(t.SLAFactor > 0, "sla_factor", t.SLAFactor, "must be positive")
	check(t.P99Factor > 1, "p99_factor", t.P99Factor, "must be over 1")
	check(t.StdDevJump > 0, "stddev_jump", t.StdDevJump, "must be positive")
	check(t.MinStdDev >= 0, "min_stddev", t.MinStdDev, "must not be negative")
	check(t.SlopeK > 0, "slope_k", t.SlopeK, "must be positive")
	check(t.SlopeMinEffect >= 0, "slope_min_effect", t.SlopeMinEffect, "must not be negative")
	for _, c := range []struct {
		name string
		v    int
	}{
		{"mean_for", t.MeanFor}, {"p99_for", t.P99For}, {"baseline_windows", t.BaselineWindows},
		{"baseline_min", t.BaselineMin}, {"stddev_for", t.StdDevFor}, {"stddev_reference", t.StdDevReference},
		{"slope_for", t.SlopeFor}, {"slope_reference", t.SlopeReference}, {"slope_min_windows", t.SlopeMinWindows},
		{"min_count", t.MinCount}, {"hold_down", t.HoldDown}, {"adapt_after", t.AdaptAfter},
		{"ttft_for", t.TTFTFor}, {"min_ttft_count", t.MinTTFTCount},
	} {
		check(c.v >= 1, c.name, c.v, "must be at least 1")
	}
	check(t.BaselineMin <= t.BaselineWindows, "baseline_min", t.BaselineMin, "must not exceed baseline_windows")
	check(t.SlopeMinWindows >= 3, "slope_min_windows", t.SlopeMinWindows, "must be at least 3")
	for _, r := range t.Disabled {
		check(slices.Contains(ruleNames[:], r), "disabled", r, "is not a rule name")
	}
	return errors.Join(errs...)
}

// resolved returns the defaults completed and the overrides keyed by
// sanitised model name, as window statistics name models, or the first
// invalid setting.
func (c Config) resolved() (Thresholds, map[string]Thresholds, error) {
	def := DefaultThresholds().over(c.Defaults)
	if err := def.validate(); err != nil {
		return def, nil, fmt.Errorf("alerting: defaults: %w", err)
	}
	models := make(map[string]Thresholds, len(c.Models))
	from := make(map[string]string, len(c.Models)) // sanitised name → the key it came from
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		t := def.over(c.Models[name])
		if err := t.validate(); err != nil {
			return def, nil, fmt.Errorf("alerting: model %q: %w", name, err)
		}
		key := metricset.SanitizeLabelValue(name)
		if other, ok := from[key]; ok {
			// Both would judge the same series, one of them at random.
			return def, nil, fmt.Errorf("alerting: models %q and %q: both name the model %q once sanitised as a label; keep one", other, name, key)
		}
		from[key] = name
		models[key] = t
	}
	return def, models, nil
}

func (t Thresholds) disabled(rule string) bool { return slices.Contains(t.Disabled, rule) }

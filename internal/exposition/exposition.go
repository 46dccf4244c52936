// Package exposition reads the Prometheus text exposition format back: what
// the sidecar's /metrics serves, parsed by the tests that check it. It is
// strict (a line it cannot read is an error), so a malformed page fails the
// test that reads it.
package exposition

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sample is one series' line.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
	Series string // the series as written: name{labels}, without value or timestamp
}

// Page is a parsed exposition.
type Page struct {
	Samples []Sample
	Types   map[string]string // family → counter, gauge, histogram, …
	Help    map[string]string // family → help text
}

// Parse reads a text exposition; the error names the line it could not read.
func Parse(text string) (Page, error) {
	p := Page{Types: map[string]string{}, Help: map[string]string{}}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "#"); ok {
			f := strings.Fields(c)
			if len(f) >= 3 && f[0] == "TYPE" {
				p.Types[f[1]] = f[2]
			}
			if len(f) >= 2 && f[0] == "HELP" {
				// The text after the name, as written (it may hold spaces).
				rest := strings.TrimLeft(strings.TrimSpace(c)[len("HELP"):], " \t")
				p.Help[f[1]] = strings.TrimLeft(rest[len(f[1]):], " \t")
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return p, fmt.Errorf("exposition line %d %q: %w", n+1, line, err)
		}
		p.Samples = append(p.Samples, s)
	}
	return p, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, errors.New("no metric name")
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		rest := line[1:]
		for {
			rest = strings.TrimLeft(rest, " ")
			if rest == "" {
				return s, errors.New("unterminated labels")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return s, errors.New("bad label")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return s, errors.New("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					c = rest[0]
					if c == 'n' {
						c = '\n'
					}
					rest = rest[1:]
				}
				val.WriteByte(c)
			}
			if _, dup := s.Labels[key]; dup {
				return s, fmt.Errorf("label %s twice", key)
			}
			s.Labels[key] = val.String()
			rest = strings.TrimPrefix(strings.TrimLeft(rest, " "), ",")
		}
		s.Series = s.Name + line[:len(line)-len(rest)]
		line = rest
	} else {
		s.Series = s.Name
	}
	f := strings.Fields(line)
	if len(f) < 1 || len(f) > 2 {
		return s, errors.New("want a value and at most a timestamp after the series")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("value: %w", err)
	}
	if len(f) == 2 {
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			return s, fmt.Errorf("timestamp: %w", err)
		}
	}
	s.Value = v
	return s, nil
}

// Find returns the samples named name whose labels include match.
func (p Page) Find(name string, match map[string]string) []Sample {
	var out []Sample
next:
	for _, s := range p.Samples {
		if s.Name != name {
			continue
		}
		for k, v := range match {
			if s.Labels[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// Sum adds the values of the samples Find returns; ok is false when none.
func (p Page) Sum(name string, match map[string]string) (total float64, ok bool) {
	for _, s := range p.Find(name, match) {
		total += s.Value
		ok = true
	}
	return total, ok
}

// Value returns the sample whose series is written exactly so
// (`name{a="1",b="2"}`, labels in the page's order).
func (p Page) Value(series string) (float64, bool) {
	for _, s := range p.Samples {
		if s.Series == series {
			return s.Value, true
		}
	}
	return 0, false
}

// Series maps the series written with the prefix to their values.
func (p Page) Series(prefix string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range p.Samples {
		if strings.HasPrefix(s.Series, prefix) {
			out[s.Series] = s.Value
		}
	}
	return out
}

// Package exposition reads the Prometheus text exposition format back: what
// the sidecar's /metrics serves, parsed by the tests that check it. It is
// strict (a line it cannot read is an error), so a malformed page fails the
// test that reads it.
package exposition

import (
	"errors"
	"fmt"
	"regexp"
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
// It refuses what Prometheus's text parser refuses: bad metric or label
// names, escapes other than \\, \" and \n, and a second # HELP or # TYPE
// for a name, or a # TYPE after samples of that name.
func Parse(text string) (Page, error) {
	p := Page{Types: map[string]string{}, Help: map[string]string{}}
	sampled := map[string]bool{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		bad := func(err error) error { return fmt.Errorf("exposition line %d %q: %w", n+1, line, err) }
		if c, ok := strings.CutPrefix(line, "#"); ok {
			f := strings.Fields(c)
			if len(f) >= 3 && f[0] == "TYPE" {
				if _, dup := p.Types[f[1]]; dup || sampled[f[1]] {
					return p, bad(fmt.Errorf("second TYPE for %s, or TYPE after its samples", f[1]))
				}
				p.Types[f[1]] = f[2]
			}
			if len(f) >= 2 && f[0] == "HELP" {
				if _, dup := p.Help[f[1]]; dup {
					return p, bad(fmt.Errorf("second HELP for %s", f[1]))
				}
				// The text after the name, as written (it may hold spaces).
				rest := strings.TrimLeft(strings.TrimSpace(c)[len("HELP"):], " \t")
				help, err := unescape(strings.TrimLeft(rest[len(f[1]):], " \t"), false)
				if err != nil {
					return p, bad(err)
				}
				p.Help[f[1]] = help
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return p, bad(err)
		}
		sampled[s.Name] = true
		p.Samples = append(p.Samples, s)
	}
	return p, nil
}

// metricName and labelName are the names the text format admits.
var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// unescape undoes the format's escapes: \\ and \n, and \" in a label value.
func unescape(v string, quote bool) (string, error) {
	if !strings.Contains(v, `\`) {
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' {
			if i++; i == len(v) {
				return "", errors.New("escape at the end")
			}
			switch c = v[i]; {
			case c == 'n':
				c = '\n'
			case c == '\\', c == '"' && quote:
			default:
				return "", fmt.Errorf("invalid escape sequence \\%c", c)
			}
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, errors.New("no metric name")
	}
	s.Name, line = line[:i], line[i:]
	if !metricName.MatchString(s.Name) {
		return s, fmt.Errorf("metric name %q", s.Name)
	}
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
			if !labelName.MatchString(key) {
				return s, fmt.Errorf("label name %q", key)
			}
			rest = rest[eq+2:]
			end := -1
			for j := 0; j < len(rest); j++ {
				if rest[j] == '\\' {
					j++
				} else if rest[j] == '"' {
					end = j
					break
				}
			}
			if end < 0 {
				return s, errors.New("unterminated label value")
			}
			val, err := unescape(rest[:end], true)
			if err != nil {
				return s, fmt.Errorf("label %s: %w", key, err)
			}
			rest = rest[end+1:]
			if _, dup := s.Labels[key]; dup {
				return s, fmt.Errorf("label %s twice", key)
			}
			s.Labels[key] = val
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

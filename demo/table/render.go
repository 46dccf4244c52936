package table

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// Render formats the last complete second before now: calls that completed
// in [now-1s, now) truncated to whole seconds, one row per model, followed
// by the sections.
func (t *Table) Render(now time.Time) string {
	from := now.Truncate(time.Second).Add(-time.Second)
	header, rows, sections := t.snapshot(from.Unix())

	var b strings.Builder
	fmt.Fprintf(&b, "calls completed %s–%s (ms; phases and server stages are means)\n",
		from.Format("15:04:05"), from.Add(time.Second).Format("15:04:05"))
	if len(rows) == 0 {
		b.WriteString("no calls\n")
	} else {
		writeAligned(&b, append([][]string{header}, rows...))
	}
	for _, s := range sections {
		lines := s.f()
		fmt.Fprintf(&b, "\n%s:\n", s.name)
		for _, l := range lines {
			b.WriteString("  " + l + "\n")
		}
	}
	return b.String()
}

// snapshot builds the header and rows for second sec under the lock.
func (t *Table) snapshot(sec int64) (header []string, rows [][]string, sections []section) {
	t.mu.Lock()
	defer t.mu.Unlock()
	header = []string{"MODEL", "QPS", "ERR", "P50", "P99"}
	for _, p := range record.Phases {
		header = append(header, strings.ToUpper(p))
	}
	for _, s := range t.stages {
		header = append(header, strings.ToUpper(s))
	}
	if t.llm {
		header = append(header, "TTFT50", "TTFT99", "ITL50", "ITL99")
	}

	names := make([]string, 0, len(t.models))
	for name := range t.models {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b := &t.models[name][int(sec%keepSeconds+keepSeconds)%keepSeconds]
		if b.sec != sec || b.count == 0 {
			continue
		}
		sorted := slices.Clone(b.totals)
		slices.Sort(sorted)
		row := []string{name, strconv.Itoa(b.count), strconv.Itoa(b.errors),
			ms(percentile(sorted, 0.50), true), ms(percentile(sorted, 0.99), true)}
		for i := range record.Phases {
			row = append(row, mean(b.phaseSum[i], b.phaseN[i]))
		}
		for _, s := range t.stages {
			row = append(row, mean(b.stageSum[s], b.stageN[s]))
		}
		if t.llm {
			ttft, itl := slices.Clone(b.ttft), slices.Clone(b.itl)
			slices.Sort(ttft)
			slices.Sort(itl)
			row = append(row, ms(percentile(ttft, 0.50), len(ttft) > 0), ms(percentile(ttft, 0.99), len(ttft) > 0),
				ms(percentile(itl, 0.50), len(itl) > 0), ms(percentile(itl, 0.99), len(itl) > 0))
		}
		rows = append(rows, row)
	}
	return header, rows, slices.Clone(t.sections)
}

func mean(sum time.Duration, n int) string {
	if n == 0 {
		return ms(0, false)
	}
	return ms(sum/time.Duration(n), true)
}

// ms formats a duration in milliseconds with two decimals, "-" if unknown.
func ms(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// writeAligned writes rows as columns two spaces apart: the first column
// left-aligned, the numbers right-aligned.
func writeAligned(b *strings.Builder, rows [][]string) {
	var width []int
	for _, r := range rows {
		for i, cell := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(cell)))
		}
	}
	for _, r := range rows {
		var line strings.Builder
		for i, cell := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(cell)))
			switch {
			case i == 0:
				line.WriteString(cell + pad)
			default:
				line.WriteString("  " + pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

package baseline

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxRows bounds what the CSV readers accept (about 19 years of minutes).
const maxRows = 10_000_000

// ParseTime reads a timestamp as NAB writes it ("2006-01-02 15:04:05",
// UTC), RFC 3339, or Unix seconds.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.ParseInLocation(time.DateTime, s, time.UTC); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < 1e11 {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("timestamp %q: want \"YYYY-MM-DD HH:MM:SS\", RFC 3339 or Unix seconds", s)
}

// ReadSeries reads two-column CSV, timestamp then a number (NAB's
// "timestamp,value", or "timestamp,qps"), with an optional header line.
// Rows must be in time order. Values are returned in Point.V.
func ReadSeries(r io.Reader) ([]Point, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	var pts []Point
	line := 0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line++
		if err != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, err)
		}
		if len(rec) < 2 {
			return nil, fmt.Errorf("csv line %d: %d fields, want timestamp,value", line, len(rec))
		}
		if line == 1 {
			rec[0] = strings.TrimPrefix(rec[0], "\ufeff") // a byte-order mark, as spreadsheets save CSV
		}
		t, terr := ParseTime(rec[0])
		v, verr := strconv.ParseFloat(strings.TrimSpace(rec[1]), 64)
		if line == 1 && terr != nil {
			// A header. Not a first row whose time parses and whose value
			// does not: that is a bad row, reported, not a row lost.
			continue
		}
		if terr != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, terr)
		}
		if verr != nil {
			return nil, fmt.Errorf("csv line %d: value %q is not a number", line, rec[1])
		}
		if n := len(pts); n > 0 && !t.After(pts[n-1].T) {
			return nil, fmt.Errorf("csv line %d: timestamp %s is not after the previous row's", line, rec[0])
		}
		if len(pts) >= maxRows {
			return nil, fmt.Errorf("csv line %d: more than %d rows", line, maxRows)
		}
		pts = append(pts, Point{T: t, V: v, Q: math.NaN()})
	}
	if len(pts) == 0 {
		return nil, errors.New("csv: no rows")
	}
	return pts, nil
}

// JoinLoad sets each point's Q from load (read by ReadSeries) at the same
// timestamp; points without a load row keep NaN. It returns how many
// points got a load.
func JoinLoad(pts, load []Point) int {
	j, n := 0, 0
	for i := range pts {
		for j < len(load) && load[j].T.Before(pts[i].T) {
			j++
		}
		if j < len(load) && load[j].T.Equal(pts[i].T) {
			pts[i].Q = load[j].V
			n++
		}
	}
	return n
}

// WriteHeader writes the header of WriteOutput's rows.
func WriteHeader(w io.Writer) error {
	_, err := io.WriteString(w, "timestamp,value,expected,lower,upper,anomaly_score,alert,kind\n")
	return err
}

// WriteOutput writes one detector verdict as a CSV row (timestamps in
// NAB's format, UTC).
func WriteOutput(w io.Writer, o Output) error {
	a := 0
	if o.Alert {
		a = 1
	}
	f := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	_, err := fmt.Fprintf(w, "%s,%s,%s,%s,%s,%.3f,%d,%s\n", o.T.UTC().Format(time.DateTime),
		f(o.Value), f(o.Expected), f(o.Lower), f(o.Upper), o.Score, a, o.KindText())
	return err
}

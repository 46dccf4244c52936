package exposition

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	page := strings.Join([]string{
		"# HELP inferwatch_requests_total Calls seen, by route and code.",
		"# TYPE inferwatch_requests_total counter",
		"#  HELP  inferwatch_up   Whether the upstream answers.",
		`inferwatch_requests_total{route="grpc",code="OK"} 12`,
		`inferwatch_requests_total{route="http",code="200"} 3 1700000000000`,
		`inferwatch_up 1`,
		`odd{path="a\"b\\c\nd",empty=""} -Inf`,
		`spaced{ a="1" , b="2" } NaN`,
		"",
	}, "\n")
	p, err := Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	if p.Types["inferwatch_requests_total"] != "counter" || p.Help["inferwatch_requests_total"] != "Calls seen, by route and code." || p.Help["inferwatch_up"] != "Whether the upstream answers." {
		t.Errorf("types %v, help %v", p.Types, p.Help)
	}
	if len(p.Samples) != 5 {
		t.Fatalf("%d samples, want 5: %+v", len(p.Samples), p.Samples)
	}
	if got := p.Samples[3].Labels; !reflect.DeepEqual(got, map[string]string{"path": "a\"b\\c\nd", "empty": ""}) {
		t.Errorf("escaped labels %q", got)
	}
	if !math.IsInf(p.Samples[3].Value, -1) || !math.IsNaN(p.Samples[4].Value) || p.Samples[4].Labels["b"] != "2" {
		t.Errorf("special values: %+v %+v", p.Samples[3], p.Samples[4])
	}
	if v, ok := p.Value(`inferwatch_requests_total{route="http",code="200"}`); !ok || v != 3 {
		t.Errorf("Value by series = %v, %v", v, ok)
	}
	if v, ok := p.Value("inferwatch_up"); !ok || v != 1 {
		t.Errorf("Value without labels = %v, %v", v, ok)
	}
	if _, ok := p.Value("inferwatch_down"); ok {
		t.Error("Value of an absent series reported present")
	}
	if v, ok := p.Sum("inferwatch_requests_total", nil); !ok || v != 15 {
		t.Errorf("Sum = %v, %v", v, ok)
	}
	if v, ok := p.Sum("inferwatch_requests_total", map[string]string{"route": "grpc"}); !ok || v != 12 {
		t.Errorf("Sum by label = %v, %v", v, ok)
	}
	if _, ok := p.Sum("inferwatch_requests_total", map[string]string{"route": "h3"}); ok {
		t.Error("Sum with no match reported ok")
	}
	if got := p.Series("inferwatch_"); len(got) != 3 {
		t.Errorf("Series(inferwatch_) = %v", got)
	}
}

func TestParseRejects(t *testing.T) {
	for _, line := range []string{
		`{a="1"} 1`,
		`m{a="1" 1`,
		`m{a=1} 1`,
		`m{a="1} 1`,
		`m{a="1",a="2"} 1`,
		`m`,
		`m one`,
		`m 1 now`,
		`m 1 2 3`,
	} {
		if _, err := Parse("m_ok 1\n" + line + "\n"); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: err %v, want one naming line 2", line, err)
		}
	}
}

// TestParseRejectsWhatPrometheusRejects: lines and pages Prometheus's own
// text parser refuses (a scrape of them fails whole) fail here too.
func TestParseRejectsWhatPrometheusRejects(t *testing.T) {
	for _, page := range []string{
		`m{a="x\ty"} 1`,       // \t is not an escape of the format (Go's %q writes it)
		`m{a="x\u00e9"} 1`,    // nor is \u
		`m{a-b="1"} 1`,        // label name
		`m{1a="1"} 1`,         // label name
		`m-x 1`,               // metric name
		"# HELP m a\\tb\nm 1", // HELP escapes are \\ and \n only
		"# TYPE m counter\n# TYPE m counter\nm 1",
		"# HELP m a\n# HELP m b\nm 1",
		"m 1\n# TYPE m counter",
	} {
		if _, err := Parse("m_ok 1\n" + page + "\n"); err == nil {
			t.Errorf("%q: accepted", page)
		}
	}
	// What the format allows stays allowed.
	if _, err := Parse("# HELP m a \\\\ b\\n c\n# TYPE m counter\nm{a_1=\"x\\\\y\\\"z\\n\"} 1\nm:rate1m 2\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"); err != nil {
		t.Errorf("valid page refused: %v", err)
	}
}

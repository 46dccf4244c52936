package metricset

import (
	"strings"
	"testing"
)

func TestSanitizeLabelValue(t *testing.T) {
	long := strings.Repeat("a", 100)
	tests := []struct {
		in, want string
	}{
		{"resnet50", "resnet50"},
		{"", "unknown"},
		{"my model", "my_model"},
		{`a"b\c`, "a_b_c"},
		{"line\nbreak", "line_break"},
		{"/v2/models/x/infer", "/v2/models/x/infer"},
		{"ok-._:/", "ok-._:/"},
		{"modèle", "mod_le"}, // one '_' per rune, not per byte
		{"\xff\xfe", "__"},   // invalid UTF-8 bytes are runes of their own
		{long, long[:64]},
		{long[:64], long[:64]},
		{"é" + long, "_" + long[:63]},
		{"{x=\"1\"}", "_x__1__"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := SanitizeLabelValue(tt.in)
			if got != tt.want {
				t.Errorf("SanitizeLabelValue(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if SanitizeLabelValue(got) != got {
				t.Errorf("not idempotent on %q", got)
			}
		})
	}
}

func TestSanitizeCleanDoesNotAllocate(t *testing.T) {
	v := strings.Clone("resnet50-v1.5")
	if n := testing.AllocsPerRun(100, func() { _ = SanitizeLabelValue(v) }); n != 0 {
		t.Errorf("%v allocations per clean value, want 0", n)
	}
}

func TestFormatExtraLabels(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		want    string
		wantErr string
	}{
		{"none", nil, "", ""},
		{"sorted", map[string]string{"pod": "p-1", "namespace": "ml"}, `namespace="ml",pod="p-1"`, ""},
		{"escaped", map[string]string{"note": `a"b`}, `note="a\"b"`, ""},
		{"bad name", map[string]string{"1pod": "x"}, "", "not a valid"},
		{"dash in name", map[string]string{"pod-name": "x"}, "", "not a valid"},
		{"reserved prefix", map[string]string{"__name__": "x"}, "", "reserved"},
		{"clashes with a metric label", map[string]string{"model": "x"}, "", "already a label"},
		{"empty value", map[string]string{"pod": ""}, "", "empty value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := formatExtraLabels(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("= %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

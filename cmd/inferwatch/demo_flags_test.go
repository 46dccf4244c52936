package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestDemoLoadFlagsChecked: a rate the load generator cannot use is refused
// at once, naming the flag. Without --duration, --qps 0 used to start the
// server, the sidecar and the table, send nothing, and wait for Ctrl-C,
// only then failing with "load: loadgen: QPS 0 must be a positive number".
func TestDemoLoadFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--qps", "0"}, "--qps"},
		{[]string{"--qps", "-5"}, "--qps"},
		{[]string{"--llm-qps", "-1"}, "--llm-qps"},
		{[]string{"--duration", "-10s"}, "--duration"}, // ran until Ctrl-C
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				done <- runDemo(append([]string{"--admin-listen", "127.0.0.1:0"}, tc.args...), io.Discard, io.Discard)
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("demo %v: err %v, want one naming %s", tc.args, err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("demo %v: still running after 5s, want an error naming %s at once", tc.args, tc.want)
			}
		})
	}
}

// TestLoadFlagsChecked: `inferwatch load` with an unusable flag names it
// and prints no summary of a run that never happened.
func TestLoadFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--qps", "0"}, "--qps"},
		{[]string{"--protocol", "grpcs"}, "--protocol"},
		{[]string{"--model", "resnet"}, "--model"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--format", "yaml"}, "--format"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := runLoad(append([]string{"--addr", "127.0.0.1:1", "--duration", "1s"}, tc.args...), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("load %v: err %v, want one naming %s", tc.args, err, tc.want)
			}
			if out.Len() > 0 {
				t.Errorf("load %v printed a summary: %q", tc.args, out.String())
			}
		})
	}
}

package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, "|") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) Repeatable()        {}

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{
		"push-interval":           "INFERWATCH_PUSH_INTERVAL",
		"config":                  "INFERWATCH_CONFIG",
		"trace-target-per-second": "INFERWATCH_TRACE_TARGET_PER_SECOND",
	} {
		if got := EnvName(flagName); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string   // the flags' values after ApplyEnv, "name=value ..."
		wantErr []string // substrings of the error, none for no error
	}{
		{name: "defaults", want: "interval=1s listen=:1 off=false pid= sla="},
		{name: "variables fill what the command line left",
			env:  map[string]string{"INFERWATCH_INTERVAL": "5s", "INFERWATCH_LISTEN": ":9", "INFERWATCH_OFF": "true"},
			want: "interval=5s listen=:9 off=true pid= sla="},
		{name: "the command line wins", args: []string{"--interval=2s", "--sla=a=1ms"},
			env:  map[string]string{"INFERWATCH_INTERVAL": "5s", "INFERWATCH_SLA": "b=2ms"},
			want: "interval=2s listen=:1 off=false pid= sla=a=1ms"},
		{name: "repeatable flags split on commas", env: map[string]string{"INFERWATCH_SLA": "a=1ms, b=2ms", "INFERWATCH_PID": "7"},
			want: "interval=1s listen=:1 off=false pid=7 sla=a=1ms|b=2ms"},
		{name: "an empty variable is unset", env: map[string]string{"INFERWATCH_LISTEN": ""},
			want: "interval=1s listen=:1 off=false pid= sla="},
		{name: "other prefixes and unknown names are ignored", env: map[string]string{"LISTEN": ":2", "INFERWATCH_NOPE": "x", "OTHER_INTERVAL": "x"},
			want: "interval=1s listen=:1 off=false pid= sla="},
		{name: "a bad duration names its variable", env: map[string]string{"INFERWATCH_INTERVAL": "soon"},
			wantErr: []string{`INFERWATCH_INTERVAL="soon" (--interval): `}},
		{name: "a bad bool names its variable", env: map[string]string{"INFERWATCH_OFF": "yes please"},
			wantErr: []string{`INFERWATCH_OFF="yes please" (--off)`}},
		{name: "every bad variable is reported", env: map[string]string{"INFERWATCH_OFF": "2", "INFERWATCH_INTERVAL": "-"},
			wantErr: []string{`INFERWATCH_OFF="2"`, `INFERWATCH_INTERVAL="-"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			interval := fs.Duration("interval", time.Second, "")
			listen := fs.String("listen", ":1", "")
			off := fs.Bool("off", false, "")
			var pid, sla repeated
			fs.Var(&pid, "pid", "")
			fs.Var(&sla, "sla", "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := ApplyEnv(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if len(tt.wantErr) > 0 {
				for _, w := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("error %v, want one containing %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := "interval=" + interval.String() + " listen=" + *listen + " off=" + map[bool]string{true: "true", false: "false"}[*off] +
				" pid=" + pid.String() + " sla=" + sla.String()
			if got != tt.want {
				t.Errorf("got %s\nwant %s", got, tt.want)
			}
		})
	}
}

package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// EnvPrefix starts the environment variable of every command-line flag.
//
// Precedence, highest first: a flag given on the command line, its
// INFERWATCH_* variable, the YAML file (--config), the built-in default.
// The OpenTelemetry SDK's OTEL_* variables are not the binary's own flags
// but the standard defaults any OpenTelemetry SDK reads, so they sit below
// the YAML file, just above the built-in defaults (otelenv.go); an
// INFERWATCH_OTLP_ENDPOINT, being --otlp-endpoint, beats both.
const EnvPrefix = "INFERWATCH_"

// EnvName returns a flag's variable: EnvPrefix and the flag's name upper
// case with '-' as '_' (--push-interval: INFERWATCH_PUSH_INTERVAL).
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// RepeatableFlag is a flag.Value given once per value (--sla a=1s --sla
// b=2s). Its variable holds the values separated by commas.
type RepeatableFlag interface {
	flag.Value
	Repeatable()
}

// ApplyEnv sets each flag of fs that the command line did not give from its
// variable (EnvName), when that is set and not empty; lookup is
// os.LookupEnv outside tests. Call it after fs.Parse. A flag set this way
// counts as given (fs.Visit sees it), so it overrides the YAML file as a
// flag does. A value the flag rejects is an error naming the variable.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		values := []string{v}
		if _, ok := f.Value.(RepeatableFlag); ok {
			values = strings.Split(v, ",")
			for i := range values {
				values[i] = strings.TrimSpace(values[i])
			}
		}
		for _, x := range values {
			if err := fs.Set(f.Name, x); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q (--%s): %w", name, v, f.Name, err))
				return
			}
		}
	})
	return errors.Join(errs...)
}

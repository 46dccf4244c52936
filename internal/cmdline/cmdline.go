// Package cmdline holds what the command lines of inferwatch's binaries
// (inferwatch, inferwatch-extproc, inferwatch-inject) share: flags read
// from INFERWATCH_* variables too, repeated name=value flags, and the log
// handler their --log-level picks.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/inferwatch/inferwatch/config"
)

// envHelp ends every command's -h output.
const envHelp = `
Every flag can also be given as an environment variable: INFERWATCH_ and the
flag's name in upper case with '-' as '_' (--push-interval: INFERWATCH_PUSH_INTERVAL;
repeatable flags take comma-separated values). A flag on the command line wins
over its variable, which wins over the YAML file (--config), which wins over the
default.
`

// Parse parses a command's flags, then fills the ones not given from their
// INFERWATCH_* variables (config.ApplyEnv).
func Parse(fs *flag.FlagSet, args []string) error {
	return ParseUsage(fs, args, "Usage of inferwatch "+fs.Name()+":\n")
}

// ParseUsage is Parse for a command whose usage has more to say than its
// flags: head comes before them, the INFERWATCH_* note after.
func ParseUsage(fs *flag.FlagSet, args []string, head string) error {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), envHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return config.ApplyEnv(fs, os.LookupEnv)
}

// Exit ends a command's process for the error its run returned: nothing
// for nil, status 0 for -h/--help (flag.ErrHelp: the usage is printed, and
// asking for it is no failure), else the error after name and status 1.
func Exit(name string, err error) {
	switch {
	case err == nil:
		return
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(1)
}

// Logger is a text logger at level (debug, info, warn or error; anything
// else is info).
func Logger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// Labels collects a repeated name=value flag.
type Labels map[string]string

func (l Labels) String() string { return fmt.Sprint(map[string]string(l)) }

// Set adds one name=value.
func (l Labels) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, got %q", v)
	}
	l[k] = val
	return nil
}

// Repeatable marks Labels as given once per pair, so that its INFERWATCH_*
// variable holds the pairs comma-separated (config.RepeatableFlag); without
// it "a=1,b=2" was one pair, a with the value "1,b=2".
func (l Labels) Repeatable() {}

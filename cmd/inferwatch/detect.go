package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/baseline"
)

const detectUsage = `usage: inferwatch detect [flags] SERIES.csv
       inferwatch detect [flags] --dir DIR --out-dir OUT

Runs the baseline and its detectors in streaming order (no look-ahead) over a
NAB-format series (timestamp,value) and writes
timestamp,value,expected,lower,upper,anomaly_score,alert,kind.
With --dir, every *.csv in DIR but *.load.csv is run, NAME.load.csv beside it
is its load, and OUT/NAME.csv is written.
`

// runDetect is the detect command.
func runDetect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	load := fs.String("load", "", "load CSV (timestamp,qps) for SERIES.csv")
	out := fs.String("out", "-", "output CSV for SERIES.csv ('-': stdout)")
	dir := fs.String("dir", "", "run every series in this folder")
	outDir := fs.String("out-dir", "", "with --dir: where the outputs go")
	var o baseline.DetectorOptions
	fs.DurationVar(&o.RefitEvery, "refit-every", 7*24*time.Hour, "refit schedule once the model is seasonal")
	fs.Float64Var(&o.MinExcess, "min-excess", 0.2, "smallest relative excess that can be an incident")
	fs.Float64Var(&o.Band, "band", 3, "prediction interval half-width, in residual scales")
	if err := cmdline.ParseUsage(fs, args, detectUsage); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	if *dir != "" {
		if *outDir == "" || fs.NArg() != 0 {
			fs.Usage()
			return errors.New("detect: --dir needs --out-dir and no SERIES argument")
		}
		return detectDir(*dir, *outDir, o, stderr)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("detect: one SERIES.csv expected")
	}
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("detect: %w", err)
		}
		defer f.Close()
		w = f
	}
	if err := detectFile(fs.Arg(0), *load, w, o); err != nil {
		return err
	}
	if f, ok := w.(*os.File); ok && f != os.Stdout {
		return f.Close()
	}
	return nil
}

func detectDir(dir, outDir string, o baseline.DetectorOptions, log io.Writer) error {
	names, err := filepath.Glob(filepath.Join(dir, "*.csv"))
	if err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	sort.Strings(names)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, ".load.csv") {
			continue
		}
		load := strings.TrimSuffix(name, ".csv") + ".load.csv"
		if _, err := os.Stat(load); err != nil {
			load = ""
		}
		start := time.Now()
		f, err := os.Create(filepath.Join(outDir, filepath.Base(name)))
		if err != nil {
			return fmt.Errorf("detect: %w", err)
		}
		err = detectFile(name, load, f, o)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "detect: %s in %v\n", filepath.Base(name), time.Since(start).Round(time.Millisecond))
		n++
	}
	if n == 0 {
		return fmt.Errorf("detect: no series in %s", dir)
	}
	return nil
}

// detectFile runs one series (and its load, if named) into w.
func detectFile(series, load string, w io.Writer, o baseline.DetectorOptions) error {
	pts, err := readSeriesFile(series)
	if err != nil {
		return err
	}
	if load != "" {
		lp, err := readSeriesFile(load)
		if err != nil {
			return err
		}
		if baseline.JoinLoad(pts, lp) == 0 {
			return fmt.Errorf("detect: %s: no timestamp matches %s", load, series)
		}
	}
	d, err := baseline.NewDetector(o)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := baseline.WriteHeader(bw); err != nil {
		return fmt.Errorf("detect: write: %w", err)
	}
	for _, p := range pts {
		if err := baseline.WriteOutput(bw, d.Step(p)); err != nil {
			return fmt.Errorf("detect: write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("detect: write: %w", err)
	}
	return nil
}

func readSeriesFile(name string) ([]baseline.Point, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("detect: %w", err)
	}
	defer f.Close()
	pts, err := baseline.ReadSeries(f)
	if err != nil {
		return nil, fmt.Errorf("detect: %s: %w", name, err)
	}
	return pts, nil
}

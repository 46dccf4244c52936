package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/diagnosis"
	"github.com/inferwatch/inferwatch/internal/cmdline"
)

// runDiagnose asks a running sidecar's /debug/diagnose for a report and
// prints it; with --llm-url an OpenAI-compatible endpoint words it.
func runDiagnose(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	admin := fs.String("admin", "http://"+config.DefaultAdminListen, "the sidecar's admin URL")
	from := fs.String("from", "", "start of the range: RFC 3339, or a duration ago (5m); default 1m ago")
	to := fs.String("to", "", "end of the range: RFC 3339, or a duration ago; default now")
	alert := fs.String("alert", "", "diagnose this alert's windows (an alertname) instead of a range")
	model := fs.String("model", "", "the model; default the one with the strongest anomaly")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	llmURL := fs.String("llm-url", "", "OpenAI-compatible endpoint (…/v1) that words the evidence as a paragraph")
	llmModel := fs.String("llm-model", "", "the endpoint's model name")
	timeout := fs.Duration("timeout", 20*time.Second, "for the sidecar and the LLM each")
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", *timeout)
	}
	rep, err := fetchDiagnosis(*admin, *model, *from, *to, *alert, *timeout)
	if err != nil {
		return err
	}
	if *llmURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		p, err := diagnosis.LLM{URL: *llmURL, Model: *llmModel, APIKey: os.Getenv("OPENAI_API_KEY")}.Prose(ctx, rep)
		cancel()
		if err != nil {
			fmt.Fprintf(errOut, "inferwatch diagnose: no prose: %v\n", err)
		} else {
			rep.Prose = p
		}
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(out)
}

func fetchDiagnosis(admin, model, from, to, alert string, timeout time.Duration) (diagnosis.Report, error) {
	q := url.Values{}
	for k, v := range map[string]string{"model": model, "from": from, "to": to, "alert": alert} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !strings.Contains(admin, "://") { // host:port, as --admin-listen has it
		admin = "http://" + admin
	}
	u := strings.TrimRight(admin, "/") + "/debug/diagnose?" + q.Encode()
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get(u)
	if err != nil {
		return diagnosis.Report{}, fmt.Errorf("diagnose: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return diagnosis.Report{}, fmt.Errorf("diagnose %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return diagnosis.Report{}, fmt.Errorf("diagnose: %s: %s", resp.Status, e.Error)
		}
		// Not the diagnosis API's JSON error: the admin server's own
		// refusal (403 to a peer off loopback, naming the fix) or a proxy's.
		msg := strings.TrimSpace(string(b[:min(len(b), 512)]))
		if msg == "" {
			return diagnosis.Report{}, fmt.Errorf("diagnose %s: %s", u, resp.Status)
		}
		return diagnosis.Report{}, fmt.Errorf("diagnose %s: %s: %s", u, resp.Status, msg)
	}
	var rep diagnosis.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return diagnosis.Report{}, fmt.Errorf("diagnose %s: report: %w", u, err)
	}
	return rep, nil
}

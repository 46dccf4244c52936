package main

import (
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestChartBaselineArgsAccepted: the baseline Deployment the Helm chart
// renders (deploy/helm's golden of its monitoring value set) runs flags the
// real `inferwatch baseline` accepts, with the values the chart was given.
func TestChartBaselineArgsAccepted(t *testing.T) {
	const golden = "../../deploy/helm/testdata/monitoring.yaml"
	raw, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, doc := range strings.Split(string(raw), "\n---") {
		var d struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string
							Args []string
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatalf("%s: %v", golden, err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if d.Kind == "Deployment" && c.Name == "baseline" {
				args = c.Args
			}
		}
	}
	if len(args) < 2 || args[0] != "baseline" {
		t.Fatalf("%s: no Deployment running inferwatch baseline (args %v)", golden, args)
	}
	o, every, once, err := baselineOptions(args[1:], io.Discard)
	if err != nil {
		t.Fatalf("inferwatch %s: %v", strings.Join(args, " "), err)
	}
	if o.QueryURL != "http://vmselect.monitoring:8481/select/0/prometheus" || o.ImportURL != "http://vminsert.monitoring:8480/insert/0/prometheus" ||
		!slices.Equal(o.Group, []string{"namespace"}) || every != time.Hour || once {
		t.Errorf("inferwatch %s: options %+v, every %v, once %v", strings.Join(args, " "), o, every, once)
	}
}

package sidecar

import (
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/history"
	"github.com/inferwatch/inferwatch/windowstats"
)

// compressed is the test's clock: history time runs speedup times faster
// than real time from epoch, as history.Options.Speedup maps it.
type compressed struct {
	epoch   time.Time
	speedup float64
}

// hours is the history time of real time t, in hours since epoch.
func (c compressed) hours(t time.Time) float64 {
	return t.Sub(c.epoch).Hours() * c.speedup
}

// seasonalLoad is the share of peak traffic at history hour hh: a daily
// cycle (low at 03:00, high at 15:00) times a factor that changes every
// half hour, as traffic does, so that load and time of day differ.
func seasonalLoad(hh float64) float64 {
	f := fnv.New32a()
	b := int64(hh * 2)
	f.Write([]byte{byte(b), byte(b >> 8)})
	jitter := 0.75 + 0.5*float64(f.Sum32()%1000)/1000
	d := math.Mod(hh, 24)
	return min(1, (0.3+0.7*math.Pow(0.5-0.5*math.Cos(2*math.Pi*(d-3)/24), 1.4))*jitter)
}

// The seasonal baseline through running sidecars. A sidecar starts with
// 45 hours of compressed history (a real file it loads; history time runs
// 1200× real time, a 500 ms window is ten minutes of history) and keeps
// recording its live windows: real calls through its proxy to a real
// upstream whose latency follows load. It switches to the seasonal band
// once the history spans two daily cycles. At 03:00 on day three traffic
// surges from the night's low to the afternoon's peak for an hour, and
// latency with it: a second sidecar that keeps the trailing median fires
// P99OverBaseline on that load-proportional rise, the seasonal one does
// not; a real +120% at ordinary load an hour later (two hours of it) fires both.
//
// The history's P99 noise (15%, as a P99 of few calls has) makes the band
// wide enough that a loaded machine's scheduling stalls do not breach it.
func TestSidecarSeasonalBaselineIgnoresLoadRise(t *testing.T) {
	const (
		window  = 500 * time.Millisecond
		speedup = 1200
		peakQPS = 160
		base    = 0.2 // seconds at no load: long enough that scheduling stalls are small beside it
	)
	// The preloaded history ends now: its epoch is 45 history hours back.
	preHours := 45.0
	now := time.Now()
	clk := compressed{epoch: now.Add(-time.Duration(preHours / speedup * float64(time.Hour))), speedup: speedup}
	path := filepath.Join(t.TempDir(), "history.json")
	h, err := history.New(history.Options{Path: path, Speedup: speedup})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for ws := clk.epoch; ws.Add(window).Before(now); ws = ws.Add(window) {
		u := seasonalLoad(clk.hours(ws))
		w := windowstats.WindowView{Start: ws, Seconds: window.Seconds(), Count: int64(peakQPS * u * window.Seconds()), QPS: peakQPS * u,
			P99: base * 1.02 * (1 + u*u) * math.Exp(0.15*rng.NormFloat64())}
		h.Baseline("m", "1", &w)
	}
	if k := h.ModelKind("m", "1"); k != "trailing" {
		t.Fatalf("preloaded history of %.0f h: model %q, want trailing", preHours, k)
	}
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}

	// The upstream: latency follows the load of the moment in history
	// time; the driver below sends that load.
	surge := func(hh float64) bool { return hh >= 51 && hh < 52 }      // 03:00-04:00 on day three
	regression := func(hh float64) bool { return hh >= 53 && hh < 55 } // +120%, two hours
	loadAt := func(hh float64) float64 {
		if surge(hh) {
			return 1
		}
		return seasonalLoad(hh)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/models/m/infer", func(w http.ResponseWriter, r *http.Request) {
		hh := clk.hours(time.Now())
		u := loadAt(hh)
		d := base * (1 + u*u)
		if regression(hh) {
			d *= 2.2
		}
		time.Sleep(time.Duration(d * float64(time.Second)))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model_name":"m","model_version":"1","outputs":[]}`)
	})
	ul, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	us := &http.Server{Handler: mux}
	go us.Serve(ul)
	t.Cleanup(func() { us.Close() })

	start := func(seasonal bool) *Sidecar {
		cfg := config.Default()
		cfg.AdminListen = "127.0.0.1:0"
		no := false
		cfg.Routes = []config.Route{{Name: "http", Protocol: "http", Listen: "127.0.0.1:0", Upstream: ul.Addr().String(),
			Readiness: "none", TritonStats: config.TritonStats{Enabled: &no}}}
		cfg.Host.GPUDisabled, cfg.Host.BPFDisabled = true, true
		cfg.Tracing.Disabled = true
		cfg.Alerting.MemoryLeak.Disabled = true
		cfg.Alerting.Window = config.Duration(window)
		cfg.Alerting.Rules.Defaults.MinCount = 10
		cfg.Alerting.Baseline = config.Baseline{Disabled: !seasonal, HistoryPath: path, Speedup: speedup}
		return runSidecar(t, cfg)
	}
	seasonal, trailing := start(true), start(false)
	if seasonal.history == nil || seasonal.history.Len("m", "1") == 0 {
		t.Fatal("the seasonal sidecar did not load the history file")
	}

	// Drive: every 10 ms, the calls the load of the moment asks for, to
	// both sidecars; watch P99OverBaseline and the model kind.
	client := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	var failed atomic.Int64
	call := func(addr string) {
		defer wg.Done()
		resp, err := client.Post("http://"+addr+"/v2/models/m/infer", "application/json", nil)
		if err != nil {
			failed.Add(1)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	addrs := []string{seasonal.RouteAddrs()[0].String(), trailing.RouteAddrs()[0].String()}
	type phase struct{ seasonal, trailing int } // windows' worth of firing polls
	fired := map[string]*phase{"before": {}, "surge": {}, "regression": {}}
	var firstKind string // the first model the loaded history fits
	var switchedAt float64
	owed := 0.0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		tm := <-tick.C
		hh := clk.hours(tm)
		if hh >= 55.5 {
			break
		}
		// What the load asks for since the last tick, however late this
		// one is: the QPS the sidecars see is the QPS the upstream's
		// latency follows.
		owed += peakQPS * loadAt(hh) * tm.Sub(last).Seconds()
		last = tm
		for ; owed >= 1; owed-- {
			for _, a := range addrs {
				wg.Add(1)
				go call(a)
			}
		}
		k := seasonal.history.ModelKind("m", "1")
		if firstKind == "" {
			firstKind = k
		}
		if switchedAt == 0 && k == "daily" {
			switchedAt = hh
		}
		name := "before"
		switch {
		case hh >= 51 && hh < 53: // the surge and the hour after it
			name = "surge"
		case hh >= 53:
			name = "regression"
		}
		for sc, n := range map[*Sidecar]*int{seasonal: &fired[name].seasonal, trailing: &fired[name].trailing} {
			for _, a := range sc.Engine().Alerts() {
				if a.Labels["alertname"] == alerting.RuleP99OverBaseline && a.State == alerting.StateFiring {
					if *n == 0 {
						t.Logf("%s at %.1f h, seasonal=%v: %v", name, hh, sc == seasonal, a.Annotations)
					}
					*n++
				}
			}
		}
	}
	wg.Wait()
	t.Logf("first model %q (history from %.0f h), daily from %.1f h; firing polls: before %+v, surge %+v, regression %+v; %d calls failed",
		firstKind, preHours, switchedAt, *fired["before"], *fired["surge"], *fired["regression"], failed.Load())
	if firstKind != "trailing" {
		t.Errorf("first model %q fitted from the loaded history, want trailing (under two cycles)", firstKind)
	}
	if switchedAt < 48 || switchedAt > 51 {
		t.Errorf("switched to the daily model at history hour %.1f, want after 48 (two cycles) and before the surge at 51", switchedAt)
	}
	if b, ok := seasonal.history.Band("m", "1"); !ok || !(b.Expected > 0) {
		t.Errorf("no band exported after the switch: %+v", b)
	}
	if fired["surge"].trailing == 0 {
		t.Fatal("the trailing median did not fire on the surge: the test shows nothing")
	}
	if fired["surge"].seasonal != 0 {
		t.Errorf("the seasonal baseline fired on a load-proportional rise (%d polls)", fired["surge"].seasonal)
	}
	if fired["regression"].seasonal == 0 {
		t.Error("the seasonal baseline did not fire on +120% at ordinary load")
	}
}

package sidecar

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/bpf"
	"github.com/inferwatch/inferwatch/gpu"
	"github.com/inferwatch/inferwatch/gpu/pids"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/tracing"
)

// host holds the GPU sampler and the eBPF probes, either of which may be
// absent (no driver, no privilege): then its facts are absent, not zero.
type host struct {
	gpu    *gpu.Sampler
	probes *bpf.Probes
}

// upstreamSpec says how to find the upstream's processes: the configured
// PIDs, else whoever listens on the first route's upstream port when that
// upstream is on this machine.
func (s *Sidecar) upstreamSpec() pids.Spec {
	h := s.cfg.Host
	spec := pids.Spec{PIDs: h.UpstreamPIDs, Cgroup: h.UpstreamCgroup, SocketUser: h.UpstreamBySocketUser}
	if len(spec.PIDs) == 0 && len(s.cfg.Routes) > 0 {
		hostName, port, err := net.SplitHostPort(s.cfg.Routes[0].Upstream)
		if ip := net.ParseIP(hostName); err == nil && (hostName == "localhost" || (ip != nil && ip.IsLoopback())) {
			spec.Port, _ = strconv.Atoi(port)
		}
	}
	return spec
}

// hostSource is what the tracer joins kept calls to; nil when the
// configuration turns both samplers off, so traces do not wait for nothing.
func (s *Sidecar) hostSource() tracing.HostSource {
	if s.cfg.Host.GPUDisabled && s.cfg.Host.BPFDisabled {
		return nil
	}
	return s.host
}

// startHost starts what the configuration asks for; failures to find a
// driver or to load BPF are logged once by those packages and leave the
// facts absent.
func (s *Sidecar) startHost(ctx context.Context) error {
	h := s.cfg.Host
	spec := s.upstreamSpec()
	if !h.GPUDisabled {
		g, err := gpu.Start(ctx, gpu.Options{Interval: h.GPUInterval.D(), Upstream: spec, Set: s.metrics.Metrics(), Logger: s.logger})
		if err != nil {
			return err
		}
		s.host.gpu = g
	}
	if !h.BPFDisabled {
		p, err := bpf.Start(ctx, bpf.Options{
			PIDs: func() ([]int, error) {
				if spec.IsZero() {
					return nil, nil
				}
				return spec.Resolve()
			},
			Budget: h.BPFBudget, Set: s.metrics.Metrics(), Logger: s.logger,
		})
		if err != nil {
			return err
		}
		s.host.probes = p
	}
	s.startLeakWatch(ctx, spec)
	return nil
}

func (s *Sidecar) stopHost() {
	if s.host.gpu != nil {
		s.host.gpu.Close()
	}
	if s.host.probes != nil {
		s.host.probes.Close()
	}
}

// Settled reports whether both samplers have samples up to t (a sampler
// that is off has nothing to wait for). It and ForCall make host the
// tracer's HostSource: a kept call's facts are joined once they are whole.
func (h *host) Settled(t time.Time) bool {
	return (h.gpu == nil || !h.gpu.Available() || h.gpu.Settled(t)) && (h.probes == nil || h.probes.Settled(t))
}

// ForCall joins a finished call to the samples its window overlaps; nil
// when nothing observed it. Coverage says how much of the window the
// samples covered.
func (h *host) ForCall(c *record.Call) *record.HostFacts {
	var f record.HostFacts
	if h.gpu != nil && h.gpu.Available() {
		g := h.gpu.ForCall(c)
		for _, d := range g.Devices {
			if d.Upstream == nil || d.Upstream.SMUtil == nil {
				continue
			}
			f.GPU = true
			f.GPUUtil = max(f.GPUUtil, d.Upstream.SMUtil.Mean)
			if d.MemoryUsedMax != nil {
				f.GPUMemoryUsed = max(f.GPUMemoryUsed, *d.MemoryUsedMax)
			}
			if d.Neighbours != nil && d.Neighbours.SMUtil != nil {
				f.NeighbourGPUUtil = max(f.NeighbourGPUUtil, d.Neighbours.SMUtil.Mean)
			}
			f.Coverage = max(f.Coverage, d.Coverage)
		}
	}
	if h.probes != nil { // cgroup throttling is read from files, with or without eBPF
		b := h.probes.ForCall(c)
		if b.CUDA != nil {
			f.CUDA = true
			f.KernelLaunches, f.LaunchesEstimated = b.CUDA.Launches, b.CUDA.LaunchesEstimated
			f.CopyBytes = b.CUDA.H2DBytes + b.CUDA.D2HBytes
			f.SyncWait = b.CUDA.SyncWait
		}
		if b.Sched != nil {
			f.Sched = true
			f.RunqueueDelay, f.OffCPU = b.Sched.RunqueueDelay, b.Sched.OffCPU
		}
		if b.Cgroup != nil {
			f.Sched = true
			f.Throttled = b.Cgroup.Throttled
		}
		f.Coverage = max(f.Coverage, b.Coverage)
	}
	if f.GPU || f.CUDA || f.Sched {
		return &f
	}
	return nil
}

// HostWindow returns the eBPF and GPU facts of the last span of time, for a
// live view; either may be absent.
func (s *Sidecar) HostWindow(d time.Duration) (bpf.Facts, gpu.Facts, bool, bool) {
	now := time.Now()
	var b bpf.Facts
	var g gpu.Facts
	if s.host.probes != nil {
		b = s.host.probes.Window(now.Add(-d), now)
	}
	if s.host.gpu != nil && s.host.gpu.Available() {
		g = s.host.gpu.Window(now.Add(-d), now)
	}
	return b, g, s.host.probes.Enabled(), s.host.gpu != nil && s.host.gpu.Available()
}

// snapshotHost is the alert engine's Options.Host: the upstream's facts over
// a window's span, asked of the samplers' rings when an alert is captured
// (see Options.Host for why not from the calls). Every model shares them:
// there is one upstream to follow.
func (s *Sidecar) snapshotHost(_, _ string, from, to time.Time) *alerting.HostBreakdown {
	h := s.host
	if h == nil {
		return nil
	}
	var b bpf.Facts
	var g gpu.Facts
	if h.probes != nil {
		b = h.probes.Window(from, to)
	}
	if h.gpu != nil && h.gpu.Available() {
		g = h.gpu.Window(from, to)
	}
	return hostBreakdown(to.Sub(from), b, g, h.probes.WatchesOOM())
}

// hostBreakdown turns one span's facts into the snapshot's form, keeping
// absent groups absent.
func hostBreakdown(span time.Duration, b bpf.Facts, g gpu.Facts, oom bool) *alerting.HostBreakdown {
	hb := &alerting.HostBreakdown{Seconds: span.Seconds()}
	if g.Present() {
		hb.GPU = gpuBreakdown(g)
	}
	if c := b.CUDA; c != nil {
		hb.CUDA = &alerting.HostCUDA{
			Coverage:          b.Coverage,
			Launches:          c.Launches,
			LaunchesEstimated: c.LaunchesEstimated,
			CopyBytes:         c.H2DBytes + c.D2HBytes,
			SyncWait:          c.SyncWait.Seconds(),
		}
	}
	if sc := b.Sched; sc != nil {
		hb.Sched = &alerting.HostSched{Coverage: b.Coverage, RunqueueDelay: sc.RunqueueDelay.Seconds(), OffCPU: sc.OffCPU.Seconds()}
	}
	if cg := b.Cgroup; cg != nil {
		hb.Cgroup = &alerting.HostCgroup{Coverage: b.Coverage, Throttled: cg.Throttled.Seconds()}
	}
	if oom {
		o := &alerting.HostOOM{}
		kills := slices.Clone(b.OOMKills)
		// The upstream's own victims first, each side in time order.
		slices.SortStableFunc(kills, func(x, y bpf.OOMKill) int {
			if x.Upstream != y.Upstream {
				if x.Upstream {
					return -1
				}
				return 1
			}
			return x.Time.Compare(y.Time)
		})
		for _, k := range kills {
			if k.Upstream {
				o.Upstream++
			} else {
				o.Other++
			}
			if len(o.Kills) < alerting.MaxOOMKills {
				o.Kills = append(o.Kills, alerting.OOMKill{At: k.Time, PID: k.PID, Comm: strings.ToValidUTF8(k.Comm, "?"), Upstream: k.Upstream})
			}
		}
		hb.OOM = o
	}
	return hb
}

// gpuBreakdown reduces the devices the upstream had a context on to the
// busiest one's figures.
func gpuBreakdown(g gpu.Facts) *alerting.HostGPU {
	out := &alerting.HostGPU{Coverage: 1}
	var util, nb float64
	var utilOK, nbOK bool
	var mem, upMem uint64
	var memOK, upMemOK bool
	for _, d := range g.Devices {
		out.Coverage = min(out.Coverage, d.Coverage)
		up := d.Upstream
		if up == nil {
			continue
		}
		out.Devices++
		if up.SMUtil != nil {
			util, utilOK = max(util, up.SMUtil.Mean), true
			// Per-process utilisation was read: no neighbour there is 0.
			nbOK = true
			if n := d.Neighbours; n != nil && n.SMUtil != nil {
				nb = max(nb, n.SMUtil.Mean)
			}
		}
		if d.MemoryUsedMax != nil {
			mem, memOK = max(mem, *d.MemoryUsedMax), true
		}
		if up.MemoryUsedMax != nil {
			upMem, upMemOK = max(upMem, *up.MemoryUsedMax), true
		}
	}
	if utilOK {
		out.Util = &util
	}
	if nbOK {
		out.NeighbourUtil = &nb
	}
	if memOK {
		out.MemoryUsed = &mem
	}
	if upMemOK {
		out.UpstreamMemory = &upMem
	}
	return out
}

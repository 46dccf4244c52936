package sidecar

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/bpf"
	"github.com/inferwatch/inferwatch/gpu"
)

func ptr[T any](v T) *T { return &v }

// hostBreakdown keeps every group the samplers did not observe absent, and
// carries the ones they did, zeros included.
func TestHostBreakdown(t *testing.T) {
	t0 := time.Unix(1_700_000_040, 0)
	kills := func(n, upstream int) []bpf.OOMKill {
		var ks []bpf.OOMKill
		for i := range n {
			// Others first in time, so the upstream's must be moved ahead.
			ks = append(ks, bpf.OOMKill{Time: t0.Add(time.Duration(i) * time.Second), PID: 100 + i, Comm: "w\xffrker", Upstream: i >= n-upstream})
		}
		return ks
	}
	tests := []struct {
		name string
		b    bpf.Facts
		g    gpu.Facts
		oom  bool
		want alerting.HostBreakdown
	}{
		{
			name: "nothing observed: every group absent",
			want: alerting.HostBreakdown{Seconds: 10},
		},
		{
			name: "scheduler and cgroup, no GPU, no CUDA",
			b: bpf.Facts{Coverage: 0.9,
				Sched:  &bpf.SchedFacts{RunqueueDelay: 120 * time.Millisecond, OffCPU: 3 * time.Second},
				Cgroup: &bpf.CgroupFacts{}},
			want: alerting.HostBreakdown{Seconds: 10,
				Sched:  &alerting.HostSched{Coverage: 0.9, RunqueueDelay: 0.12, OffCPU: 3},
				Cgroup: &alerting.HostCgroup{Coverage: 0.9}},
		},
		{
			name: "CUDA: host-device copies only",
			b: bpf.Facts{Coverage: 1, CUDA: &bpf.CUDAFacts{Launches: 5000, LaunchesEstimated: true, H2DBytes: 1000, D2HBytes: 24, D2DBytes: 1 << 30,
				SyncWait: 40 * time.Millisecond}},
			want: alerting.HostBreakdown{Seconds: 10,
				CUDA: &alerting.HostCUDA{Coverage: 1, Launches: 5000, LaunchesEstimated: true, CopyBytes: 1024, SyncWait: 0.04}},
		},
		{
			name: "OOM probe on, no kill: zero, not absent",
			oom:  true,
			want: alerting.HostBreakdown{Seconds: 10, OOM: &alerting.HostOOM{}},
		},
		{
			name: "OOM kills: exact counts, the upstream's listed first, capped",
			b:    bpf.Facts{OOMKills: kills(10, 3)},
			oom:  true,
			want: alerting.HostBreakdown{Seconds: 10, OOM: &alerting.HostOOM{Upstream: 3, Other: 7, Kills: []alerting.OOMKill{
				{At: t0.Add(7 * time.Second), PID: 107, Comm: "w?rker", Upstream: true},
				{At: t0.Add(8 * time.Second), PID: 108, Comm: "w?rker", Upstream: true},
				{At: t0.Add(9 * time.Second), PID: 109, Comm: "w?rker", Upstream: true},
				{At: t0, PID: 100, Comm: "w?rker"},
				{At: t0.Add(1 * time.Second), PID: 101, Comm: "w?rker"},
				{At: t0.Add(2 * time.Second), PID: 102, Comm: "w?rker"},
				{At: t0.Add(3 * time.Second), PID: 103, Comm: "w?rker"},
				{At: t0.Add(4 * time.Second), PID: 104, Comm: "w?rker"},
			}}},
		},
		{
			name: "OOM probe off: kills unknown",
			b:    bpf.Facts{},
			want: alerting.HostBreakdown{Seconds: 10},
		},
		{
			name: "GPU: the upstream's devices, busiest figures",
			g: gpu.Facts{Devices: []gpu.DeviceFacts{
				{Index: 0, Coverage: 0.95, MemoryUsedMax: ptr[uint64](4 << 30),
					Upstream:   &gpu.GroupUsage{PIDs: []int{1}, SMUtil: &gpu.Stat{Mean: 0.3}, MemoryUsedMax: ptr[uint64](3 << 30)},
					Neighbours: &gpu.GroupUsage{PIDs: []int{2}, SMUtil: &gpu.Stat{Mean: 0.6}}},
				{Index: 1, Coverage: 1, MemoryUsedMax: ptr[uint64](2 << 30),
					Upstream: &gpu.GroupUsage{PIDs: []int{1}, SMUtil: &gpu.Stat{Mean: 0.5}}},
				// Not the upstream's: its neighbour does not count.
				{Index: 2, Coverage: 1, MemoryUsedMax: ptr[uint64](80 << 30),
					Neighbours: &gpu.GroupUsage{PIDs: []int{3}, SMUtil: &gpu.Stat{Mean: 0.99}}},
			}},
			want: alerting.HostBreakdown{Seconds: 10, GPU: &alerting.HostGPU{Coverage: 0.95, Devices: 2,
				Util: ptr(0.5), NeighbourUtil: ptr(0.6), MemoryUsed: ptr[uint64](4 << 30), UpstreamMemory: ptr[uint64](3 << 30)}},
		},
		{
			name: "GPU without neighbours: their utilisation is 0",
			g: gpu.Facts{Devices: []gpu.DeviceFacts{{Coverage: 1,
				Upstream: &gpu.GroupUsage{PIDs: []int{1}, SMUtil: &gpu.Stat{Mean: 0.2}}}}},
			want: alerting.HostBreakdown{Seconds: 10, GPU: &alerting.HostGPU{Coverage: 1, Devices: 1, Util: ptr(0.2), NeighbourUtil: ptr(0.0)}},
		},
		{
			name: "GPU without per-process utilisation: both absent",
			g: gpu.Facts{Devices: []gpu.DeviceFacts{{Coverage: 1, MemoryUsedMax: ptr[uint64](1 << 30),
				Upstream: &gpu.GroupUsage{PIDs: []int{1}}, Neighbours: &gpu.GroupUsage{PIDs: []int{2}}}}},
			want: alerting.HostBreakdown{Seconds: 10, GPU: &alerting.HostGPU{Coverage: 1, Devices: 1, MemoryUsed: ptr[uint64](1 << 30)}},
		},
		{
			name: "GPU sampled, upstream on none of it",
			g:    gpu.Facts{Devices: []gpu.DeviceFacts{{Coverage: 1, MemoryUsedMax: ptr[uint64](1 << 30)}}},
			want: alerting.HostBreakdown{Seconds: 10, GPU: &alerting.HostGPU{Coverage: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hostBreakdown(10*time.Second, tt.b, tt.g, tt.oom)
			if !reflect.DeepEqual(*got, tt.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tt.want)
				t.Fatalf("hostBreakdown\n got %s\nwant %s", g, w)
			}
		})
	}
}

func TestOOMProbedWithoutProbes(t *testing.T) {
	if (*bpf.Probes)(nil).WatchesOOM() {
		t.Fatal("no probes, yet the OOM probe counts as on")
	}
	if h := (&Sidecar{host: &host{}}).snapshotHost("m", "1", time.Unix(0, 0), time.Unix(10, 0)); h == nil || h.GPU != nil || h.Sched != nil || h.CUDA != nil || h.Cgroup != nil || h.OOM != nil || h.Seconds != 10 {
		t.Fatalf("no samplers: %+v, want every group absent", h)
	}
}

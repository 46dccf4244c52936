//go:build ignore

/*
 * Calibration: programs that do about the work of the real probes (a hit
 * count, a clock read, a hash lookup or two) on hooks the calibration can
 * fire at will — a uprobe and a uretprobe on a no-op function of this
 * process, and the task:task_rename tracepoint that prctl(PR_SET_NAME)
 * fires. Timing the hook with and without them gives the per-hit costs.
 */

#include "common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} calib_seen SEC(".maps");

DEFINE_HITS(calib_hits, 3);

/* Only the calibrating thread counts; anything else that hits the hook
 * (another task renaming itself) pays the lookup and leaves. */
volatile const __u32 calib_tid;

static __always_inline int work(__u32 idx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u64 now = bpf_ktime_get_ns();

	hit(&calib_hits, idx);
	if (tid != calib_tid)
		return 0;
	__u64 *v = bpf_map_lookup_elem(&calib_seen, &tid);
	if (v)
		*v = now;
	else
		bpf_map_update_elem(&calib_seen, &tid, &now, BPF_ANY);
	return 0;
}

SEC("uprobe")
int calib_uprobe(struct pt_regs *ctx) { return work(0); }

SEC("uretprobe")
int calib_uretprobe(struct pt_regs *ctx) { return work(1); }

/* The same hooks as uprobe_multi links (6.6+), which CAP_BPF with
 * CAP_PERFMON may attach; a perf uprobe takes CAP_SYS_ADMIN since the 2025
 * revert, which a sidecar in a container does not have. */
SEC("uprobe.multi")
int calib_uprobe_m(struct pt_regs *ctx) { return work(0); }

SEC("uretprobe.multi")
int calib_uretprobe_m(struct pt_regs *ctx) { return work(1); }

SEC("tp_btf/task_rename")
int BPF_PROG(calib_tracepoint, struct task_struct *task, const char *comm) { return work(2); }

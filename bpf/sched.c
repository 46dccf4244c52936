//go:build ignore

/*
 * Scheduler facts of the upstream's threads and OOM kills.
 *
 * Run-queue delay is the time a thread waited runnable (woken, or preempted
 * while still running) until it was switched in; off-CPU time is the time
 * from switch-out to switch-in (blocked plus waiting in the run queue).
 * Both are credited, per process (TGID), when the thread runs again.
 * sched_by_pid doubles as the filter: user space pre-creates an entry for
 * each of the upstream's processes, and any other task costs one lookup.
 *
 * The scheduler hooks are BTF tracepoints (tp_btf): raw tracepoints with
 * typed arguments, the cheapest hook for events that fire on every context
 * switch of the machine. oom:mark_victim is a classic tracepoint because
 * its record (pid, comm) is stable across kernels while its raw arguments
 * changed in 6.8.
 */

#include "common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TASK_RUNNING 0

enum {
	H_WAKEUP,
	H_SWITCH,
	H_OOM,
	NHITS,
};

struct sched_stats {
	__u64 rq_waits;
	__u64 rq_ns;
	__u64 rq_hist[NBUCKETS];
	__u64 offcpu;
	__u64 offcpu_ns;
};

/* Per thread: when it was switched out and since when it is runnable. */
struct task_sched {
	__u64 out;
	__u64 runnable;
};

struct oom_event {
	__u64 ts;
	__u32 pid;
	__u32 uid;
	__u64 anon_rss_kb;
	__u64 total_vm_kb;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct sched_stats);
} sched_by_pid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_sched);
} task_sched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024);
} oom_events SEC(".maps");

DEFINE_HITS(sched_hits, NHITS);

const struct oom_event *unused_oom_event __attribute__((unused));

static __always_inline int is_target(struct task_struct *t)
{
	__u32 tgid = BPF_CORE_READ(t, tgid);

	return bpf_map_lookup_elem(&sched_by_pid, &tgid) != 0;
}

static __always_inline int on_wakeup(struct task_struct *p)
{
	struct task_sched *t;

	hit(&sched_hits, H_WAKEUP);
	if (!is_target(p))
		return 0;
	t = bpf_task_storage_get(&task_sched, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t && !t->runnable)
		t->runnable = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	struct task_sched *t;
	struct sched_stats *s;
	__u32 tgid;

	hit(&sched_hits, H_SWITCH);
	if (is_target(prev)) {
		t = bpf_task_storage_get(&task_sched, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (t) {
			t->out = now;
			/* Preempted, it stays on the run queue: its wait starts now. */
			t->runnable = (preempt || prev_state == TASK_RUNNING) ? now : 0;
		}
	}

	tgid = BPF_CORE_READ(next, tgid);
	s = bpf_map_lookup_elem(&sched_by_pid, &tgid);
	if (!s)
		return 0;
	t = bpf_task_storage_get(&task_sched, next, 0, 0);
	if (!t)
		return 0;
	if (t->runnable && now > t->runnable) {
		__u64 d = now - t->runnable;

		s->rq_waits++;
		s->rq_ns += d;
		s->rq_hist[log2_bucket(d)]++;
	}
	if (t->out && now > t->out) {
		s->offcpu++;
		s->offcpu_ns += now - t->out;
	}
	t->out = 0;
	t->runnable = 0;
	return 0;
}

SEC("tracepoint/oom/mark_victim")
int oom_mark_victim(struct trace_event_raw_mark_victim *ctx)
{
	struct oom_event *e;

	hit(&sched_hits, H_OOM);
	e = bpf_ringbuf_reserve(&oom_events, sizeof(*e), 0);
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = bpf_ktime_get_ns();
	e->pid = ctx->pid;
	/* comm, uid and the sizes joined the record in 6.x; CO-RE leaves them
	 * out where the running kernel's record lacks them. */
	if (bpf_core_field_exists(ctx->__data_loc_comm)) {
		__u32 loc = ctx->__data_loc_comm;

		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), (void *)ctx + (loc & 0xffff));
	}
	if (bpf_core_field_exists(ctx->uid))
		e->uid = ctx->uid;
	if (bpf_core_field_exists(ctx->anon_rss))
		e->anon_rss_kb = ctx->anon_rss;
	if (bpf_core_field_exists(ctx->total_vm))
		e->total_vm_kb = ctx->total_vm;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

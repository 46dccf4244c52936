//go:build ignore

/*
 * Uprobes on the CUDA runtime (libcudart) and driver (libcuda) APIs of the
 * upstream's processes. Everything is aggregated here, per process (TGID),
 * in a per-CPU hash that user space pre-creates for each process it probes;
 * only synchronisation waits go out one by one, through a ring buffer, so
 * that user space can clip them exactly to a call's window.
 *
 * A call made from inside the CUDA libraries themselves (cudaMalloc calling
 * cuMemAlloc_v2, say) is the library's own work: it is counted once, at the
 * outermost API call. The probes tell by the return address, which user
 * space helps with by writing the libraries' executable ranges to
 * lib_ranges.
 */

#include "common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#if !defined(__TARGET_ARCH_x86)
#error "the CUDA probes read the return address from the stack: x86-64 only"
#endif

/* Copy directions, the index of copies[] and copy_bytes[]. */
enum { DIR_H2D, DIR_D2H, DIR_D2D, DIR_OTHER, NDIRS };

/* Cookie of the copy program: a direction, or COPY_KIND_ARG when the
 * direction is the runtime's cudaMemcpyKind in the fourth argument. */
#define COPY_KIND_ARG 8

/* Cookie bits of the launch program. */
#define LAUNCH_DRIVER   1 /* driver API (cuLaunchKernel*), else runtime */
#define LAUNCH_FUNC_ARG2 2 /* the function is the second argument (…Ex) */

enum {
	H_LAUNCH,
	H_COPY,
	H_SYNC_ENTER,
	H_SYNC_EXIT,
	H_ALLOC_ENTER,
	H_ALLOC_EXIT,
	H_FREE,
	NHITS,
};

struct cuda_stats {
	__u64 launches[2]; /* [0] runtime, [1] driver */
	__u64 nested;      /* calls made by the CUDA libraries themselves, not counted elsewhere */
	__u64 copies[NDIRS];
	__u64 copy_bytes[NDIRS];
	__u64 syncs;
	__u64 sync_ns;
	__u64 sync_hist[NBUCKETS];
	__u64 allocs;
	__u64 alloc_bytes;
	__u64 alloc_failed; /* the API returned an error */
	__u64 frees;
	__u64 free_bytes;
	__u64 frees_untracked; /* pointer not allocated while probed */
};

struct lib_ranges {
	__u64 lo[8];
	__u64 hi[8];
};

/* An API call between its entry and its return, keyed by thread and the
 * stack pointer at entry, so nested and abandoned calls never mix. */
struct inflight_key {
	__u32 tid;
	__u32 pad;
	__u64 sp;
};

struct inflight {
	__u64 ts;
	__u64 outptr; /* allocations: where the API writes the pointer */
	__u64 size;
	__u32 fn;     /* the cookie: which API function */
	__u32 nested;
};

struct alloc_key {
	__u32 tgid;
	__u32 pad;
	__u64 ptr;
};

struct kernel_key {
	__u32 tgid;
	__u32 api;
	__u64 func;
};

/* One synchronisation wait: sent at entry (end == 0) and at return. */
struct sync_event {
	__u64 begin;
	__u64 end;
	__u32 tgid;
	__u32 tid;
	__u32 fn;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct cuda_stats);
} cuda_by_pid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct lib_ranges);
} lib_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct inflight_key);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct alloc_key);
	__type(value, __u64);
} allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct kernel_key);
	__type(value, __u64);
} kernels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} sync_events SEC(".maps");

DEFINE_HITS(cuda_hits, NHITS);

/* launch_gate: launches are counted only while user space holds the gate
 * open, so that a duty-cycled on-phase has exact edges whatever the attach
 * and detach latency. */
volatile __u32 launch_gate;
/* Lost work, for inferwatch_bpf_dropped_total. */
volatile __u64 ringbuf_full;
volatile __u64 allocs_full;

/* Force BTF for the types user space reads. */
const struct sync_event *unused_sync_event __attribute__((unused));

static __always_inline int from_cuda(struct pt_regs *ctx, __u32 tgid)
{
	struct lib_ranges *r = bpf_map_lookup_elem(&lib_ranges, &tgid);
	__u64 ret = 0;

	if (!r)
		return 0;
	/* At the first instruction of a function the return address is at
	 * the top of the stack. */
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)))
		return 0;
	for (int i = 0; i < 8; i++) {
		if (ret >= r->lo[i] && ret < r->hi[i])
			return 1;
	}
	return 0;
}

static __always_inline __u32 tgid_of(__u64 id) { return id >> 32; }

/*
 * Each probe comes twice: for a single uprobe (perf event, any kernel with
 * cookies) and for a uprobe_multi link (6.6+), which attaches and — what
 * matters for duty cycling — detaches all of a library's functions at once:
 * a detach waits for a grace period, one per link. User space loads one
 * set. A return probe is the same program attached with the return flag.
 */
#define PROBE(name, sec)                                               \
	static __always_inline int name##_body(struct pt_regs *ctx);    \
	SEC(sec) int name(struct pt_regs *ctx) { return name##_body(ctx); } \
	SEC("uprobe.multi") int name##_m(struct pt_regs *ctx) { return name##_body(ctx); } \
	static __always_inline int name##_body(struct pt_regs *ctx)

PROBE(cuda_launch, "uprobe")
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = tgid_of(id);
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct cuda_stats *s;

	hit(&cuda_hits, H_LAUNCH);
	if (!launch_gate)
		return 0;
	s = bpf_map_lookup_elem(&cuda_by_pid, &tgid);
	if (!s)
		return 0;
	if (from_cuda(ctx, tgid)) {
		s->nested++;
		return 0;
	}
	__u32 api = cookie & LAUNCH_DRIVER ? 1 : 0;
	s->launches[api]++;

	/* Both loads unconditionally: the verifier rejects a context pointer
	 * the compiler offset by a branch-selected amount. */
	__u64 arg1 = PT_REGS_PARM1(ctx), arg2 = PT_REGS_PARM2(ctx);
	barrier_var(arg1);
	barrier_var(arg2);
	struct kernel_key k = {
		.tgid = tgid,
		.api = api,
		.func = cookie & LAUNCH_FUNC_ARG2 ? arg2 : arg1,
	};
	__u64 *n = bpf_map_lookup_elem(&kernels, &k);
	if (n) {
		__sync_fetch_and_add(n, 1);
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&kernels, &k, &one, BPF_NOEXIST);
	}
	return 0;
}

PROBE(cuda_copy, "uprobe")
{
	__u32 tgid = tgid_of(bpf_get_current_pid_tgid());
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct cuda_stats *s;
	__u32 dir = DIR_OTHER;

	hit(&cuda_hits, H_COPY);
	s = bpf_map_lookup_elem(&cuda_by_pid, &tgid);
	if (!s)
		return 0;
	if (from_cuda(ctx, tgid)) {
		s->nested++;
		return 0;
	}
	if (cookie == COPY_KIND_ARG) {
		/* cudaMemcpyKind: 1 host→device, 2 device→host, 3 device→device;
		 * host→host and "default" (inferred from the pointers) are other. */
		switch (PT_REGS_PARM4(ctx)) {
		case 1: dir = DIR_H2D; break;
		case 2: dir = DIR_D2H; break;
		case 3: dir = DIR_D2D; break;
		}
	} else if (cookie < NDIRS) {
		dir = cookie;
	}
	s->copies[dir]++;
	s->copy_bytes[dir] += PT_REGS_PARM3(ctx);
	return 0;
}

PROBE(cuda_sync_enter, "uprobe")
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = tgid_of(id);
	struct inflight_key k = { .tid = (__u32)id, .sp = PT_REGS_SP(ctx) };
	struct inflight v = { .ts = bpf_ktime_get_ns(), .fn = bpf_get_attach_cookie(ctx) };

	hit(&cuda_hits, H_SYNC_ENTER);
	if (!bpf_map_lookup_elem(&cuda_by_pid, &tgid))
		return 0;
	v.nested = from_cuda(ctx, tgid);
	bpf_map_update_elem(&inflight, &k, &v, BPF_ANY);
	if (v.nested)
		return 0;

	struct sync_event *e = bpf_ringbuf_reserve(&sync_events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&ringbuf_full, 1);
		return 0;
	}
	e->begin = v.ts;
	e->end = 0;
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->fn = v.fn;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

PROBE(cuda_sync_exit, "uretprobe")
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = tgid_of(id);
	/* ret popped the return address: the entry's stack pointer is 8 below. */
	struct inflight_key k = { .tid = (__u32)id, .sp = PT_REGS_SP(ctx) - 8 };
	struct inflight *v;
	struct cuda_stats *s;

	hit(&cuda_hits, H_SYNC_EXIT);
	v = bpf_map_lookup_elem(&inflight, &k);
	if (!v)
		return 0;
	__u64 begin = v->ts;
	__u32 fn = v->fn, nested = v->nested;
	bpf_map_delete_elem(&inflight, &k);
	s = bpf_map_lookup_elem(&cuda_by_pid, &tgid);
	if (!s || now < begin)
		return 0;
	if (nested) {
		s->nested++;
		return 0;
	}

	__u64 d = now - begin;
	s->syncs++;
	s->sync_ns += d;
	s->sync_hist[log2_bucket(d)]++;

	struct sync_event *e = bpf_ringbuf_reserve(&sync_events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&ringbuf_full, 1);
		return 0;
	}
	e->begin = begin;
	e->end = now;
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->fn = fn;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* cuda_alloc_enter/cuda_alloc_exit: cudaMalloc(void **p, size_t n) and its kin all
 * take the out-pointer first and the size second, and return 0 on success. */
PROBE(cuda_alloc_enter, "uprobe")
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = tgid_of(id);
	struct inflight_key k = { .tid = (__u32)id, .sp = PT_REGS_SP(ctx) };
	struct inflight v = {
		.outptr = PT_REGS_PARM1(ctx),
		.size = PT_REGS_PARM2(ctx),
		.fn = bpf_get_attach_cookie(ctx),
	};

	hit(&cuda_hits, H_ALLOC_ENTER);
	if (!bpf_map_lookup_elem(&cuda_by_pid, &tgid))
		return 0;
	v.nested = from_cuda(ctx, tgid);
	bpf_map_update_elem(&inflight, &k, &v, BPF_ANY);
	return 0;
}

PROBE(cuda_alloc_exit, "uretprobe")
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = tgid_of(id);
	struct inflight_key k = { .tid = (__u32)id, .sp = PT_REGS_SP(ctx) - 8 };
	struct inflight *v;
	struct cuda_stats *s;

	hit(&cuda_hits, H_ALLOC_EXIT);
	v = bpf_map_lookup_elem(&inflight, &k);
	if (!v)
		return 0;
	__u64 outptr = v->outptr, size = v->size;
	__u32 nested = v->nested;
	bpf_map_delete_elem(&inflight, &k);
	s = bpf_map_lookup_elem(&cuda_by_pid, &tgid);
	if (!s)
		return 0;
	if (nested) {
		s->nested++;
		return 0;
	}
	if (PT_REGS_RC(ctx) != 0) {
		s->alloc_failed++;
		return 0;
	}

	struct alloc_key ak = { .tgid = tgid };
	if (bpf_probe_read_user(&ak.ptr, sizeof(ak.ptr), (void *)outptr) || !ak.ptr) {
		s->alloc_failed++;
		return 0;
	}
	/* A pointer handed out again without a free we saw: the old block is
	 * gone, so settle it as freed. */
	__u64 *old = bpf_map_lookup_elem(&allocs, &ak);
	if (old) {
		s->frees++;
		s->free_bytes += *old;
	}
	if (bpf_map_update_elem(&allocs, &ak, &size, BPF_ANY)) {
		__sync_fetch_and_add(&allocs_full, 1);
		return 0;
	}
	s->allocs++;
	s->alloc_bytes += size;
	return 0;
}

/* cuda_free: cudaFree(void *p) and its kin take the pointer first. Counted at
 * entry: a free the API refuses is a bug in the caller, not a live block. */
PROBE(cuda_free, "uprobe")
{
	__u32 tgid = tgid_of(bpf_get_current_pid_tgid());
	struct alloc_key ak = { .tgid = tgid, .ptr = PT_REGS_PARM1(ctx) };
	struct cuda_stats *s;
	__u64 *size;

	hit(&cuda_hits, H_FREE);
	if (!ak.ptr)
		return 0;
	s = bpf_map_lookup_elem(&cuda_by_pid, &tgid);
	if (!s)
		return 0;
	if (from_cuda(ctx, tgid)) {
		s->nested++;
		return 0;
	}
	size = bpf_map_lookup_elem(&allocs, &ak);
	if (!size) {
		s->frees_untracked++;
		return 0;
	}
	s->frees++;
	s->free_bytes += *size;
	bpf_map_delete_elem(&allocs, &ak);
	return 0;
}

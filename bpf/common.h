/* Shared by the BPF programs of package bpf (cuda.c, sched.c, calib.c). */
#ifndef INFERWATCH_COMMON_H
#define INFERWATCH_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* Log2 histograms of nanoseconds: bucket i counts durations in
 * [2^i, 2^(i+1)) ns; the last bucket also takes everything longer
 * (2^39 ns is about nine minutes). */
#define NBUCKETS 40

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 r = 0;

	/* Unrolled binary search: the verifier sees a fixed, short path. */
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8)  { v >>= 8;  r += 8; }
	if (v >> 4)  { v >>= 4;  r += 4; }
	if (v >> 2)  { v >>= 2;  r += 2; }
	if (v >> 1)  { r += 1; }
	return r < NBUCKETS ? r : NBUCKETS - 1;
}

/* hit counts one run of a program in a per-CPU array; user space turns the
 * counts into hit rates, and hit rates times per-hit costs into the
 * overhead estimate that drives duty cycling. */
#define DEFINE_HITS(name, n)                           \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);       \
		__uint(max_entries, n);                        \
		__type(key, __u32);                            \
		__type(value, __u64);                          \
	} name SEC(".maps")

static __always_inline void hit(void *map, __u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(map, &idx);

	if (c)
		(*c)++;
}

#endif

package bpf

// headers/vmlinux.h is `bpftool btf dump file /sys/kernel/btf/vmlinux
// format c`; the libbpf headers come from the system (libbpf-dev).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64 -type cuda_stats -type sync_event cuda cuda.c -- -I./headers
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64 -type sched_stats -type oom_event sched sched.c -- -I./headers
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64 calib calib.c -- -I./headers

// Package cgroup finds a process's control groups and reads the two facts
// the call pipeline takes from them: the CPU throttling behind a slow call
// (the host facts, package bpf) and the memory limit a leak is projected
// against (package sidecar) or Go's collector is given (the proxy's start).
//
// It knows cgroup v1, v2 and the hybrid layout, and maps /proc/PID/cgroup
// onto the hierarchies this process has mounted, which in a container are
// sub-trees (a cgroup namespace or a bind mount): a cgroup outside that
// view is reported as such (ErrOutside), never guessed at.
package cgroup

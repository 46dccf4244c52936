package pids

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SocketUserPIDs finds the upstream where its processes' descriptors are
// not readable to this process: a Kubernetes pod sharing one PID namespace
// (shareProcessNamespace), the sidecar running as another user than the
// server and without the privilege to read its /proc/PID/fd. The socket
// listening on port names its owner's user (the uid column of
// /proc/net/tcp); the upstream is the processes of that user outside this
// process's cgroup, which must all be in one cgroup (one container), and
// every other process of that cgroup (its workers). Processes of the user
// in two or more other cgroups are an error: guessing would follow the
// wrong container.
func SocketUserPIDs(port int) ([]int, error) {
	return socketUserPIDs(procRoot, port)
}

func socketUserPIDs(proc string, port int) ([]int, error) {
	uids := map[string]bool{}
	var readErrs []error
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		if err := listenUIDs(filepath.Join(proc, f), port, uids); err != nil {
			readErrs = append(readErrs, err)
		}
	}
	if len(uids) == 0 {
		return nil, fmt.Errorf("socket user: no TCP socket listening on port %d: %w", port, errors.Join(append(readErrs, ErrNotFound)...))
	}
	self, err := os.ReadFile(filepath.Join(proc, "self", "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("socket user: %w", err)
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("socket user: list %s: %w", proc, err)
	}
	byCgroup := map[string][]int{}
	matched := map[string]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || string(cg) == string(self) {
			continue // gone, or one of ours
		}
		byCgroup[string(cg)] = append(byCgroup[string(cg)], pid)
		if uid, err := effectiveUID(filepath.Join(dir, "status")); err == nil && uids[uid] {
			matched[string(cg)] = true
		}
	}
	users := strings.Join(slices.Sorted(maps.Keys(uids)), ",")
	switch len(matched) {
	case 0:
		return nil, fmt.Errorf("socket user: no process of user %s, which listens on port %d, outside this process's cgroup: %w", users, port, ErrNotFound)
	case 1:
		for cg := range matched {
			pids := byCgroup[cg]
			slices.Sort(pids)
			return pids, nil
		}
	}
	return nil, fmt.Errorf("socket user: processes of user %s, which listens on port %d, are in %d other cgroups: cannot tell which is the upstream", users, port, len(matched))
}

// listenUIDs adds the users owning the sockets listening on port in the
// table at path (the format of /proc/net/tcp); a missing table (no IPv6)
// adds none.
func listenUIDs(path string, port int, uids map[string]bool) error {
	err := listeners(path, port, func(fields []string) { uids[fields[7]] = true })
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// effectiveUID reads the effective user of a /proc/PID/status (readable to
// every user, unlike the process's descriptors).
func effectiveUID(status string) (string, error) {
	b, err := os.ReadFile(status)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) >= 2 {
				return f[1], nil
			}
		}
	}
	return "", fmt.Errorf("%s: no Uid line", status)
}

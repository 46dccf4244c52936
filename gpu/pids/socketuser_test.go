package pids

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSocketUserPIDs: a pod's shared PID namespace as the sidecar sees it.
// Port 8001 (0x1F41) listens, owned by uid 1000 (the server); the sidecar
// (uid 65532) and the pause process (65535) are in other cgroups.
func TestSocketUserPIDs(t *testing.T) {
	type process struct {
		uid    string
		cgroup string
	}
	base := map[int]process{
		1:  {"65535", "0::/../pause\n"},
		7:  {"1000", "0::/../server\n"}, // the server
		8:  {"1001", "0::/../server\n"}, // its worker, as another user
		9:  {"65532", "0::/\n"},         // this sidecar
		10: {"1000", "0::/\n"},          // ours, whatever its user
		20: {"65532", "0::/../queue\n"}, // queue-proxy
	}
	tests := []struct {
		name  string
		extra map[int]process
		want  []int
		err   string
	}{
		{name: "the server's container", want: []int{7, 8}},
		{name: "the user in two containers", extra: map[int]process{30: {"1000", "0::/../other\n"}}, err: "in 2 other cgroups"},
		{name: "the user nowhere else", extra: map[int]process{7: {"0", "0::/../server\n"}}, err: "no process of user 1000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			write(t, filepath.Join(proc, "net/tcp"), tcpHeader+
				"   0: 00000000:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0\n"+
				"   1: 0100007F:1F41 0100007F:D431 01 00000000:00000000 00:00000000 00000000  65532        0 556 1 0000000000000000 20 4 30 10 -1\n")
			write(t, filepath.Join(proc, "self/cgroup"), "0::/\n")
			ps := map[int]process{}
			for k, v := range base {
				ps[k] = v
			}
			for k, v := range tc.extra {
				ps[k] = v
			}
			for pid, p := range ps {
				write(t, filepath.Join(proc, fmt.Sprint(pid), "status"), "Name:\tx\nUid:\t"+p.uid+"\t"+p.uid+"\t"+p.uid+"\t"+p.uid+"\n")
				write(t, filepath.Join(proc, fmt.Sprint(pid), "cgroup"), p.cgroup)
			}
			got, err := socketUserPIDs(proc, 8001)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := socketUserPIDs(t.TempDir(), 8001); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no tables: %v, want ErrNotFound", err)
	}
}

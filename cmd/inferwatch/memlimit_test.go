package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // under the cgroup root
		self  string            // /proc/self/cgroup
		want  int64
		from  string // the file it read, under the root
	}{
		{"v2 at the cgroup's path", map[string]string{"kubepods/pod1/c1/memory.max": "268435456\n"},
			"0::/kubepods/pod1/c1\n", 268435456, "kubepods/pod1/c1/memory.max"},
		{"v2, own cgroup namespace", map[string]string{"memory.max": "536870912\n"},
			"0::/\n", 536870912, "memory.max"},
		{"v2 unlimited", map[string]string{"memory.max": "max\n"}, "0::/\n", 0, "memory.max"},
		{"v1 at the cgroup's path", map[string]string{"memory/kubepods/c1/memory.limit_in_bytes": "268435456\n"},
			"4:memory:/kubepods/c1\n0::/\n", 268435456, "memory/kubepods/c1/memory.limit_in_bytes"},
		{"v1 joint controllers", map[string]string{"memory/memory.limit_in_bytes": "1073741824\n"},
			"3:cpu,memory:/x\n", 1073741824, "memory/memory.limit_in_bytes"},
		{"v1 unlimited", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"},
			"4:memory:/\n", 0, "memory/memory.limit_in_bytes"},
		{"v1 mount not listed (runc's private view)", map[string]string{"memory/memory.limit_in_bytes": "268435456\n"},
			"0::/libpod_parent/libpod-1\n", 268435456, "memory/memory.limit_in_bytes"},
		{"nothing readable", nil, "0::/\n", 0, ""},
		{"garbage", map[string]string{"memory.max": "lots\n"}, "0::/\n", 0, "memory.max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, from := cgroupMemoryLimit(root, tc.self)
			want := ""
			if tc.from != "" {
				want = filepath.Join(root, tc.from)
			}
			if got != tc.want || from != want {
				t.Errorf("got %d from %q, want %d from %q", got, from, tc.want, want)
			}
		})
	}
}

package bpf

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end, offset uint64
	perms              string
	dev                string // major:minor, hex
	inode              uint64
	path               string // as mapped, without the " (deleted)" mark
	deleted            bool
}

func (m mapping) exec() bool { return len(m.perms) > 2 && m.perms[2] == 'x' }

// readMaps reads /proc/PID/maps.
func readMaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := parseMaps(f)
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/maps: %w", pid, err)
	}
	return ms, nil
}

// parseMaps parses the /proc/PID/maps format:
//
//	7f3c1a000000-7f3c1a021000 r-xp 00001000 fd:01 1312 /usr/lib/libcudart.so.12.4.127
func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var f [5][]byte
		rest := line
		for i := range f {
			rest = bytes.TrimLeft(rest, " ")
			var ok bool
			f[i], rest, ok = bytes.Cut(rest, []byte(" "))
			if !ok && i < 4 {
				return nil, fmt.Errorf("short line %q", line)
			}
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			return nil, fmt.Errorf("bad range in %q", line)
		}
		var m mapping
		var err error
		if m.start, err = strconv.ParseUint(string(lo), 16, 64); err != nil {
			return nil, fmt.Errorf("bad start in %q: %w", line, err)
		}
		if m.end, err = strconv.ParseUint(string(hi), 16, 64); err != nil {
			return nil, fmt.Errorf("bad end in %q: %w", line, err)
		}
		if m.offset, err = strconv.ParseUint(string(f[2]), 16, 64); err != nil {
			return nil, fmt.Errorf("bad offset in %q: %w", line, err)
		}
		if m.inode, err = strconv.ParseUint(string(f[4]), 10, 64); err != nil {
			return nil, fmt.Errorf("bad inode in %q: %w", line, err)
		}
		m.perms, m.dev = string(f[1]), string(f[3])
		path := strings.TrimLeft(string(rest), " ")
		if p, ok := strings.CutSuffix(path, " (deleted)"); ok {
			path, m.deleted = p, true
		}
		m.path = path
		out = append(out, m)
	}
	return out, sc.Err()
}

// libKind tells the CUDA runtime from the driver library.
type libKind int

const (
	libRuntime libKind = iota // libcudart
	libDriver                 // libcuda
)

func (k libKind) String() string {
	if k == libDriver {
		return "driver"
	}
	return "runtime"
}

// cudaLibKind recognises a CUDA library by its file name, whatever the
// soname version: libcudart.so, libcudart.so.12, libcudart.so.12.4.127,
// the hashed copies Python wheels carry (libcudart-d0da41ae.so.11.0), and
// libcuda.so.1 / libcuda.so.550.54.15.
func cudaLibKind(path string) (libKind, bool) {
	base := filepath.Base(path)
	if rest, ok := strings.CutPrefix(base, "libcudart"); ok {
		if strings.HasPrefix(rest, ".so") {
			return libRuntime, true
		}
		if h, ok := strings.CutPrefix(rest, "-"); ok {
			if i := strings.Index(h, ".so"); i > 0 {
				return libRuntime, true
			}
		}
		return 0, false
	}
	if strings.HasPrefix(base, "libcuda.so") {
		return libDriver, true
	}
	return 0, false
}

// fileKey names a mapped file by device and inode: the same library mapped
// twice, or reached by two paths, is one library.
type fileKey struct {
	dev   string
	inode uint64
}

// library is one CUDA library a process has mapped.
type library struct {
	kind    libKind
	key     fileKey
	path    string // as the process mapped it
	deleted bool
	// open is /proc/PID/map_files/START-END: the kernel resolves it to the
	// mapped file itself, so probes attach even when the file was deleted
	// or replaced on disk, or lives in another mount namespace.
	open string
	exec [][2]uint64 // executable address ranges in the process
}

// cudaLibraries picks the CUDA libraries out of a process's mappings, in
// the order they are first mapped.
func cudaLibraries(pid int, maps []mapping) []*library {
	var out []*library
	byKey := map[fileKey]*library{}
	for _, m := range maps {
		if m.inode == 0 || m.path == "" {
			continue
		}
		kind, ok := cudaLibKind(m.path)
		if !ok {
			continue
		}
		k := fileKey{m.dev, m.inode}
		l := byKey[k]
		if l == nil {
			l = &library{
				kind:    kind,
				key:     k,
				path:    m.path,
				deleted: m.deleted,
				open:    fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end),
			}
			byKey[k] = l
			out = append(out, l)
		}
		if m.exec() {
			l.exec = append(l.exec, [2]uint64{m.start, m.end})
		}
	}
	return out
}

// fileOffset translates an address in a process to the mapped file and the
// offset in it; ok is false for anonymous memory.
func fileOffset(maps []mapping, addr uint64) (m mapping, off uint64, ok bool) {
	for _, m := range maps {
		if addr >= m.start && addr < m.end {
			if m.inode == 0 || m.path == "" {
				return m, 0, false
			}
			return m, addr - m.start + m.offset, true
		}
	}
	return mapping{}, 0, false
}

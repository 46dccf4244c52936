package cgroup

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Mount is a cgroup hierarchy mounted in this mount namespace.
type Mount struct {
	Point       string   // where it is mounted
	Root        string   // the hierarchy's path shown there: "/", or a sub-tree's
	V2          bool     // the unified hierarchy
	Controllers []string // v1: the controllers bound to it
	// NSRoot is the directory under Point of this process's cgroup
	// namespace root, where the mount shows a tree above that root (Root
	// "/../.."): a node's hierarchy mounted into a container with a cgroup
	// namespace. Another container's cgroup, "/../other" in
	// /proc/PID/cgroup, is then found relative to it. SelfMounts sets it.
	NSRoot string
}

// ParseMountinfo picks the cgroup mounts out of a /proc/PID/mountinfo.
func ParseMountinfo(b []byte) []Mount {
	var out []Mount
	for line := range bytes.Lines(b) {
		// id parent major:minor root point options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(strings.TrimSpace(string(line)), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			out = append(out, Mount{Point: unescape(f[4]), Root: unescape(f[3]), V2: true})
		case "cgroup":
			if len(g) < 3 {
				continue
			}
			out = append(out, Mount{Point: unescape(f[4]), Root: unescape(f[3]), Controllers: strings.Split(g[2], ",")})
		}
	}
	return out
}

// SelfMounts reads this process's cgroup mounts.
func SelfMounts() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	selfCache.Lock()
	defer selfCache.Unlock()
	if bytes.Equal(b, selfCache.mountinfo) && bytes.Equal(self, selfCache.cgroup) {
		return slices.Clone(selfCache.mounts), nil
	}
	mounts := ParseMountinfo(b)
	anchor(mounts, ParseProcCgroup(self), os.Getpid())
	selfCache.mountinfo, selfCache.cgroup, selfCache.mounts = b, self, mounts
	return slices.Clone(mounts), nil
}

// selfCache keeps the last anchored mounts: anchoring walks a node's tree,
// and neither file changes while the mounts and the cgroup stay.
var selfCache struct {
	sync.Mutex
	mountinfo, cgroup []byte
	mounts            []Mount
}

// maxAnchorDirs bounds each level of the search for this process's cgroup
// in a mount showing a tree above its namespace: a node's pods and
// containers are a few hundred.
const maxAnchorDirs = 20000

// anchor sets NSRoot on the mounts that show a tree above this process's
// cgroup namespace root: it looks for the cgroup whose cgroup.procs lists
// pid at the depth where self's cgroup must be, and takes self's path off.
func anchor(mounts []Mount, self Membership, pid int) {
	for i, m := range mounts {
		up := 0
		for seg := range strings.SplitSeq(strings.Trim(m.Root, "/"), "/") {
			if seg != ".." {
				up = -1 // "/../x": a sibling's tree, not one above ours
				break
			}
			up++
		}
		if up <= 0 {
			continue
		}
		own, ok := self.V2, self.HasV2
		if !m.V2 {
			own, ok = "", false
			for _, c := range m.Controllers {
				if p, found := self.ByCtrl[c]; found {
					own, ok = p, true
					break
				}
			}
		}
		if !ok || strings.HasPrefix(own, "/..") {
			continue
		}
		own = path.Clean(own)
		depth := up
		if own != "/" {
			depth += strings.Count(own, "/")
		}
		if d, found := findProcs(m.Point, depth, pid); found {
			root := d
			if own != "/" {
				root = strings.TrimSuffix(d, filepath.FromSlash(own))
			}
			if root != d || own == "/" {
				mounts[i].NSRoot = root
			}
		}
	}
}

// findProcs walks dir's sub-directories depth levels down for the one
// whose cgroup.procs lists pid.
func findProcs(dir string, depth, pid int) (string, bool) {
	level := []string{dir}
	for range depth {
		var next []string
		for _, d := range level {
			ents, err := os.ReadDir(d)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if e.IsDir() {
					next = append(next, filepath.Join(d, e.Name()))
				}
			}
			if len(next) > maxAnchorDirs {
				return "", false
			}
		}
		level = next
	}
	want := strconv.Itoa(pid)
	for _, d := range level {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if strings.TrimSpace(line) == want {
				return d, true
			}
		}
	}
	return "", false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrOutside says that a cgroup is not in this process's view of the
// hierarchy: another cgroup namespace's, or outside a mounted sub-tree.
var ErrOutside = errors.New("outside this process's view of the cgroup tree")

// ErrNotMounted says that no hierarchy with the controller is mounted for
// the process.
var ErrNotMounted = errors.New("no cgroup hierarchy with the controller is mounted")

// Membership is a process's cgroups, as its /proc/PID/cgroup lists them.
type Membership struct {
	V2     string            // the unified hierarchy's path; "" when not listed
	HasV2  bool              // a "0::" line was there
	ByCtrl map[string]string // v1: controller → path
}

// ParseProcCgroup reads a /proc/PID/cgroup.
func ParseProcCgroup(b []byte) Membership {
	m := Membership{ByCtrl: map[string]string{}}
	for line := range bytes.Lines(b) {
		parts := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			m.V2, m.HasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				m.ByCtrl[c] = parts[2]
			}
		}
	}
	return m
}

// Dir returns the directory of the process's cgroup in the hierarchy that
// holds controller: v1's hierarchy of that controller when one is mounted
// and the process is listed in it (hybrid hosts bind controllers there,
// and the unified hierarchy's files then say nothing of them), else the
// unified one. controller "" asks for the unified hierarchy only.
func (m Membership) Dir(mounts []Mount, controller string) (string, error) {
	d, _, err := m.dir(mounts, controller)
	return d, err
}

// dir is Dir, and the mount it found the directory under.
func (m Membership) dir(mounts []Mount, controller string) (string, Mount, error) {
	// A hierarchy can be mounted more than once (a container's own
	// cgroup, and the node's tree beside it): the first that shows the
	// cgroup wins.
	var first error
	if p, ok := m.ByCtrl[controller]; ok && controller != "" {
		for _, mt := range mounts {
			if !mt.V2 && slices.Contains(mt.Controllers, controller) {
				d, err := join(mt, p)
				if err == nil {
					return d, mt, nil
				}
				first = cmp.Or(first, err)
			}
		}
		if first != nil {
			return "", Mount{}, first
		}
	}
	if m.HasV2 {
		for _, mt := range mounts {
			if mt.V2 {
				d, err := join(mt, m.V2)
				if err == nil {
					return d, mt, nil
				}
				first = cmp.Or(first, err)
			}
		}
		if first != nil {
			return "", Mount{}, first
		}
		return "", Mount{}, fmt.Errorf("cgroup %s: no cgroup v2 hierarchy is mounted: %w", m.V2, ErrNotMounted)
	}
	if controller == "" {
		return "", Mount{}, fmt.Errorf("the process is in no cgroup v2 hierarchy: %w", ErrNotMounted)
	}
	return "", Mount{}, fmt.Errorf("%s controller: %w", controller, ErrNotMounted)
}

// join maps a /proc/PID/cgroup path onto a mount whose root may be a
// sub-tree.
func join(m Mount, p string) (string, error) {
	if m.NSRoot != "" {
		d := filepath.Join(m.NSRoot, filepath.FromSlash(p))
		if d != m.Point && !strings.HasPrefix(d, m.Point+string(filepath.Separator)) {
			return "", fmt.Errorf("cgroup %s: %w (above the node's tree mounted at %s)", p, ErrOutside, m.Point)
		}
		return d, nil
	}
	// Another cgroup namespace's cgroup shows as a path up from ours.
	if p == "/.." || strings.HasPrefix(p, "/../") {
		return "", fmt.Errorf("cgroup %s: %w (another cgroup namespace)", p, ErrOutside)
	}
	rel := path.Clean(p)
	if m.Root != "/" {
		r, ok := strings.CutPrefix(rel, m.Root)
		if !ok || (r != "" && r[0] != '/') {
			return "", fmt.Errorf("cgroup %s: %w (the mount at %s shows %s)", p, ErrOutside, m.Point, m.Root)
		}
		rel = r
	}
	return filepath.Join(m.Point, filepath.FromSlash(rel)), nil
}

// ProcessDir is Dir for a process of this PID namespace.
func ProcessDir(pid int, mounts []Mount, controller string) (string, error) {
	m, err := processMembership(pid)
	if err != nil {
		return "", fmt.Errorf("cgroup of PID %d: %w", pid, err)
	}
	d, err := m.Dir(mounts, controller)
	if err != nil {
		return "", fmt.Errorf("cgroup of PID %d: %w", pid, err)
	}
	return d, nil
}

// processMembership reads /proc/PID/cgroup of a process of this PID
// namespace.
func processMembership(pid int) (Membership, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return Membership{}, err
	}
	return ParseProcCgroup(b), nil
}

package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file is replaced whole; a write that fails (here its
// rename, over a folder in the way) leaves what was there as it was, and no
// temporary file behind.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Write(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(blocked, []byte("half")); err == nil {
		t.Fatal("a write over a non-empty folder succeeded")
	}
	if fi, err := os.Stat(filepath.Join(blocked, "inside")); err != nil || !fi.IsDir() {
		t.Fatalf("after a failed write the folder in the way changed: %v", err)
	}
	if err := Write(filepath.Join(dir, "missing", "state.json"), nil); err == nil {
		t.Fatal("a write into a missing folder succeeded")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "first" {
		t.Fatalf("after failed writes: %q, %v; want the first", b, err)
	}
	if err := Write(path, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "second" {
		t.Fatalf("after a second write: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("%d entries in the folder, want the state file and the folder in the way: %v", len(entries), entries)
	}
}

func TestWritableAndSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Writable(path); err != nil {
		t.Fatalf("a writable folder: %v", err)
	}
	if err := Writable(filepath.Join(dir, "missing", "state.json")); err == nil {
		t.Fatal("a missing folder is writable")
	}
	os.WriteFile(path, []byte("{cut"), 0o600)
	aside, err := SetAside(path)
	if err != nil || aside != path+".corrupt" {
		t.Fatalf("set aside as %q, %v", aside, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the damaged file is still at its path: %v", err)
	}
	if b, _ := os.ReadFile(aside); string(b) != "{cut" {
		t.Fatalf("set aside: %q", b)
	}
}

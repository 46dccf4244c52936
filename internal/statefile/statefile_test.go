package statefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file is replaced whole; a write that fails leaves the old
// file as it was, and no temporary file behind.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "first"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := Write(path, func(w io.Writer) error { io.WriteString(w, "half"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v, want boom", err)
	}
	if err := Write(filepath.Join(dir, "missing", "state.json"), func(io.Writer) error { return nil }); err == nil {
		t.Fatal("a write into a missing folder succeeded")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "first" {
		t.Fatalf("after a failed write: %q, %v; want the first", b, err)
	}
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "second"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "second" {
		t.Fatalf("after a second write: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files in the folder, want only the state file: %v", len(entries), entries)
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

// Package statefile holds the sidecar's state files (the baseline's latency
// history, the diagnosis window history): written whole or not at all, so
// that a crash or a power cut mid-save leaves the last good file; checked
// writable at start-up, so that a wrong path is a config error rather than
// a history lost at every restart; and, when one cannot be read, set aside
// for a look, so that a damaged cache never keeps the sidecar (and the model
// server behind it) from starting.
package statefile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with b: written to a temporary file beside it,
// synced to disk, then renamed over it, and the folder synced so the
// rename survives a power cut too.
func Write(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		// Without it, a filesystem may commit the rename before the data
		// (XFS, ext4 without auto_da_alloc) and leave an empty file.
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // best effort: some filesystems cannot sync a folder
		d.Close()
	}
	return nil
}

// Writable checks that Write can replace path: its folder exists and takes
// a new file.
func Writable(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("cannot be saved: %w", err)
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return nil
}

// SetAside renames a file that could not be read to path + ".corrupt" (one
// name: repeated crashes do not pile files up) and returns that name.
func SetAside(path string) (string, error) {
	aside := path + ".corrupt"
	if err := os.Rename(path, aside); err != nil {
		return "", err
	}
	return aside, nil
}

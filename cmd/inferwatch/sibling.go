package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// The ext_proc server and the injector are binaries of their own
// (cmd/inferwatch-extproc, cmd/inferwatch-inject): every package a Go
// binary links is initialised at start-up, and theirs (go-control-plane's
// generated protobuf, k8s.io/api's types) added 10 MiB to the resident
// memory of every sidecar, which runs neither. `inferwatch extproc` and
// `inferwatch inject` run them in this process's place.

// execSibling replaces this process with the named binary, taken from this
// binary's directory first, then PATH, keeping arguments and environment.
func execSibling(name string, args []string) error {
	path, err := siblingPath(name)
	if err != nil {
		return err
	}
	argv := append([]string{path}, args...)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("run %s: %w", path, err)
	}
	return nil // not reached
}

func siblingPath(name string) (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("%s is a binary of its own, not found beside inferwatch or on PATH: build it with `go build -o DIR ./cmd/%s` (DIR holding inferwatch), or run `go run ./cmd/%s`", name, name, name)
		}
		return "", fmt.Errorf("find %s: %w", name, err)
	}
	return p, nil
}

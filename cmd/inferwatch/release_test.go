package main

import (
	"debug/elf"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseBuildKeepsMethodDeadCode checks the binaries as
// scripts/build.sh makes them (TestMain builds them so) for text/template.
// Its reflect Method-by-name calls make the linker keep every exported
// method of every type that can reach an interface: 3.2 MB more text and
// rodata in inferwatch, and as much more RSS where the kernel maps the
// binary whole. grpc-go links it through golang.org/x/net/trace unless
// built with grpcnotrace; a new dependency could bring it back another way.
func TestReleaseBuildKeepsMethodDeadCode(t *testing.T) {
	dir := filepath.Dir(binPath)
	for _, name := range []string{"inferwatch", "inferwatch-extproc", "inferwatch-inject"} {
		t.Run(name, func(t *testing.T) {
			f, err := elf.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			syms, err := f.Symbols()
			if err != nil {
				t.Fatalf("symbols of %s: %v", name, err)
			}
			var linked []string
			for _, s := range syms {
				for _, pkg := range []string{"text/template.", "html/template.", "golang.org/x/net/trace."} {
					if strings.HasPrefix(s.Name, pkg) {
						linked = append(linked, s.Name)
					}
				}
			}
			if len(linked) > 0 {
				t.Errorf("%s links %d symbols of text/template, html/template or x/net/trace (first %s): "+
					"method dead-code elimination is off; find the importer with `go list -deps -tags grpcnotrace -f '{{.ImportPath}} {{.Imports}}' ./cmd/%s`",
					name, len(linked), linked[0], name)
			}
			if len(syms) < 1000 {
				t.Errorf("%s has %d symbols: stripped? the check needs its symbol table", name, len(syms))
			}
		})
	}
}

package bpf

import (
	"cmp"
	"debug/elf"
	"fmt"
	"slices"
	"sync"
)

// funcSymbols returns the defined function symbols, dynamic first. A
// stripped file has no .symtab; that is fine.
func funcSymbols(f *elf.File) []elf.Symbol {
	dyn, _ := f.DynamicSymbols()
	all, _ := f.Symbols()
	var out []elf.Symbol
	for _, s := range append(dyn, all...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Section != elf.SHN_UNDEF {
			out = append(out, s)
		}
	}
	return out
}

func offsetToVaddr(f *elf.File, off uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// symTable is one file's function symbols sorted by address.
type symTable struct {
	f    *elf.File // kept for the segment table; sections are not read again
	syms []elf.Symbol
}

func (t *symTable) lookup(off uint64) (string, bool) {
	v, ok := offsetToVaddr(t.f, off)
	if !ok {
		return "", false
	}
	i, found := slices.BinarySearchFunc(t.syms, v, func(s elf.Symbol, v uint64) int { return cmp.Compare(s.Value, v) })
	if found {
		return t.syms[i].Name, true
	}
	if i > 0 && v < t.syms[i-1].Value+t.syms[i-1].Size {
		return t.syms[i-1].Name, true
	}
	return "", false
}

// symbolizer names launched kernels from the ELF symbols of the files
// their host functions live in. It keeps the tables of a few files only:
// the symbol table of a large CUDA library runs to many megabytes.
type symbolizer struct {
	mu     sync.Mutex
	tables map[fileKey]*symTable
	order  []fileKey
}

const maxSymTables = 4

func (z *symbolizer) table(m mapping, open string) (*symTable, error) {
	k := fileKey{m.dev, m.inode}
	if t := z.tables[k]; t != nil {
		return t, nil
	}
	f, err := elf.Open(open)
	if err != nil {
		return nil, err
	}
	syms := funcSymbols(f)
	slices.SortFunc(syms, func(a, b elf.Symbol) int { return cmp.Compare(a.Value, b.Value) })
	t := &symTable{f: f, syms: syms}
	if z.tables == nil {
		z.tables = map[fileKey]*symTable{}
	}
	if len(z.order) == maxSymTables {
		old := z.order[0]
		z.tables[old].f.Close()
		delete(z.tables, old)
		z.order = z.order[1:]
	}
	z.tables[k] = t
	z.order = append(z.order, k)
	return t, nil
}

// name resolves addr in process pid, whose mappings are maps. It returns
// the symbol (mangled, as the file has it) and the file, or empty strings.
func (z *symbolizer) name(pid int, maps []mapping, addr uint64) (sym, file string) {
	m, off, ok := fileOffset(maps, addr)
	if !ok {
		return "", ""
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	t, err := z.table(m, fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end))
	if err != nil {
		return "", m.path
	}
	s, _ := t.lookup(off)
	return s, m.path
}

func (z *symbolizer) close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, t := range z.tables {
		t.f.Close()
	}
	z.tables, z.order = nil, nil
}

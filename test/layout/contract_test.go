// Package layout checks the shape of the repository a provider relies on:
// what the contract packages expose.
package layout

import (
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/exportdata"
)

const module = "github.com/outrigger-ccm/outrigger/"

// contract are the packages a provider imports: what they export is all a
// provider's code and tests may name.
var contract = []string{
	module + "app",
	module + "pkg/provider",
	module + "pkg/provider/gatewayconfig",
	module + "pkg/plugin",
	module + "pkg/conformance",
	module + "pkg/manager",
}

// TestContractNamesNoInternalPackage: no exported identifier of a contract
// package has a type that names an internal package (a field, a parameter,
// a result, a method's), since a provider outside this module cannot name
// or build such a type in its tests. It reads the compiler's export data.
func TestContractNamesNoInternalPackage(t *testing.T) {
	// The contract's sources: a change to them runs the test again.
	var sources []string
	for _, pkg := range contract {
		dir := "../../" + strings.TrimPrefix(pkg, module)
		files, _ := filepath.Glob(dir + "/*.go")
		if len(files) == 0 {
			t.Fatalf("no sources of %s in %s", pkg, dir)
		}
		sources = append(sources, files...)
	}
	imp := exportdata.Importer(t, sources, contract...)
	for _, path := range contract {
		pkg, err := imp.ImportFrom(path, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		scope := pkg.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			w := &walker{seen: map[types.Type]bool{}}
			w.walk(obj.Type(), obj.Name())
			if tn, ok := obj.(*types.TypeName); ok {
				// A defined type's exported methods are its API too.
				if named, ok := tn.Type().(*types.Named); ok {
					for m := range named.Methods() {
						if m.Exported() {
							w.walk(m.Type(), obj.Name()+"."+m.Name())
						}
					}
				}
			}
			for _, f := range w.found {
				t.Errorf("%s.%s names %s", pkg.Name(), name, f)
			}
		}
	}
}

// walker collects the internal packages' types a type reaches through its
// exported parts.
type walker struct {
	seen  map[types.Type]bool
	found []string
}

func (w *walker) walk(typ types.Type, where string) {
	if typ == nil || w.seen[typ] {
		return
	}
	w.seen[typ] = true
	switch t := typ.(type) {
	case *types.Named:
		obj := t.Obj()
		if p := obj.Pkg(); p != nil && strings.Contains(p.Path(), "/internal/") && strings.HasPrefix(p.Path(), module) {
			if msg := p.Path() + "." + obj.Name() + " (in " + where + ")"; !slices.Contains(w.found, msg) {
				w.found = append(w.found, msg)
			}
			return
		}
		if p := obj.Pkg(); p == nil || !strings.HasPrefix(p.Path(), module) {
			// Another module's types are that module's business.
			return
		}
		for a := range t.TypeArgs().Types() {
			w.walk(a, where)
		}
		w.walk(t.Underlying(), where)
		for m := range t.Methods() {
			if m.Exported() {
				w.walk(m.Type(), where+"."+m.Name())
			}
		}
	case *types.Alias:
		w.walk(types.Unalias(t), where)
	case *types.Pointer:
		w.walk(t.Elem(), where)
	case *types.Slice:
		w.walk(t.Elem(), where)
	case *types.Array:
		w.walk(t.Elem(), where)
	case *types.Map:
		w.walk(t.Key(), where)
		w.walk(t.Elem(), where)
	case *types.Chan:
		w.walk(t.Elem(), where)
	case *types.Signature:
		for v := range t.Params().Variables() {
			w.walk(v.Type(), where)
		}
		for v := range t.Results().Variables() {
			w.walk(v.Type(), where)
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() || f.Embedded() {
				w.walk(f.Type(), where+"."+f.Name())
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			if m.Exported() {
				w.walk(m.Type(), where+"."+m.Name())
			}
		}
		for e := range t.EmbeddedTypes() {
			w.walk(e, where)
		}
	}
}

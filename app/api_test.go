package app_test

import (
	"fmt"
	"go/types"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/exportdata"
)

const (
	upstreamPath = "k8s.io/cloud-provider/app"
	ourPath      = "github.com/outrigger-ccm/outrigger/app"
)

// notYet are upstream identifiers app does not have yet (issue 60): a main
// of vSphere's shape, which builds its own command around app.Run, or one
// built with CommandBuilder, does not compile. The list only shrinks: the
// test fails when one of them appears.
var notYet = []string{}

// TestUpstreamAPI compares app's exported API with upstream's
// k8s.io/cloud-provider/app at the version go.mod requires, both read from
// the compiler's export data: every identifier of upstream's must be in
// app, of the same kind and the same type (types named in either package
// compared by name), so a provider's main compiles with only its import
// changed. It reruns against each new k8s.io/cloud-provider.
func TestUpstreamAPI(t *testing.T) {
	// What go list reads: app's source and the required versions.
	sources, _ := filepath.Glob("*.go")
	imp := exportdata.Importer(t, append(sources, "../go.mod", "../go.sum"), upstreamPath, ourPath)
	up, err := imp.Import(upstreamPath)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := imp.ImportFrom(ourPath, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Both packages are "app": a type of either prints the same.
	qualify := func(p *types.Package) string {
		if p.Path() == upstreamPath || p.Path() == ourPath {
			return "app"
		}
		return p.Path()
	}
	// An object's kind and type as a provider's code sees them: parameter
	// names and whether a type is an alias do not count, its underlying
	// type and methods do.
	var typeString func(t types.Type) string
	typeString = func(t types.Type) string {
		sig, ok := t.(*types.Signature)
		if !ok {
			return types.TypeString(t, qualify)
		}
		tuple := func(tu *types.Tuple) string {
			s := "("
			for i := range tu.Len() {
				s += typeString(tu.At(i).Type()) + ","
			}
			return s + ")"
		}
		return fmt.Sprintf("func%s%s variadic=%t", tuple(sig.Params()), tuple(sig.Results()), sig.Variadic())
	}
	describe := func(o types.Object) string {
		switch o := o.(type) {
		case *types.TypeName:
			s := "type " + typeString(o.Type().Underlying())
			if st, ok := o.Type().Underlying().(*types.Struct); ok {
				// Unexported fields are no one's API.
				s = "type struct{"
				for i := range st.NumFields() {
					if f := st.Field(i); f.Exported() {
						s += fmt.Sprintf("%s %s embedded=%t;", f.Name(), typeString(f.Type()), f.Embedded())
					}
				}
				s += "}"
			}
			ms := types.NewMethodSet(types.NewPointer(o.Type()))
			for i := range ms.Len() {
				if m := ms.At(i).Obj(); m.Exported() {
					s += "; method " + m.Name() + typeString(m.Type())
				}
			}
			return s
		case *types.Const:
			return "const " + typeString(o.Type()) + " = " + o.Val().ExactString()
		case *types.Var:
			return "var " + typeString(o.Type())
		default:
			return fmt.Sprintf("%T %s", o, typeString(o.Type()))
		}
	}
	for _, name := range up.Scope().Names() {
		o := up.Scope().Lookup(name)
		if !o.Exported() {
			continue
		}
		mine := ours.Scope().Lookup(name)
		if slices.Contains(notYet, name) {
			if mine != nil {
				t.Errorf("%s is in app now: take it off notYet", name)
			}
			continue
		}
		if mine == nil {
			t.Errorf("app lacks upstream's %s: %s", name, describe(o))
			continue
		}
		if got, want := describe(mine), describe(o); got != want {
			t.Errorf("app's %s differs from upstream's:\n got: %s\nwant: %s", name, got, want)
		}
	}
}

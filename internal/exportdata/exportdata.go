// Package exportdata reads packages' types from the compiler's export
// data, for the tests that check an API by its types (app's against
// upstream's, the contract naming no internal package).
package exportdata

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"testing"
)

// Importer builds pkgs (go list -export) and imports them and their
// dependencies from what the compiler wrote. go test caches a result by the
// files the test opens: watched are the files whose change must run the
// test again (the packages' sources, go.mod), opened here.
func Importer(t testing.TB, watched []string, pkgs ...string) types.ImporterFrom {
	t.Helper()
	for _, f := range watched {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	files := map[string]string{}
	dec := json.NewDecoder(bufio.NewReader(bytes.NewReader(out)))
	for dec.More() {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		files[p.ImportPath] = p.Export
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := files[path]
		if !ok || f == "" {
			return nil, os.ErrNotExist
		}
		return os.Open(f)
	}).(types.ImporterFrom)
}

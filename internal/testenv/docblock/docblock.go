// Package docblock checks that code shown in the docs is the code built and
// tested.
package docblock

import (
	"os"
	"strings"
	"testing"
)

// Check checks that the Go block between <!-- name:begin --> and
// <!-- name:end --> in the doc at docPath is exactly the file at srcPath and
// at most maxLines long: the docs show code that is built and tested.
func Check(t testing.TB, docPath, name, srcPath string, maxLines int) {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- "+name+":begin -->\n```go\n")
	block, _, ok2 := strings.Cut(block, "```\n<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no %s block", docPath, name)
	}
	src, err := os.ReadFile(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	if block != string(src) {
		t.Fatalf("the main.go in %s differs from %s:\n%s", docPath, srcPath, block)
	}
	if n := strings.Count(block, "\n"); n > maxLines {
		t.Errorf("%s has %d lines, the docs promise at most %d", srcPath, n, maxLines)
	}
}

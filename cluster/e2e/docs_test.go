package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDocsShowSummaries checks that docs/e2e.md shows each JUnit summary
// committed under docs/e2e/ as the table Markdown makes of it, so the page
// and the record cannot drift apart.
func TestDocsShowSummaries(t *testing.T) {
	files, err := filepath.Glob("../../docs/e2e/*.xml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no JUnit summary under docs/e2e")
	}
	page, err := os.ReadFile("../../docs/e2e.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		run := readSummary(t, f)
		if table := Markdown(run.Results); !bytes.Contains(page, []byte(table)) {
			t.Errorf("docs/e2e.md does not show %s as its table:\n%s", filepath.Base(f), table)
		}
		if !bytes.Contains(page, []byte(run.Commit)) || !bytes.Contains(page, []byte("e2e/"+filepath.Base(f))) {
			t.Errorf("docs/e2e.md does not name %s and its commit %s", filepath.Base(f), run.Commit)
		}
	}
}

// readSummary reads a committed JUnit summary.
func readSummary(t *testing.T, file string) Run {
	t.Helper()
	r, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run, err := ReadJUnit(r)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return run
}

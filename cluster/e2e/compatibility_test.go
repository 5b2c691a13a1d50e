package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// compatibilityRow is the row docs/compatibility.md gives one run of
// `make e2e-matrix`, whose JUnit summary is docs/e2e/compatibility/<file>.
func compatibilityRow(run Run, file string) string {
	n := map[string]int{}
	for _, r := range run.Results {
		n[r.Status]++
	}
	el := run.Elapsed.Round(time.Second)
	return fmt.Sprintf("| %s | %d | %d | %d | %d min %d s | %s | `%s` | [%s](e2e/compatibility/%s) |",
		run.Kubernetes, n["passed"], n["failed"], n["skipped"], int(el.Minutes()), int(el.Seconds())%60,
		run.Started.UTC().Format("2006-01-02 15:04 UTC"), run.Commit, file, file)
}

// TestCompatibilityShowsSummaries checks that docs/compatibility.md has the
// row of each JUnit summary `make e2e-matrix` left under
// docs/e2e/compatibility/, so the page says what the record holds.
func TestCompatibilityShowsSummaries(t *testing.T) {
	files, err := filepath.Glob("../../docs/e2e/compatibility/*.xml")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if row := compatibilityRow(readSummary(t, f), filepath.Base(f)); !bytes.Contains(page, []byte(row)) {
			t.Errorf("docs/compatibility.md lacks the row of %s:\n%s", filepath.Base(f), row)
		}
	}
}

func TestCompatibilityRow(t *testing.T) {
	run := Run{Kubernetes: "v1.35.4", Commit: "0123abc", Elapsed: 312400 * time.Millisecond,
		Started: time.Date(2026, 11, 25, 17, 0, 0, 0, time.UTC),
		Results: []Result{{Status: "passed"}, {Status: "passed"}, {Status: "failed"}, {Status: "skipped"}}}
	want := "| v1.35.4 | 2 | 1 | 1 | 5 min 12 s | 2026-11-25 17:00 UTC | `0123abc` | [v1.35.4.xml](e2e/compatibility/v1.35.4.xml) |"
	if got := compatibilityRow(run, "v1.35.4.xml"); got != want {
		t.Errorf("row:\n got %s\nwant %s", got, want)
	}
}

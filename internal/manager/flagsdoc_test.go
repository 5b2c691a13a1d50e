package manager

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/flags.md's generated reference")

const (
	refBegin = "<!-- BEGIN GENERATED: go test ./internal/manager -run TestFlagsDoc -update-docs -->\n"
	refEnd   = "<!-- END GENERATED -->\n"
)

// TestFlagsDocIsCurrent fails when docs/flags.md's reference tables are not
// what the flag set gives; -update-docs rewrites them.
func TestFlagsDocIsCurrent(t *testing.T) {
	const path = "../../docs/flags.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, refBegin), strings.Index(doc, refEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the generated section markers %q ... %q", path, refBegin, refEnd)
	}
	want := doc[:i+len(refBegin)] + FlagsReference() + doc[j:]
	if want == doc {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is stale: run go test ./internal/manager -run TestFlagsDoc -update-docs", path)
}

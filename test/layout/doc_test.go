package layout

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLayoutDocNamesEveryPackage: docs/layout.md is where a newcomer finds
// a folder, so every package of the root module is named there by its path;
// a new package without a line on that page fails here.
func TestLayoutDocNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-tags", "integration", "-f", "{{.Dir}}", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := exec.Command("go", "list", "-f", "{{.Dir}}", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(root)) + "/"
	dirs := strings.Fields(string(out))
	if len(dirs) < 20 {
		t.Fatalf("go list gave %d packages, want the root module's", len(dirs))
	}
	for _, d := range dirs {
		rel, ok := strings.CutPrefix(d, prefix)
		if !ok {
			continue // the module root itself has no package
		}
		if !strings.Contains(string(doc), rel) {
			t.Errorf("docs/layout.md does not name %s: add it to the table", rel)
		}
	}
}

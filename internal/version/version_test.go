package version

import (
	"os"
	"regexp"
	"testing"
)

// The chart installs the image of the same version: its version and
// appVersion are Version, and CHANGELOG.md has a section for it.
func TestOneVersion(t *testing.T) {
	chart, err := os.ReadFile("../../charts/outrigger/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"version", "appVersion"} {
		m := regexp.MustCompile(`(?m)^` + field + `: "?([^"\s]+)"?$`).FindSubmatch(chart)
		if m == nil || string(m[1]) != Version {
			t.Errorf("charts/outrigger/Chart.yaml %s is %q, want %q (internal/version)", field, m, Version)
		}
	}
	changelog, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(Version) + `\]`).Match(changelog) {
		t.Errorf("CHANGELOG.md has no section ## [%s]", Version)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(Version) {
		t.Errorf("Version %q is not MAJOR.MINOR.PATCH", Version)
	}
}

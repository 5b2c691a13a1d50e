package main

import (
	"os"
	"strings"
	"testing"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"
)

// TestDocsTableIsTheReports: docs/gateway.md shows the committed report,
// as Publish writes it.
func TestDocsTableIsTheReports(t *testing.T) {
	data, err := os.ReadFile("../../../../docs/gateway/conformance-report.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r confv1.ConformanceReport
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.ProfileReports) == 0 {
		t.Fatal("the committed report has no profiles")
	}
	md, err := os.ReadFile("../../../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, got, ok := strings.Cut(string(md), Marker)
	if !ok {
		t.Fatalf("docs/gateway.md has no line %s", Marker)
	}
	if want := "\n\n" + Table(r); got != want {
		t.Errorf("docs/gateway.md's summary is not the committed report's: run make gateway-conformance-publish\ngot:%s\nwant:%s", got, want)
	}
}

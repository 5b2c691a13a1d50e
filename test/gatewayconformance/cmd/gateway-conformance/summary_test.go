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

// TestTableNamesFailedTests: a failed run's summary says which tests failed,
// core or extended, as the summary is all a CI log may keep of the run.
func TestTableNamesFailedTests(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    confv1.ProfileReport
		want string
	}{
		{"core", confv1.ProfileReport{Name: "GATEWAY-HTTP", Core: confv1.Status{Result: confv1.Failure,
			FailedTests: []string{"HTTPRouteSimpleSameNamespace"}}},
			"GATEWAY-HTTP core tests failed: HTTPRouteSimpleSameNamespace."},
		{"extended", confv1.ProfileReport{Name: "GATEWAY-HTTP", Core: confv1.Status{Result: confv1.Success},
			Extended: &confv1.ExtendedStatus{Status: confv1.Status{Result: confv1.Failure,
				FailedTests: []string{"HTTPRouteQueryParamMatching"}}, SupportedFeatures: []string{"HTTPRouteQueryParamMatching"}}},
			"GATEWAY-HTTP extended tests failed: HTTPRouteQueryParamMatching."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Table(confv1.ConformanceReport{ProfileReports: []confv1.ProfileReport{tc.p}})
			if !strings.Contains(got, tc.want) {
				t.Errorf("the summary does not say %q:\n%s", tc.want, got)
			}
		})
	}
}

package main

import (
	"os"
	"strings"
	"testing"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"
)

// TestDocsTableIsTheReports: docs/gateway.md shows the committed reports,
// each channel's as Publish writes it.
func TestDocsTableIsTheReports(t *testing.T) {
	md, err := os.ReadFile("../../../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, channel := range []string{"standard", "experimental"} {
		name, marker := reportFile(channel)
		data, err := os.ReadFile("../../../../docs/gateway/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var r confv1.ConformanceReport
		if err := yaml.UnmarshalStrict(data, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.ProfileReports) == 0 || r.GatewayAPIChannel != channel {
			t.Fatalf("the committed %s has no profiles, or is of the %q channel", name, r.GatewayAPIChannel)
		}
		_, rest, ok := strings.Cut(string(md), marker)
		if !ok {
			t.Fatalf("docs/gateway.md has no line %s", marker)
		}
		if got, _ := generatedPart(rest); got != "\n\n"+Table(r) && got != "\n\n"+Table(r)+"\n" {
			t.Errorf("docs/gateway.md's %s summary is not the committed report's: run make gateway-conformance-publish\ngot:%s\nwant:%s", channel, got, Table(r))
		}
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

// TestPublishKeepsTheOtherChannelAndTheText: publishing one channel's
// report replaces its own summary only; the prose between the summaries and
// the other channel's summary stay as they were.
func TestPublishKeepsTheOtherChannelAndTheText(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(root+"/docs", 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "# Gateway\n\nintro\n\n" + Marker + "\n\nold standard\n\n### The experimental channel\n\nprose\n\n" + ExperimentalMarker + "\n\nold experimental\n"
	if err := os.WriteFile(root+"/docs/gateway.md", []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	publish := func(channel, project string) {
		t.Helper()
		r := confv1.ConformanceReport{GatewayAPIChannel: channel, Implementation: confv1.Implementation{Project: project}}
		data, err := yaml.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		report := t.TempDir() + "/report.yaml"
		if err := os.WriteFile(report, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Publish(report, root); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // twice: publishing is stable
		publish("standard", "std-run")
		publish("experimental", "exp-run")
	}
	got, err := os.ReadFile(root + "/docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	std := Table(confv1.ConformanceReport{GatewayAPIChannel: "standard", Implementation: confv1.Implementation{Project: "std-run"}})
	exp := Table(confv1.ConformanceReport{GatewayAPIChannel: "experimental", Implementation: confv1.Implementation{Project: "exp-run"}})
	want := "# Gateway\n\nintro\n\n" + Marker + "\n\n" + std + "\n### The experimental channel\n\nprose\n\n" + ExperimentalMarker + "\n\n" + exp
	if string(got) != want {
		t.Errorf("docs/gateway.md after publishing both channels:\n%s\nwant:\n%s", got, want)
	}
	for _, name := range []string{"conformance-report.yaml", "conformance-report-experimental.yaml"} {
		if _, err := os.Stat(root + "/docs/gateway/" + name); err != nil {
			t.Error(err)
		}
	}
}

// TestTableIgnoresTheSuitesOrder: the suite lists profiles and features in
// an order of its own that changes between runs; two runs with the same
// results publish the same summary.
func TestTableIgnoresTheSuitesOrder(t *testing.T) {
	profile := func(name string, features ...string) confv1.ProfileReport {
		return confv1.ProfileReport{Name: name, Core: confv1.Status{Result: confv1.Success},
			Extended: &confv1.ExtendedStatus{Status: confv1.Status{Result: confv1.Success}, SupportedFeatures: features}}
	}
	one := confv1.ConformanceReport{ProfileReports: []confv1.ProfileReport{
		profile("GATEWAY-TLS", "GatewayPort8080"), profile("GATEWAY-HTTP", "HTTPRouteQueryParamMatching", "GatewayPort8080", "HTTPRouteCORS")}}
	other := confv1.ConformanceReport{ProfileReports: []confv1.ProfileReport{
		profile("GATEWAY-HTTP", "HTTPRouteCORS", "HTTPRouteQueryParamMatching", "GatewayPort8080"), profile("GATEWAY-TLS", "GatewayPort8080")}}
	if a, b := Table(one), Table(other); a != b {
		t.Errorf("the same results in another order give another summary:\n%s\n%s", a, b)
	}
	got := Table(one)
	if i, j := strings.Index(got, "| GATEWAY-HTTP"), strings.Index(got, "| GATEWAY-TLS"); i < 0 || j < i {
		t.Errorf("profiles not in name order:\n%s", got)
	}
	if !strings.Contains(got, "GatewayPort8080, HTTPRouteCORS, HTTPRouteQueryParamMatching") {
		t.Errorf("features not in name order:\n%s", got)
	}
	if one.ProfileReports[0].Name != "GATEWAY-TLS" || one.ProfileReports[1].Extended.SupportedFeatures[0] != "HTTPRouteQueryParamMatching" {
		t.Error("Table reordered the report it was given")
	}
}

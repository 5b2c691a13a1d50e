package main

import (
	"fmt"
	"os"
	"strings"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"
)

// summarize reads the suite's report and writes a Markdown table of it to
// out, which it returns too.
func summarize(report, out string) (string, error) {
	data, err := os.ReadFile(report)
	if err != nil {
		return "", fmt.Errorf("no conformance report: %w", err)
	}
	var r confv1.ConformanceReport
	if err := yaml.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("reading %s: %w", report, err)
	}
	md := Table(r)
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return "", err
	}
	return md, nil
}

// Table is the report as docs/gateway.md shows it: per profile, core and
// extended results with their counts and the tests that failed.
func Table(r confv1.ConformanceReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Gateway API %s (%s channel), %s %s, %s.\n\n", r.GatewayAPIVersion, r.GatewayAPIChannel, r.Project, r.Version, r.Date)
	b.WriteString("| profile | core | passed | failed | skipped | extended features |\n| --- | --- | ---: | ---: | ---: | --- |\n")
	for _, p := range r.ProfileReports {
		ext := "none claimed"
		if p.Extended != nil && len(p.Extended.SupportedFeatures) > 0 {
			ext = fmt.Sprintf("%s: %s (%d passed, %d failed)", p.Extended.Result, strings.Join(p.Extended.SupportedFeatures, ", "),
				p.Extended.Statistics.Passed, p.Extended.Statistics.Failed)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s |\n", p.Name, p.Core.Result,
			p.Core.Statistics.Passed, p.Core.Statistics.Failed, p.Core.Statistics.Skipped, ext)
	}
	for _, p := range r.ProfileReports {
		if len(p.Core.FailedTests) > 0 {
			fmt.Fprintf(&b, "\n%s core tests failed: %s.\n", p.Name, strings.Join(p.Core.FailedTests, ", "))
		}
		if len(p.Core.SkippedTests) > 0 {
			fmt.Fprintf(&b, "\n%s core tests skipped: %s.\n", p.Name, strings.Join(p.Core.SkippedTests, ", "))
		}
	}
	return b.String()
}

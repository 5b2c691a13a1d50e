package main

import (
	"strings"
	"testing"
)

func TestFailedOutput(t *testing.T) {
	log := `=== RUN   TestGatewayConformance
=== RUN   TestGatewayConformance/HTTPRouteSimpleSameNamespace
    suite.go:1: setting up
=== RUN   TestGatewayConformance/GatewayPort8080
=== PAUSE TestGatewayConformance/GatewayPort8080
=== CONT  TestGatewayConformance/GatewayPort8080
    http.go:10: request 1 not ready yet
=== NAME  TestGatewayConformance/HTTPRouteSimpleSameNamespace
    http.go:20: request passed
=== NAME  TestGatewayConformance/GatewayPort8080
    http.go:10: request 2 not ready yet
    http.go:11: timeout while waiting after 2 attempts
--- FAIL: TestGatewayConformance (10.00s)
    --- PASS: TestGatewayConformance/HTTPRouteSimpleSameNamespace (1.00s)
    --- FAIL: TestGatewayConformance/GatewayPort8080 (9.00s)
FAIL
`
	got, err := failedOutput(strings.NewReader(log), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := `--- FAIL: TestGatewayConformance/GatewayPort8080, its last lines:
    http.go:10: request 2 not ready yet
    http.go:11: timeout while waiting after 2 attempts
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got, _ := failedOutput(strings.NewReader("--- PASS: TestGatewayConformance (1.00s)\n"), 2); got != "" {
		t.Errorf("a passing run has failures:\n%s", got)
	}
}

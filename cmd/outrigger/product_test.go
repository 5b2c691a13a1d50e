package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The image's binary (built with -tags product, read-only root file
// system, no /tmp) must not link test harnesses: controller-runtime's
// envtest loads a package that makes a directory under the user's cache
// or /tmp at start, and panics where it cannot. Linked once through a
// package the gateway-controller imported, every pod crash-looped.
func TestProductBinaryLinksNoTestHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "product", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "testing" || strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime/pkg/envtest") ||
			strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime/pkg/internal/testing") {
			t.Errorf("the product binary links %s", pkg)
		}
	}
}

package app

import (
	"maps"
	"slices"
	"testing"

	"k8s.io/cloud-provider/names"
)

// TestDefaultConstructorsAreUpstreams: the default constructors, derived
// from internal/manager's list of controllers, are upstream's four, each
// with upstream's client name and a wrapper that runs Outrigger's
// controller, as a provider's main written for upstream expects.
func TestDefaultConstructorsAreUpstreams(t *testing.T) {
	want := map[string]string{
		names.CloudNodeController:          "node-controller",
		names.CloudNodeLifecycleController: "node-controller",
		names.ServiceLBController:          "service-controller",
		names.NodeRouteController:          "route-controller",
	}
	if got := slices.Sorted(maps.Keys(DefaultInitFuncConstructors)); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("DefaultInitFuncConstructors has %v, want %v", got, slices.Sorted(maps.Keys(want)))
	}
	for name, c := range DefaultInitFuncConstructors {
		if c.InitContext.ClientName != want[name] {
			t.Errorf("%s: ClientName %q, want %q", name, c.InitContext.ClientName, want[name])
		}
		if !isOutriggers(c) {
			t.Errorf("%s: constructor is not upstream's wrapper", name)
		}
	}
}

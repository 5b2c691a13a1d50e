package manager

import (
	"maps"
	"slices"
	"testing"
)

// TestTablesFromDescriptors: the tables derived from the list of
// descriptors are those the manager had written out by hand before
// (issue #58): the same --controllers names in the same start order, the
// same upstream aliases, the same ServiceAccounts and the same names a
// leader-migration configuration may use.
func TestTablesFromDescriptors(t *testing.T) {
	wantShipped := []string{"cloud-node-controller", "cloud-node-lifecycle-controller", "service-lb-controller",
		"node-ipam-controller", "node-route-controller", "gateway-controller"}
	if !slices.Equal(shippedControllers, wantShipped) {
		t.Errorf("shippedControllers = %v, want %v", shippedControllers, wantShipped)
	}
	wantAliases := map[string]string{
		"cloud-node":           "cloud-node-controller",
		"cloud-node-lifecycle": "cloud-node-lifecycle-controller",
		"service":              "service-lb-controller",
		"route":                "node-route-controller",
	}
	if !maps.Equal(flagAliases, wantAliases) {
		t.Errorf("flagAliases = %v, want %v", flagAliases, wantAliases)
	}
	wantAccounts := map[string]string{
		"cloud-node-controller":           "node-controller",
		"cloud-node-lifecycle-controller": "node-controller",
		"service-lb-controller":           "service-controller",
		"node-route-controller":           "route-controller",
		"node-ipam-controller":            "node-controller",
		"gateway-controller":              "gateway-controller",
	}
	if !maps.Equal(serviceAccounts, wantAccounts) {
		t.Errorf("serviceAccounts = %v, want %v", serviceAccounts, wantAccounts)
	}
	wantMigration := map[string]string{
		"route":                           "node-route-controller",
		"route-controller":                "node-route-controller",
		"node-route-controller":           "node-route-controller",
		"service":                         "service-lb-controller",
		"service-controller":              "service-lb-controller",
		"service-lb-controller":           "service-lb-controller",
		"cloud-node-lifecycle":            "cloud-node-lifecycle-controller",
		"cloud-node-lifecycle-controller": "cloud-node-lifecycle-controller",
		"cloud-node":                      "cloud-node-controller",
		"cloud-node-controller":           "cloud-node-controller",
		"nodeipam":                        "node-ipam-controller",
		"node-ipam":                       "node-ipam-controller",
		"node-ipam-controller":            "node-ipam-controller",
	}
	if !maps.Equal(migrationAliases, wantMigration) {
		t.Errorf("migrationAliases = %v, want %v", migrationAliases, wantMigration)
	}
}

// TestEveryDescriptorIsComplete: every controller of the list has a name,
// a ServiceAccount and a setup, and no name or alias is used twice.
func TestEveryDescriptorIsComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range controllers {
		if d.Name == "" || d.ServiceAccount == "" || d.Build == nil {
			t.Errorf("descriptor %q lacks a name, a ServiceAccount or Build", d.Name)
		}
		for _, name := range append([]string{d.Name}, d.Aliases...) {
			if seen[name] {
				t.Errorf("%q is used twice", name)
			}
			seen[name] = true
		}
	}
}

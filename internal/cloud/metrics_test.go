package cloud

import (
	"context"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/metricstest"
)

// Two tenants' layers of one provider in one process (tenant mode) count
// their calls under their own tenant label, and one tenant's series go
// when it is forgotten while the other's stay.
func TestTenantsCallsAreCountedUnderTheirOwnTenant(t *testing.T) {
	const provider = "metrics-tenants-test"
	// What an earlier run of the test in this process (-count) left.
	ForgetTenant("shop")
	ForgetTenant("blog")
	ok := func(context.Context, int64) error { return nil }
	a, _ := New(&scripted{answer: ok}, Options{Name: provider, Tenant: "shop"}).Instances()
	b, _ := New(&scripted{answer: ok}, Options{Name: provider, Tenant: "blog"}).Instances()
	calls := func(tenant string) float64 {
		return metricstest.Value(t, "outrigger_cloud_calls_total", map[string]string{"provider": provider, "tenant": tenant, "method": "InstanceMetadata"})
	}
	for i := range 3 {
		if _, err := a.InstanceMetadata(context.Background(), node("shop-"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.InstanceMetadata(context.Background(), node("blog-a")); err != nil {
		t.Fatal(err)
	}
	if got := calls("shop"); got != 3 {
		t.Errorf("tenant shop: %v calls counted, want 3", got)
	}
	if got := calls("blog"); got != 1 {
		t.Errorf("tenant blog: %v calls counted, want 1", got)
	}
	if got := calls(""); got != 0 {
		t.Errorf("no tenant: %v calls counted, want 0", got)
	}

	ForgetTenant("shop")
	if got := calls("shop"); got != 0 {
		t.Errorf("forgotten tenant shop: %v calls still reported", got)
	}
	if got := calls("blog"); got != 1 {
		t.Errorf("tenant blog after shop was forgotten: %v calls counted, want 1", got)
	}
	for _, name := range []string{"outrigger_cloud_call_duration_seconds", "outrigger_cloud_family_concurrency_limit", "outrigger_cloud_family_rate_limit"} {
		if got := metricstest.Value(t, name, map[string]string{"provider": provider, "tenant": "shop"}); got != 0 {
			t.Errorf("%s: forgotten tenant shop still reports %v", name, got)
		}
	}
}

package tenants

import (
	"reflect"
	"testing"
	"time"
)

// Each tenant's state is told from the tenants read, the Leases and this
// replica's runs: serving, waiting or failing here (with the last
// failure), stopping, held by another live replica, or held by none (a
// Lease released or expired). A tenant whose Secret is gone shows while
// it stops.
func TestStatusesTellEachTenantsState(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	failedAt := now.Add(-3 * time.Second)
	live := func(holder, cluster string) Claim {
		return Claim{Holder: holder, Cluster: cluster, Renewed: now.Add(-time.Second), Duration: 15 * time.Second}
	}
	known := []Tenant{
		{Name: "serving", Secret: "serving"},
		{Name: "failing", Secret: "failing"},
		{Name: "connecting", Secret: "connecting"},
		{Name: "claimed", Secret: "claimed"},
		{Name: "elsewhere", Secret: "elsewhere"},
		{Name: "expired", Secret: "expired"},
		{Name: "new", File: "/tenants/new.kubeconfig"},
	}
	claims := map[string]Claim{
		"serving":    live("me", "uid-1"),
		"failing":    live("me", ""),
		"connecting": live("me", ""),
		"claimed":    live("me", ""),
		"elsewhere":  live("other", "uid-2"),
		"expired":    {Holder: "dead", Cluster: "uid-3", Renewed: now.Add(-time.Minute), Duration: 15 * time.Second},
		"removed":    live("me", "uid-4"),
	}
	runs := map[string]runState{
		"serving":    {cluster: "uid-1", running: true},
		"failing":    {failure: lastFailure{reason: ReasonUnreachable, message: "connection refused", at: failedAt}},
		"connecting": {},
		"removed":    {cluster: "uid-4", running: true, stopping: true},
	}
	want := []Status{
		{Name: "claimed", Source: "Secret claimed", Holder: "me", HeldHere: true, State: StateWaiting},
		{Name: "connecting", Source: "Secret connecting", Holder: "me", HeldHere: true, State: StateWaiting},
		{Name: "elsewhere", Source: "Secret elsewhere", Holder: "other", Cluster: "uid-2", State: StateElsewhere},
		{Name: "expired", Source: "Secret expired", State: StateUnclaimed},
		{Name: "failing", Source: "Secret failing", Holder: "me", HeldHere: true, State: StateFailing,
			Reason: ReasonUnreachable, Message: "connection refused", FailedAt: failedAt},
		{Name: "new", Source: "file /tenants/new.kubeconfig", State: StateUnclaimed},
		{Name: "removed", Holder: "me", HeldHere: true, Cluster: "uid-4", State: StateStopping},
		{Name: "serving", Source: "Secret serving", Holder: "me", HeldHere: true, Cluster: "uid-1", State: StateServing},
	}
	got := statuses(known, claims, runs, "me", now)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("statuses:\n got %+v\nwant %+v", got, want)
	}
}

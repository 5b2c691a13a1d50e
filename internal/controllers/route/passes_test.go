package route

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// created counts the creates the table got for a destination.
func (t *table) createdFor(cidr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.created {
		if r.DestinationCIDR == cidr {
			n++
		}
	}
	return n
}

// startHeld starts a pass over one node whose create the table holds until
// release is closed; firstEnded says when that pass's creates have ended.
func startHeld(t *testing.T, node string) (r *reconciler, c client.Client, tbl *table, release chan struct{}, firstEnded chan bool) {
	t.Helper()
	release = make(chan struct{})
	tbl = &table{hold: map[string]chan struct{}{node: release}}
	r, c, _ = newReconciler(t, tbl, rtNode(node, []string{"198.18.1.0/24"}))
	firstEnded = make(chan bool, 1)
	if err := r.start(context.Background(), func(changed bool) { firstEnded <- changed }); err != nil {
		t.Fatal(err)
	}
	return r, c, tbl, release, firstEnded
}

// A pass does not wait for its creates: a node that comes while a create
// for another node hangs is routed by the next pass, which leaves the hung
// destination to the create still on it (no second create, no condition
// written over it).
func TestNextPassDoesNotWaitForHungCreates(t *testing.T) {
	r, c, tbl, release, firstEnded := startHeld(t, "hung")
	ctx := context.Background()
	if err := c.Create(ctx, rtNode("late", []string{"198.18.2.0/24"})); err != nil {
		t.Fatal(err)
	}
	// Bounded, so that a pass waiting for the hung create fails the test
	// rather than hanging it.
	second := make(chan error, 1)
	go func() {
		_, err := r.pass(ctx)
		second <- err
	}()
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second pass waited for the first pass's hung create")
	}
	if got := tbl.destinations(); len(got) != 1 || got[0] != "198.18.2.0/24->late" {
		t.Errorf("routes while the first create hangs = %v, want the late node's", got)
	}
	if cond := condition(t, c, "late"); cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("late node's condition = %+v, want NetworkUnavailable=False", cond)
	}
	if cond := condition(t, c, "hung"); cond != nil {
		t.Errorf("hung node's condition = %+v, want none until its create ends", cond)
	}
	close(release)
	if changed := <-firstEnded; !changed {
		t.Error("the first pass ended without a change; its create made a route")
	}
	if n := tbl.createdFor("198.18.1.0/24"); n != 1 {
		t.Errorf("%d creates for the hung destination, want 1", n)
	}
	if cond := condition(t, c, "hung"); cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("hung node's condition once its create made the route = %+v", cond)
	}
}

// A create that ends while the next pass's list is on its way is not made
// twice: the list, taken before the route existed, does not show it.
func TestCreateEndingDuringTheNextListIsNotRepeated(t *testing.T) {
	r, c, tbl, release, firstEnded := startHeld(t, "a")
	ctx := context.Background()
	listing, taken := make(chan struct{}), make(chan struct{})
	tbl.mu.Lock()
	tbl.listHold, tbl.listTaken = listing, taken
	tbl.mu.Unlock()
	second := make(chan error, 1)
	go func() {
		_, err := r.pass(ctx)
		second <- err
	}()
	// The second list is taken (the route is not there), then the first
	// create ends, then the list comes back.
	<-taken
	close(release)
	<-firstEnded
	listing <- struct{}{}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := tbl.createdFor("198.18.1.0/24"); n != 1 {
		t.Errorf("%d creates for the destination, want 1", n)
	}
	if cond := condition(t, c, "a"); cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("condition = %+v, want NetworkUnavailable=False", cond)
	}
}

package route

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// table is a route table double. The routes it lists carry
// EnableNodeAddresses when nodeAddresses is set, as a provider that tracks
// node addresses on routes does.
type table struct {
	mu            sync.Mutex
	routes        []*cloudprovider.Route
	nodeAddresses bool
	listErr       error
	createErr     error
	created       []cloudprovider.Route
	deleted       []string // destinations
	// hold, when set, holds the creates for a node until its channel is
	// closed; listHold holds each list, taken when it is called (said on
	// listTaken), until it receives.
	hold                map[string]chan struct{}
	listHold, listTaken chan struct{}
}

func (t *table) ListRoutes(context.Context, string) ([]*cloudprovider.Route, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.listErr != nil {
		return nil, t.listErr
	}
	out := make([]*cloudprovider.Route, len(t.routes))
	for i, r := range t.routes {
		c := *r
		c.EnableNodeAddresses = t.nodeAddresses
		out[i] = &c
	}
	if hold := t.listHold; hold != nil {
		t.mu.Unlock()
		t.listTaken <- struct{}{}
		<-hold
		t.mu.Lock()
	}
	return out, nil
}

func (t *table) CreateRoute(_ context.Context, _, _ string, r *cloudprovider.Route) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if hold := t.hold[string(r.TargetNode)]; hold != nil {
		t.mu.Unlock()
		<-hold
		t.mu.Lock()
	}
	if t.createErr != nil {
		return t.createErr
	}
	t.created = append(t.created, *r)
	c := *r
	c.Name = "r-" + r.DestinationCIDR
	t.routes = append(t.routes, &c)
	return nil
}

func (t *table) DeleteRoute(_ context.Context, _ string, r *cloudprovider.Route) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deleted = append(t.deleted, r.DestinationCIDR)
	t.routes = slices.DeleteFunc(t.routes, func(x *cloudprovider.Route) bool { return x.DestinationCIDR == r.DestinationCIDR })
	return nil
}

func (t *table) destinations() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, r := range t.routes {
		out = append(out, fmt.Sprintf("%s->%s", r.DestinationCIDR, r.TargetNode))
	}
	slices.Sort(out)
	return out
}

func rtNode(name string, cidrs []string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func newReconciler(t *testing.T, tbl *table, nodes ...*corev1.Node) (*reconciler, client.Client, *record.FakeRecorder) {
	t.Helper()
	objs := make([]client.Object, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}
	c := fake.NewClientBuilder().WithObjects(objs...).WithStatusSubresource(&corev1.Node{}).Build()
	rec := record.NewFakeRecorder(100)
	return &reconciler{client: c, recorder: rec, opts: Options{
		Routes: tbl, ClusterName: "k", Workers: 4, Period: time.Second,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("fd00:18::/56")},
	}}, c, rec
}

func condition(t *testing.T, c client.Client, name string) *corev1.NodeCondition {
	t.Helper()
	var n corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeNetworkUnavailable {
			return &cond
		}
	}
	return nil
}

func TestBlackholesAreDeleted(t *testing.T) {
	tbl := &table{routes: []*cloudprovider.Route{
		{Name: "a", TargetNode: "a", DestinationCIDR: "198.18.1.0/24", Blackhole: true},    // node still wants it
		{Name: "x", TargetNode: "x", DestinationCIDR: "198.18.9.0/24", Blackhole: true},    // no such node
		{Name: "out", TargetNode: "a", DestinationCIDR: "203.0.113.0/24", Blackhole: true}, // not ours
	}}
	r, c, _ := newReconciler(t, tbl, rtNode("a", []string{"198.18.1.0/24"}))
	if _, err := r.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"203.0.113.0/24->a"}; !slices.Equal(tbl.destinations(), want) {
		t.Fatalf("routes after the first pass = %v, want %v (blackholes in the cluster CIDR deleted)", tbl.destinations(), want)
	}
	// As upstream: the route the node still wants is not recreated in the
	// pass that deleted the blackhole, and the node's condition stays.
	if cond := condition(t, c, "a"); cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("condition after the delete = %+v", cond)
	}
	if _, err := r.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"198.18.1.0/24->a", "203.0.113.0/24->a"}; !slices.Equal(tbl.destinations(), want) {
		t.Errorf("routes after the second pass = %v, want %v", tbl.destinations(), want)
	}
}

func TestRoutesOfMissingNodesAreDeleted(t *testing.T) {
	tbl := &table{routes: []*cloudprovider.Route{
		{Name: "gone", TargetNode: "gone", DestinationCIDR: "198.18.7.0/24"},
		{Name: "anon", DestinationCIDR: "198.18.8.0/24"},
		{Name: "old-cidr", TargetNode: "a", DestinationCIDR: "198.18.6.0/24"},
		// Overlaps the cluster CIDR without being inside it: upstream owns it.
		{Name: "wide", TargetNode: "gone", DestinationCIDR: "198.18.0.0/15"},
		{Name: "outside", TargetNode: "gone", DestinationCIDR: "198.20.0.0/24"},
	}}
	r, _, _ := newReconciler(t, tbl, rtNode("a", []string{"198.18.1.0/24"}))
	if _, err := r.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"198.18.1.0/24->a", "198.20.0.0/24->gone"}; !slices.Equal(tbl.destinations(), want) {
		t.Errorf("routes = %v, want %v", tbl.destinations(), want)
	}
}

func TestNodeAddressesOnRoutes(t *testing.T) {
	addrs := func(a ...string) []corev1.NodeAddress { return rtNode("", nil, a...).Status.Addresses }
	tests := []struct {
		name          string
		nodeAddresses bool // the provider sets EnableNodeAddresses
		routeAddrs    []corev1.NodeAddress
		wantRecreated bool
	}{
		{name: "addresses changed: route recreated with the new ones", nodeAddresses: true, routeAddrs: addrs("198.18.100.1"), wantRecreated: true},
		{name: "same addresses in another order: kept", nodeAddresses: true, routeAddrs: addrs("198.18.100.3", "198.18.100.2")},
		{name: "provider does not track addresses: kept", nodeAddresses: false, routeAddrs: addrs("198.18.100.1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := &table{nodeAddresses: tc.nodeAddresses, routes: []*cloudprovider.Route{
				{Name: "a", TargetNode: "a", DestinationCIDR: "198.18.1.0/24", TargetNodeAddresses: tc.routeAddrs},
			}}
			node := rtNode("a", []string{"198.18.1.0/24"}, "198.18.100.2", "198.18.100.3")
			r, c, _ := newReconciler(t, tbl, node)
			changed, err := r.pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.wantRecreated {
				t.Errorf("changed = %t", changed)
			}
			if !tc.wantRecreated {
				if len(tbl.created)+len(tbl.deleted) != 0 {
					t.Errorf("created %v, deleted %v; want nothing", tbl.created, tbl.deleted)
				}
				return
			}
			if len(tbl.deleted) != 1 || len(tbl.created) != 1 || !slices.Equal(tbl.created[0].TargetNodeAddresses, node.Status.Addresses) {
				t.Errorf("deleted %v, created %+v; want the route recreated with %v", tbl.deleted, tbl.created, node.Status.Addresses)
			}
			if cond := condition(t, c, "a"); cond == nil || cond.Status != corev1.ConditionFalse {
				t.Errorf("condition = %+v", cond)
			}
		})
	}
}

func TestNodeTargetedWithoutPodCIDRsIsUnavailable(t *testing.T) {
	tbl := &table{routes: []*cloudprovider.Route{{Name: "b", TargetNode: "b", DestinationCIDR: "198.18.2.0/24"}}}
	r, c, _ := newReconciler(t, tbl, rtNode("b", nil), rtNode("plain", nil))
	if _, err := r.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cond := condition(t, c, "b"); cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != ConditionReasonNotCreated {
		t.Errorf("condition of a node a route targets but without pod CIDRs = %+v, want True/%s", cond, ConditionReasonNotCreated)
	}
	if cond := condition(t, c, "plain"); cond != nil {
		t.Errorf("a node without pod CIDRs or routes got %+v", cond)
	}
}

func TestFailedCreateEvent(t *testing.T) {
	tbl := &table{createErr: errors.New("quota")}
	r, c, rec := newReconciler(t, tbl, rtNode("a", []string{"198.18.1.0/24"}))
	if _, err := r.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev := <-rec.Events
	if !strings.HasPrefix(ev, "Warning FailedToCreateRoute Could not create route uid-a 198.18.1.0/24 for node a after ") || !strings.HasSuffix(ev, ": quota") {
		t.Errorf("event %q", ev)
	}
	if cond := condition(t, c, "a"); cond == nil || cond.Status != corev1.ConditionTrue {
		t.Errorf("condition = %+v", cond)
	}
}

func TestRouteSyncTotal(t *testing.T) {
	tbl := &table{}
	r, _, _ := newReconciler(t, tbl, rtNode("a", []string{"198.18.1.0/24"}))
	steps := []struct {
		key              reconcile.Request
		listErr          error
		outcome, trigger string
		requeue          bool
	}{
		{key: nodeChangeKey, outcome: "changed", trigger: "node_change"},
		{key: periodicKey, outcome: "noop", trigger: "periodic", requeue: true},
		{key: periodicKey, listErr: errors.New("down"), outcome: "error", trigger: "periodic"},
	}
	for _, s := range steps {
		before := metricstest.Value(t, "route_controller_route_sync_total", map[string]string{"outcome": s.outcome, "trigger": s.trigger})
		tbl.listErr = s.listErr
		res, err := r.Reconcile(context.Background(), s.key)
		r.creates.wg.Wait() // the pass's outcome is known when its creates end
		if (err != nil) != (s.listErr != nil) {
			t.Fatalf("%s: err %v", s.key.Name, err)
		}
		if (res.RequeueAfter > 0) != s.requeue {
			t.Errorf("%s: result %+v", s.key.Name, res)
		}
		if got := metricstest.Value(t, "route_controller_route_sync_total", map[string]string{"outcome": s.outcome, "trigger": s.trigger}); got != before+1 {
			t.Errorf("route_sync_total{outcome=%s,trigger=%s} = %v, want %v", s.outcome, s.trigger, got, before+1)
		}
	}
}

// A pod CIDR outside --cluster-cidr (a node re-registered with a peered
// network's range, a typo in the node's spec) gets no route: it would draw
// that range's traffic to the node. The node hears why once, and says it is
// not routed; its pod CIDRs inside the cluster CIDR are routed as usual.
func TestPodCIDROutsideClusterCIDRIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cidrs   []string
		routed  []string
		refused string
	}{
		{"outside", []string{"203.0.113.0/24"}, nil, "203.0.113.0/24"},
		{"wider than the cluster CIDR", []string{"198.0.0.0/8"}, nil, "198.0.0.0/8"},
		{"dual stack, IPv6 outside", []string{"198.18.1.0/24", "fd00:99::/64"}, []string{"198.18.1.0/24->a"}, "fd00:99::/64"},
		{"inside", []string{"198.18.1.0/24", "fd00:18::/64"}, []string{"198.18.1.0/24->a", "fd00:18::/64->a"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := &table{}
			r, c, rec := newReconciler(t, tbl, rtNode("a", tc.cidrs))
			for range 2 {
				if _, err := r.pass(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got := tbl.destinations(); fmt.Sprint(got) != fmt.Sprint(tc.routed) {
				t.Errorf("routes %v, want %v", got, tc.routed)
			}
			var events []string
			for len(rec.Events) > 0 {
				events = append(events, <-rec.Events)
			}
			cond := condition(t, c, "a")
			if tc.refused == "" {
				if len(events) != 0 || cond == nil || cond.Status != corev1.ConditionFalse {
					t.Errorf("events %v, condition %+v; want none and routed", events, cond)
				}
				return
			}
			want := "Warning " + ReasonRouteOutsideClusterCIDR + " Not creating a route for pod CIDRs " + tc.refused +
				" of node a: outside --cluster-cidr 198.18.0.0/16,fd00:18::/56"
			if len(events) != 1 || events[0] != want {
				t.Errorf("events over two passes %q, want once %q", events, want)
			}
			if cond == nil || cond.Status != corev1.ConditionTrue {
				t.Errorf("condition %+v, want NetworkUnavailable True", cond)
			}
		})
	}
}

// A pod CIDR overlapping one of the cluster's service CIDRs (its
// ServiceCIDR objects) gets no route: it would draw the Services' traffic
// to one node. The node hears why once; its other pod CIDRs are routed.
func TestPodCIDROverlappingServiceCIDRIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cidrs   []string
		routed  []string
		refused string
	}{
		{"inside the service CIDR", []string{"198.18.64.0/24"}, nil, "198.18.64.0/24"},
		{"holding the service CIDR", []string{"198.18.0.0/17"}, nil, "198.18.0.0/17"},
		{"dual stack, IPv4 overlapping", []string{"198.18.64.0/24", "fd00:18::/64"}, []string{"fd00:18::/64->a"}, "198.18.64.0/24"},
		{"apart", []string{"198.18.1.0/24"}, []string{"198.18.1.0/24->a"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := &table{}
			r, c, rec := newReconciler(t, tbl, rtNode("a", tc.cidrs))
			sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"198.18.64.0/20"}}}
			if err := c.Create(context.Background(), sc); err != nil {
				t.Fatal(err)
			}
			r.opts.ServiceCIDRs = c
			for range 2 {
				if _, err := r.pass(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got := tbl.destinations(); fmt.Sprint(got) != fmt.Sprint(tc.routed) {
				t.Errorf("routes %v, want %v", got, tc.routed)
			}
			var events []string
			for len(rec.Events) > 0 {
				events = append(events, <-rec.Events)
			}
			if tc.refused == "" {
				if len(events) != 0 {
					t.Errorf("events %v, want none", events)
				}
				return
			}
			want := "Warning " + ReasonRouteOverlapsServiceCIDR + " Not creating a route for pod CIDRs " + tc.refused +
				" of node a: they overlap the cluster's service CIDRs 198.18.64.0/20"
			if len(events) != 1 || events[0] != want {
				t.Errorf("events over two passes %q, want once %q", events, want)
			}
			if cond := condition(t, c, "a"); cond == nil || cond.Status != corev1.ConditionTrue {
				t.Errorf("condition %+v, want NetworkUnavailable True", cond)
			}
		})
	}
}

// forbidden refuses every read, as the API server does an identity
// without the RBAC for it.
type forbidden struct{ client.Reader }

func (forbidden) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "servicecidrs"}, "", errors.New("no RBAC"))
}

// Service CIDRs that cannot be read leave routes to the cluster CIDR
// check, as before there were any: the pass goes on.
func TestServiceCIDRsUnreadable(t *testing.T) {
	tbl := &table{}
	r, _, _ := newReconciler(t, tbl, rtNode("a", []string{"198.18.64.0/24"}))
	r.opts.ServiceCIDRs = forbidden{}
	if _, err := r.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := tbl.destinations(); fmt.Sprint(got) != "[198.18.64.0/24->a]" {
		t.Errorf("routes %v, want the pod CIDR routed", got)
	}
}

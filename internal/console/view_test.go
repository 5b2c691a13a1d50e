package console

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// viewInputs are 250 nodes (every 50th NotReady) and 250 LoadBalancer
// Services (every 10th pending with a quota condition), more of each than
// a snapshot carries rows of.
func viewInputs() inputs {
	var in inputs
	for i := range 250 {
		in.nodes = append(in.nodes, testNode(fmt.Sprintf("node-%03d", i), netip.AddrFrom4([4]byte{127, 2, 0, byte(i)}).String(), i%50 != 0))
	}
	for i := range 250 {
		svc := lbService(fmt.Sprintf("svc-%03d", i), withVIP(netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}).String()))
		if i%10 == 9 {
			svc = lbService(fmt.Sprintf("svc-%03d", i), withCondition(metav1.ConditionFalse, "QuotaExceeded", "load balancer quota exceeded"))
		}
		in.services = append(in.services, svc)
	}
	in.services = append(in.services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cluster-ip"}})
	return in
}

func TestViews(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		view                 View
		lbs, nodes           int // rows carried
		lbMatch, nodeMatch   int
		firstLB, firstNode   string
		lbsHaveBackendCounts bool
	}{
		{name: "everything, 200 rows of each", lbs: maxRows, nodes: maxRows, lbMatch: 250, nodeMatch: 250, firstLB: "svc-000", firstNode: "node-000", lbsHaveBackendCounts: true},
		{name: "one node by name", view: View{Nodes: "node-249"}, lbs: maxRows, nodes: 1, lbMatch: 250, nodeMatch: 1, firstLB: "svc-000", firstNode: "node-249"},
		{name: "nodes by state", view: View{Nodes: "notready"}, lbs: maxRows, nodes: 5, lbMatch: 250, nodeMatch: 5, firstLB: "svc-000", firstNode: "node-000"},
		{name: "nodes by zone match all", view: View{Nodes: "z1"}, lbs: maxRows, nodes: maxRows, lbMatch: 250, nodeMatch: 250, firstLB: "svc-000", firstNode: "node-000"},
		{name: "Services by reason", view: View{Services: "quota"}, lbs: 25, nodes: maxRows, lbMatch: 25, nodeMatch: 250, firstLB: "svc-009", firstNode: "node-000", lbsHaveBackendCounts: true},
		{name: "Services not ready", view: View{NotReady: true}, lbs: 25, nodes: maxRows, lbMatch: 25, nodeMatch: 250, firstLB: "svc-009", firstNode: "node-000"},
		{name: "Services by name and not ready", view: View{Services: "svc-01", NotReady: true}, lbs: 1, nodes: maxRows, lbMatch: 1, nodeMatch: 250, firstLB: "svc-019", firstNode: "node-000"},
		{name: "Services by address", view: View{Services: "198.18.0.200"}, lbs: 1, nodes: maxRows, lbMatch: 1, nodeMatch: 250, firstLB: "svc-200", firstNode: "node-000"},
		{name: "nothing matches", view: View{Services: "nope", Nodes: "nope"}, lbMatch: 0, nodeMatch: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := viewInputs()
			in.view = tc.view
			s := build(in)
			if len(s.LoadBalancers) != tc.lbs || len(s.Nodes) != tc.nodes {
				t.Fatalf("rows: %d Services and %d nodes, want %d and %d", len(s.LoadBalancers), len(s.Nodes), tc.lbs, tc.nodes)
			}
			// The counts are of everything whatever the filters.
			if want := (Count{Total: 250, Ready: 225, Matching: tc.lbMatch}); s.LoadBalancerCount != want {
				t.Errorf("Service count %+v, want %+v", s.LoadBalancerCount, want)
			}
			if want := (Count{Total: 250, Ready: 245, Matching: tc.nodeMatch}); s.NodeCount != want {
				t.Errorf("node count %+v, want %+v", s.NodeCount, want)
			}
			if tc.lbs > 0 && s.LoadBalancers[0].Name != tc.firstLB {
				t.Errorf("first Service %s, want %s", s.LoadBalancers[0].Name, tc.firstLB)
			}
			if tc.nodes > 0 && s.Nodes[0].Name != tc.firstNode {
				t.Errorf("first node %s, want %s", s.Nodes[0].Name, tc.firstNode)
			}
			// Every row sent carries its details.
			for _, lb := range s.LoadBalancers {
				if lb.BackendsTotal != 250 || lb.BackendsHealthy != 245 || len(lb.Backends) != maxBackendsListed {
					t.Fatalf("%s: backends %d/%d, %d listed", lb.Name, lb.BackendsHealthy, lb.BackendsTotal, len(lb.Backends))
				}
			}
			// The page's JSON needs arrays, not nulls, for empty tables.
			if s.LoadBalancers == nil || s.Nodes == nil {
				t.Error("an empty table is null")
			}
		})
	}
}

func TestPoolTakenBounded(t *testing.T) {
	var services []*corev1.Service
	for i := range maxTaken + 500 {
		services = append(services, lbService(fmt.Sprintf("svc-%d", i), withVIP(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).String())))
	}
	p := poolUsage(Range{Name: "vips", Prefix: mustPrefix("198.18.0.0/16")}, services, nil)
	if p.Used != maxTaken+500 || len(p.Taken) != maxTaken || p.Taken[0].Value != "198.18.0.0" {
		t.Errorf("used %d, %d taken listed from %s: want %d used, the first %d listed", p.Used, len(p.Taken), p.Taken[0].Value, maxTaken+500, maxTaken)
	}
}

func TestParseView(t *testing.T) {
	for _, tc := range []struct {
		query   string
		want    View
		wantErr bool
	}{
		{query: "", want: View{}},
		{query: "services=Web&notReady=1&nodes=+Zone-A+", want: View{Services: "web", NotReady: true, Nodes: "zone-a"}},
		{query: "notReady=true", want: View{NotReady: true}},
		{query: "notReady=0", want: View{}},
		{query: "nodes=" + strings.Repeat("x", maxFilter+1), wantErr: true},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseView(q)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseView(%q) = %+v, %v; want %+v, error %v", tc.query, got, err, tc.want, tc.wantErr)
		}
	}
}

package console

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tenants are sorted by name and counted; Ready counts those some
// replica serves: this one, or another whose Lease names the cluster its
// run serves (a replica's Lease names it only while it does).
func TestTenantView(t *testing.T) {
	in := []Tenant{
		{Name: "shop", State: "Serving", Cluster: "uid-1", HeldHere: true},
		{Name: "blog", State: "Elsewhere", Holder: "replica-2", Cluster: "uid-2"},
		{Name: "wiki", State: "Elsewhere", Holder: "replica-2"},
		{Name: "api", State: "Failing", Reason: "TenantUnreachable", HeldHere: true},
		{Name: "docs", State: "Unclaimed"},
	}
	rows, c := tenantView(in)
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	if want := []string{"api", "blog", "docs", "shop", "wiki"}; !reflect.DeepEqual(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
	if want := (Count{Total: 5, Ready: 2, Matching: 5}); c != want {
		t.Errorf("count %+v, want %+v", c, want)
	}
	if in[0].Name != "shop" {
		t.Error("tenantView sorted its caller's slice")
	}
	if rows, c := tenantView(nil); rows == nil || c.Total != 0 {
		t.Errorf("no tenants: %v, %+v; want an empty list", rows, c)
	}
}

// A console given the tenants shows them beside its cluster's views; one
// without shows no Tenants view.
func TestTenantsInTheSnapshot(t *testing.T) {
	tenants := func() []Tenant {
		return []Tenant{{Name: "cluster-2", State: "Serving", HeldHere: true, Holder: "me"}, {Name: "cluster-1", State: "Waiting", HeldHere: true, Holder: "me"}}
	}
	srv, _ := newTestServer(t, Options{Tenants: tenants}, lbService("web", withVIP("127.0.100.1")))
	var snap Snapshot
	_, body := get(t, srv.URL+"/api/snapshot")
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if !snap.TenantMode || len(snap.Tenants) != 2 || snap.Tenants[0].Name != "cluster-1" || snap.TenantCount.Ready != 1 {
		t.Errorf("tenants: %s", body)
	}
	if snap.NoCluster || len(snap.LoadBalancers) != 1 {
		t.Errorf("the cluster's views missing beside the tenants: %s", body)
	}

	plain, _ := newTestServer(t, Options{}, lbService("web"))
	_, body = get(t, plain.URL+"/api/snapshot")
	if strings.Contains(body, `"tenantMode"`) || strings.Contains(body, `"tenants"`) {
		t.Errorf("a single cluster's console shows tenants: %s", body)
	}
}

// Tenant mode's own console reads no cluster (no Client): it shows the
// tenants only, and pushes a new snapshot when a tenant's state changes,
// though no object does.
func TestTenantModeConsoleWithoutACluster(t *testing.T) {
	var mu sync.Mutex
	state := "Waiting"
	s := New(Options{Interval: 10 * time.Millisecond, Tenants: func() []Tenant {
		mu.Lock()
		defer mu.Unlock()
		return []Tenant{{Name: "shop", State: state, HeldHere: true, Holder: "me"}}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	snapshots := make(chan Snapshot)
	go func() {
		defer close(snapshots)
		r := bufio.NewReader(resp.Body)
		event := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSpace(line)
			if ev, ok := strings.CutPrefix(line, "event: "); ok {
				event = ev
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && event == "snapshot" {
				var snap Snapshot
				if json.Unmarshal([]byte(data), &snap) == nil {
					select {
					case snapshots <- snap:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	next := func() Snapshot {
		t.Helper()
		select {
		case snap, ok := <-snapshots:
			if !ok {
				t.Fatal("stream ended")
			}
			return snap
		case <-time.After(10 * time.Second):
			t.Fatal("no snapshot pushed")
		}
		return Snapshot{}
	}
	first := next()
	if !first.NoCluster || !first.TenantMode || len(first.Tenants) != 1 || first.Tenants[0].State != "Waiting" {
		t.Fatalf("first snapshot: %+v", first)
	}
	if len(first.Warnings) != 0 || len(first.LoadBalancers) != 0 || len(first.Nodes) != 0 {
		t.Errorf("a console without a cluster shows cluster objects or warnings: %+v", first)
	}
	mu.Lock()
	state = "Serving"
	mu.Unlock()
	for snap := next(); snap.Tenants[0].State != "Serving"; snap = next() {
	}
}

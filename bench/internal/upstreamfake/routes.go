package upstreamfake

import (
	"context"
	"fmt"

	cloudprovider "k8s.io/cloud-provider"
)

// routeTable is the cloud's routes (Config.Routes): each call waits the
// cloud's latency, as the load balancer calls do, and none holds the others
// (upstream's fake serializes its route calls under one lock for their whole
// latency, which would measure the fake, not a CCM).
type routeTable struct{ p *provider }

// routeKey names a route in the table: one per cluster, node and CIDR.
func routeKey(clusterName string, r *cloudprovider.Route) string {
	return clusterName + "/" + string(r.TargetNode) + "/" + r.DestinationCIDR
}

func (t routeTable) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	if err := t.p.call(ctx, "ListRoutes"); err != nil {
		return nil, err
	}
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	var out []*cloudprovider.Route
	for _, r := range t.p.routes[clusterName] {
		c := *r
		out = append(out, &c)
	}
	return out, nil
}

// CreateRoute never returns, whatever its context, for a node whose name
// starts with Config.HangPrefix.
func (t routeTable) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	if err := t.p.call(ctx, "CreateRoute"); err != nil {
		return err
	}
	t.p.hangOn("route/" + string(route.TargetNode))
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	key := routeKey(clusterName, route)
	if t.p.routes[clusterName] == nil {
		t.p.routes[clusterName] = map[string]*cloudprovider.Route{}
	}
	if _, ok := t.p.routes[clusterName][key]; ok {
		return fmt.Errorf("route %s exists", key)
	}
	c := *route
	c.Name = key
	t.p.routes[clusterName][key] = &c
	return nil
}

func (t routeTable) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	if err := t.p.call(ctx, "DeleteRoute"); err != nil {
		return err
	}
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	delete(t.p.routes[clusterName], routeKey(clusterName, route))
	return nil
}

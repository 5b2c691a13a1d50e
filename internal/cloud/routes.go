package cloud

import (
	"context"

	cloudprovider "k8s.io/cloud-provider"
)

// Routes returns the provider's route interface behind the layer, or false
// when the provider has none.
func (l *Layer) Routes() (cloudprovider.Routes, bool) {
	r, ok := l.provider.Routes()
	if !ok || r == nil {
		return nil, false
	}
	return routes{l, r}, true
}

type routes struct {
	layer *Layer
	inner cloudprovider.Routes
}

func (r routes) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	return do(ctx, r.layer, call{"ListRoutes", FamilyRoutes, ""}, func(ctx context.Context) ([]*cloudprovider.Route, error) {
		return r.inner.ListRoutes(ctx, clusterName)
	})
}

func (r routes) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	_, err := do(ctx, r.layer, call{"CreateRoute", FamilyRoutes, routeKey(route)}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.inner.CreateRoute(ctx, clusterName, nameHint, route)
	})
	return err
}

func (r routes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	_, err := do(ctx, r.layer, call{"DeleteRoute", FamilyRoutes, routeKey(route)}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.inner.DeleteRoute(ctx, clusterName, route)
	})
	return err
}

// routeKey is the object key of a route call: the route's destination,
// which two routes in one table cannot share (a route's Name is empty on
// create, and a node may have two routes, one per IP family), so a delete
// of a stale route and the create of its replacement never overlap.
func routeKey(route *cloudprovider.Route) string {
	switch {
	case route.DestinationCIDR != "":
		return "route/" + route.DestinationCIDR
	case route.Name != "":
		return "route/name/" + route.Name
	}
	return ""
}

package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simapi"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

var (
	_ cloudprovider.Routes    = (*Provider)(nil)
	_ provider.NodeCIDRSource = (*Provider)(nil)
)

// Routes implements cloudprovider.Interface.
func (p *Provider) Routes() (cloudprovider.Routes, bool) { return p, true }

// routeName is unique per cluster, node and destination (a dual-stack node
// has two routes). The hash covers all three, so uniqueness never rests on
// where the cluster's name ends.
func routeName(clusterName, nameHint, cidr string) string {
	sum := sha256.Sum256([]byte(clusterName + "\x00" + nameHint + "\x00" + cidr))
	return fmt.Sprintf("%s-%s-%s", clusterName, nameHint, hex.EncodeToString(sum[:4]))
}

// routeTags record the cluster a route was made for, by name and, once
// Outrigger set it, by identity (TagClusterID): ListRoutes shows, and
// DeleteRoute deletes, only routes carrying both exactly (never by a name
// prefix, which another cluster's name may share, nor by the name alone,
// which every cluster left at the default shares).
func (p *Provider) routeTags(clusterName string) map[string]string {
	m := map[string]string{TagCluster: clusterName}
	if id := p.clusterIdentity(); id != "" {
		m[TagClusterID] = id
	}
	return m
}

// ListRoutes implements cloudprovider.Routes: the cluster's routes, those
// whose instance is gone marked Blackhole. With an identity, a route of
// another identity is not listed; one made before routes carried an
// identity (say by the upstream CCM before a switch) is, so that a node's
// route is kept as it is, but DeleteRoute leaves it: it may be another
// cluster's of the same name. A provider never given an identity lists by
// name alone.
func (p *Provider) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	all, err := p.client.Routes(ctx)
	if err != nil {
		return nil, err
	}
	id := p.clusterIdentity()
	var out []*cloudprovider.Route
	for _, r := range all {
		if r.Tags[TagCluster] != clusterName || !sameIdentity(r.Tags, id) {
			continue
		}
		out = append(out, &cloudprovider.Route{
			Name:            r.Name,
			TargetNode:      types.NodeName(r.Target),
			DestinationCIDR: r.Destination,
			Blackhole:       r.Blackhole,
		})
	}
	return out, nil
}

// sameIdentity reports whether tags carry the identity id, or none.
func sameIdentity(tags map[string]string, id string) bool {
	got := tags[TagClusterID]
	return got == "" || id == "" || got == id
}

// CreateRoute implements cloudprovider.Routes. A route that already exists
// with the same name (the node's UID is in it), destination and target,
// of this cluster's identity or of none, is success.
func (p *Provider) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	tags := p.routeTags(clusterName)
	r := simapi.Route{
		Name:        routeName(clusterName, nameHint, route.DestinationCIDR),
		Destination: route.DestinationCIDR,
		Target:      string(route.TargetNode),
		Tags:        tags,
	}
	err := p.client.CreateRoute(ctx, r)
	if simapi.IsConflict(err) {
		existing, lerr := p.client.Routes(ctx)
		if lerr != nil {
			return lerr
		}
		for _, e := range existing {
			if e.Name == r.Name && e.Destination == r.Destination && e.Target == r.Target &&
				e.Tags[TagCluster] == clusterName && sameIdentity(e.Tags, tags[TagClusterID]) {
				return nil
			}
		}
	}
	return err
}

// DeleteRoute implements cloudprovider.Routes: only a route made for
// clusterName (and this cluster's identity) is deleted, checked by the
// cloud in the same request.
func (p *Provider) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	return p.client.DeleteRoute(ctx, route.Name, p.routeTags(clusterName))
}

// NodeCIDRs implements provider.NodeCIDRSource.
func (p *Provider) NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error) {
	key, err := instanceKey(node)
	if err != nil {
		return nil, err
	}
	return p.client.PodCIDRs(ctx, key)
}

package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
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

// routeTags record the cluster a route was made for: ListRoutes shows, and
// DeleteRoute deletes, only routes carrying this cluster's name exactly
// (never by a name prefix, which another cluster's name may share).
func routeTags(clusterName string) map[string]string {
	return map[string]string{TagCluster: clusterName}
}

// ListRoutes implements cloudprovider.Routes: the cluster's routes, those
// whose instance is gone marked Blackhole.
func (p *Provider) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	all, err := p.client.Routes(ctx)
	if err != nil {
		return nil, err
	}
	var out []*cloudprovider.Route
	for _, r := range all {
		if r.Tags[TagCluster] != clusterName {
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

// CreateRoute implements cloudprovider.Routes. A route that already exists
// with the same destination and target is success.
func (p *Provider) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	r := simcloud.Route{
		Name:        routeName(clusterName, nameHint, route.DestinationCIDR),
		Destination: route.DestinationCIDR,
		Target:      string(route.TargetNode),
		Tags:        routeTags(clusterName),
	}
	err := p.client.CreateRoute(ctx, r)
	if simcloud.IsConflict(err) {
		existing, lerr := p.client.Routes(ctx)
		if lerr != nil {
			return lerr
		}
		for _, e := range existing {
			if e.Name == r.Name && e.Destination == r.Destination && e.Target == r.Target && e.Tags[TagCluster] == clusterName {
				return nil
			}
		}
	}
	return err
}

// DeleteRoute implements cloudprovider.Routes: only a route made for
// clusterName is deleted, checked by the cloud in the same request.
func (p *Provider) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	return p.client.DeleteRoute(ctx, route.Name, routeTags(clusterName))
}

// NodeCIDRs implements provider.NodeCIDRSource.
func (p *Provider) NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error) {
	key, err := instanceKey(node)
	if err != nil {
		return nil, err
	}
	return p.client.PodCIDRs(ctx, key)
}

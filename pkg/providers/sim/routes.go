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
// whose instance is gone marked Blackhole. A route made before it carried
// a cluster identity is not listed, so never deleted as stale: it may be
// another cluster's of the same name; CreateRoute adopts it for a node
// that exists here. A provider never given an identity lists by name.
func (p *Provider) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	all, err := p.client.Routes(ctx)
	if err != nil {
		return nil, err
	}
	id := p.clusterIdentity()
	var out []*cloudprovider.Route
	for _, r := range all {
		// Without an identity (a CCM that sets none, as the upstream CCM),
		// the name alone, as before identities.
		if r.Tags[TagCluster] != clusterName || (id != "" && r.Tags[TagClusterID] != id) {
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
// with the same destination and target is success. One of the same name
// (the node's UID is in it), destination and target made before routes
// carried a cluster identity is this node's: the cloud re-tags it with
// this cluster's, conditional on it still carrying none.
func (p *Provider) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	tags := p.routeTags(clusterName)
	r := simcloud.Route{
		Name:        routeName(clusterName, nameHint, route.DestinationCIDR),
		Destination: route.DestinationCIDR,
		Target:      string(route.TargetNode),
		Tags:        tags,
	}
	var adopt map[string]string
	if tags[TagClusterID] != "" {
		adopt = map[string]string{TagCluster: clusterName, TagClusterID: ""}
	}
	err := p.client.CreateRoute(ctx, r, adopt)
	if simcloud.IsConflict(err) {
		existing, lerr := p.client.Routes(ctx)
		if lerr != nil {
			return lerr
		}
		for _, e := range existing {
			if e.Name == r.Name && e.Destination == r.Destination && e.Target == r.Target && tagsCarry(e.Tags, tags) {
				return nil
			}
		}
	}
	return err
}

// tagsCarry reports whether tags carry every key=value of want.
func tagsCarry(tags, want map[string]string) bool {
	for k, v := range want {
		if tags[k] != v {
			return false
		}
	}
	return true
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

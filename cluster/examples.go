package cluster

import (
	"context"
	"embed"
	"fmt"

	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Examples are the workloads of cluster/examples that docs/cluster.md
// applies with kubectl (hostnames.yaml: agnhost serve-hostname on each
// node behind a LoadBalancer Service; hybrid.yaml).
//
//go:embed examples/*.yaml
var Examples embed.FS

// Apply creates the objects of a multi-document YAML manifest, as kubectl
// create -f does; objects without a namespace that need one go to default.
func (c *Cluster) Apply(ctx context.Context, manifest []byte) error {
	cl, err := client.New(c.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	objs, err := decodeManifests(manifest)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if namespaced, err := cl.IsObjectNamespaced(o); err != nil {
			return err
		} else if namespaced && o.GetNamespace() == "" {
			o.SetNamespace("default")
		}
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

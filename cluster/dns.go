package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CoreDNSImage is the name `make cluster-images` gives the CoreDNS image.
const CoreDNSImage = "outrigger.local/coredns:v1.14.7"

//go:embed dns.yaml
var dnsManifests []byte

// deployDNS deploys CoreDNS as the kube-dns Service at ClusterDNSIP, which
// every kubelet gives its pods as their nameserver, and waits for it to be
// ready. It runs once the nodes are initialized: like any workload, it
// does not tolerate the uninitialized taint.
func (c *Cluster) deployDNS(ctx context.Context) error {
	cl, err := client.New(c.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	yaml := strings.NewReplacer("COREDNS-IMAGE", CoreDNSImage, "CLUSTER-DNS-IP", ClusterDNSIP).Replace(string(dnsManifests))
	objs, err := decodeManifests([]byte(yaml))
	if err != nil {
		return fmt.Errorf("dns.yaml: %w", err)
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return c.waitUntil(ctx, 2*time.Minute, "CoreDNS to be ready", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &d); err != nil {
			return false, nil
		}
		return d.Status.ReadyReplicas == *d.Spec.Replicas, c.anyExited()
	})
}

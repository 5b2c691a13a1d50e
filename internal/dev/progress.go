package dev

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// nodeCount is how far the nodes are: registered by the kubelet
// simulator, and of those initialized by Outrigger (a providerID, no
// uninitialized taint).
type nodeCount struct {
	Registered, Initialized int
}

// countNodes counts nodes as `outrigger dev` reports them while it starts.
func countNodes(nodes []corev1.Node) nodeCount {
	c := nodeCount{Registered: len(nodes)}
	for _, n := range nodes {
		if n.Spec.ProviderID != "" && !hasUninitializedTaint(n) {
			c.Initialized++
		}
	}
	return c
}

func hasUninitializedTaint(n corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == cloudproviderapi.TaintExternalCloudProvider {
			return true
		}
	}
	return false
}

// nodeProgress says how far the nodes of a starting `outrigger dev` are:
// a line when it starts waiting, one every Every while the count changes
// (and every six Every when it does not), and one when Want nodes are
// initialized.
type nodeProgress struct {
	Client kubernetes.Interface
	Out    io.Writer
	// Want is how many nodes are expected (the sim cloud's instances).
	Want int
	// Poll is how often the nodes are listed; Every how often a line
	// reports a changed count.
	Poll, Every time.Duration
	// Cluster, when set, starts each line (`outrigger dev --clusters`).
	Cluster string
}

func (p nodeProgress) printf(format string, args ...any) {
	if p.Cluster != "" {
		format = p.Cluster + ": " + format
	}
	fmt.Fprintf(p.Out, format, args...)
}

// Run reports until want nodes are initialized or ctx ends.
func (p nodeProgress) Run(ctx context.Context) {
	start := time.Now()
	p.printf("Waiting for %d nodes to register and Outrigger to initialize them...\n", p.Want)
	var reported nodeCount
	lastLine := start
	tick := time.NewTicker(p.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		list, err := p.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		c := countNodes(list.Items)
		elapsed := time.Since(start).Round(100 * time.Millisecond)
		if c.Initialized >= p.Want {
			p.printf("%d of %d nodes registered and initialized by Outrigger in %s: ready to use.\n", c.Initialized, p.Want, seconds(elapsed))
			return
		}
		if since := time.Since(lastLine); since >= p.Every && (c != reported || since >= 6*p.Every) {
			p.printf("Nodes: %d of %d registered, %d initialized (%s)\n", c.Registered, p.Want, c.Initialized, seconds(elapsed))
			reported, lastLine = c, time.Now()
		}
	}
}

// seconds writes d as "2.3 s", as the make steps before write their times.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1f s", d.Seconds())
}

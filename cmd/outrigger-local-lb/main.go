// Command outrigger-local-lb serves the local provider's load balancers
// from the nodes (cloud-config dataPlane: nodes). It runs on every node as
// a DaemonSet with the host's network (deploy/local-lb.yaml): each instance
// holds the VIPs its node owns and answers ARP for them; kube-proxy there
// delivers the traffic. See docs/cluster.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/providers/local"
	"github.com/outrigger-ccm/outrigger/internal/providers/local/announce"
)

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; empty: the in-cluster configuration")
	cloudConfig := flag.String("cloud-config", "", "the local provider's cloud-config, for its VIP pool (the same file Outrigger reads)")
	nodeName := flag.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	link := flag.String("link", "lo", "the link VIPs are added to as /32 addresses")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(klog.NewContext(ctx, klog.Background()), *kubeconfig, *cloudConfig, *nodeName, *link); err != nil {
		klog.Background().Error(err, "outrigger-local-lb failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, cloudConfig, nodeName, link string) error {
	if nodeName == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required")
	}
	f, err := os.Open(cloudConfig)
	if err != nil {
		return fmt.Errorf("--cloud-config: %w", err)
	}
	pool, err := local.Pool(f)
	f.Close()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("client configuration: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", nodeName, err)
	}
	nodeIP, err := internalIP(node)
	if err != nil {
		return err
	}
	addrs, err := announce.NewLinkAddresses(link, nodeIP)
	if err != nil {
		return err
	}
	a := &announce.Announcer{Client: client, NodeName: nodeName, Pool: pool, Addrs: addrs}
	return a.Run(ctx)
}

func internalIP(n *corev1.Node) (netip.Addr, error) {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s has no InternalIP yet", n.Name)
}

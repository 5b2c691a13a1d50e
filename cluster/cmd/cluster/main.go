// Command cluster runs a real Kubernetes cluster on this machine, with
// Outrigger initializing its nodes (docs/cluster.md).
//
//	cluster deps   install the Debian packages the cluster needs
//	cluster up     start it; Ctrl-C (or SIGTERM) stops it and removes everything
//	               (-hybrid: nodes of two platforms, the local and the sim cloud)
//	cluster down   remove what a killed run left behind
//	cluster instance stop|start|delete NODE
//	               act on a node's machine in the local cloud of a running cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outrigger-ccm/outrigger/cluster"
)

func main() {
	// The cluster's API clients (controller-runtime's) log through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	work := fs.String("workdir", "/var/tmp/outrigger-cluster", "directory for the cluster's files (removed on exit)")
	nodes := fs.Int("nodes", 2, "number of nodes")
	outrigger := fs.String("outrigger-image", "bin/outrigger-image.tar", "Outrigger's image tarball (make image)")
	images := fs.String("images", "", "directory of OCI image tarballs to import into every node (default: none)")
	logs := fs.String("logs", "", "keep every process's log in this directory (default: inside -workdir, removed on exit)")
	hybrid := fs.Bool("hybrid", false, "two platforms: even-numbered nodes are sim cloud instances (sim://), served with the local cloud's by one Outrigger")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster deps|up|down|instance [flags]")
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "deps":
		err = cluster.EnsurePackages(ctx, os.Stderr)
	case "down":
		var s *cluster.State
		var release func()
		if release, err = cluster.Lock(*work); err != nil {
			break
		}
		defer release()
		if s, err = cluster.LoadState(*work); err == nil {
			if s == nil {
				fmt.Fprintln(os.Stderr, "nothing to clean up: no state file", cluster.StatePath(*work))
			}
			err = cluster.Cleanup(s, os.Stderr)
		}
	case "up":
		o := cluster.Options{WorkDir: *work, Nodes: *nodes, OutriggerImage: *outrigger, LogDir: *logs, Hybrid: *hybrid}
		if *images != "" {
			o.Images, _ = filepath.Glob(filepath.Join(*images, "*.tar"))
		}
		start := time.Now()
		var c *cluster.Cluster
		if c, err = cluster.Up(ctx, o); err == nil {
			fmt.Fprintf(os.Stderr, "Cluster up in %s: nodes %v initialized by Outrigger.\n", time.Since(start).Round(time.Second), c.Nodes())
			fmt.Fprintf(os.Stderr, "  kubectl --kubeconfig %s get nodes -o wide\n", c.Kubeconfig)
			fmt.Fprintf(os.Stderr, "  ip netns exec %s curl http://<load balancer ingress IP>/\n", cluster.HarnessNetns())
			if *hybrid {
				for _, n := range c.Nodes() {
					fmt.Fprintf(os.Stderr, "  %s: %s\n", n, c.ProviderID(n))
				}
				fmt.Fprintf(os.Stderr, "  Services without a loadBalancerClass: local (VIPs %s); loadBalancerClass %s: sim (VIPs %s)\n", cluster.VIPPool, cluster.SimLoadBalancerClass, cluster.SimVIPPool)
				fmt.Fprintf(os.Stderr, "  ip netns exec %s curl %s/v1/loadbalancers\n", cluster.HarnessNetns(), c.SimCloudURL())
			}
			fmt.Fprintf(os.Stderr, "  go run ./cluster/cmd/cluster instance stop|start|delete %s\n", c.Nodes()[len(c.Nodes())-1])
			fmt.Fprintln(os.Stderr, "Ctrl-C stops it and removes everything.")
			<-ctx.Done()
			fmt.Fprintln(os.Stderr, "Stopping the cluster")
			err = c.Down()
		}
	case "instance":
		if fs.NArg() != 2 {
			fmt.Fprintln(os.Stderr, "usage: cluster instance [-workdir DIR] stop|start|delete NODE")
			os.Exit(2)
		}
		err = cluster.InstanceAction(ctx, *work, fs.Arg(0), fs.Arg(1))
	default:
		fmt.Fprintln(os.Stderr, "usage: cluster deps|up|down|instance [flags]")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

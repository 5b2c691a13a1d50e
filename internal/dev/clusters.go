package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/tenants"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

const (
	// tenantsNamespace holds, in the first cluster, the tenants' Secrets
	// and Leases: that cluster is also the management cluster.
	tenantsNamespace = "outrigger-tenants"
	// tenantLabel selects the Secrets `outrigger dev --clusters` writes.
	tenantLabel = "outrigger.dev/dev-tenant"
	// devAccount is the one sim cloud account all the clusters share, so
	// they share its call budget as tenants of one account do.
	devAccount  = "dev-sim"
	maxClusters = 8
)

// clusterName is the i-th cluster's name (from 1); its instances and so its
// nodes are named after it, the sim cloud being one for all.
func clusterName(i int) string { return fmt.Sprintf("cluster-%d", i) }

// splitPool gives each of n clusters its own part of pool, so that their
// providers, each with its own allocator, never hand out one VIP twice.
func splitPool(pool netip.Prefix, n int) ([]netip.Prefix, error) {
	extra := bits.Len(uint(n - 1))
	if pool.Bits()+extra > pool.Addr().BitLen()-1 {
		return nil, fmt.Errorf("--lb-pool %s is too small for %d clusters", pool, n)
	}
	size := pool.Bits() + extra
	parts := make([]netip.Prefix, n)
	addr := pool.Masked().Addr()
	for i := range n {
		parts[i] = netip.PrefixFrom(addr, size)
		for range 1 << (addr.BitLen() - size) {
			addr = addr.Next()
		}
	}
	return parts, nil
}

// prefixLister is the sim cloud as one cluster's kubelets see it: its own
// instances only.
type prefixLister struct {
	cloud  *simcloud.Cloud
	prefix string
}

func (l prefixLister) List() []simcloud.Instance {
	var out []simcloud.Instance
	for _, in := range l.cloud.List() {
		if strings.HasPrefix(in.Name, l.prefix) {
			out = append(out, in)
		}
	}
	return out
}

// devCluster is one of the control planes `outrigger dev --clusters` runs.
type devCluster struct {
	name       string
	cp         *apiserver.ControlPlane
	client     kubernetes.Interface
	kubeconfig string
	pool       netip.Prefix
}

// runClusters is `outrigger dev --clusters N`: N control planes on one sim
// cloud, served by one Outrigger in tenant mode. The first cluster is also
// the management cluster, holding each cluster's kubeconfig Secret (with
// its own cloud-config: its part of the VIP pool) and the tenant Leases.
// Cloud routes are off: the clusters share the sim cloud's one route table
// and the same pod CIDRs.
func runClusters(ctx context.Context, opts Options, out io.Writer, cloud *simcloud.Cloud, cloudURL string) error {
	log := klog.FromContext(ctx)
	if opts.Clusters > maxClusters {
		return fmt.Errorf("--clusters %d: at most %d on one machine", opts.Clusters, maxClusters)
	}
	if opts.PluginEndpoint != "" {
		return errors.New("--clusters and --plugin-endpoint do not go together yet")
	}
	pools, err := splitPool(netip.MustParsePrefix(opts.LBPool), opts.Clusters)
	if err != nil {
		return err
	}
	for c := range opts.Clusters {
		for i := range opts.Nodes {
			if _, err := cloud.Create(simcloud.CreateRequest{Name: fmt.Sprintf("%s-node-%d", clusterName(c+1), i+1)}); err != nil {
				return err
			}
		}
	}

	clusters := make([]*devCluster, opts.Clusters)
	defer func() {
		fmt.Fprintln(out, "Stopping the control planes...")
		for _, c := range clusters {
			if c != nil {
				if err := c.cp.Stop(); err != nil {
					log.Error(err, "Stopping a control plane", "cluster", c.name)
				}
			}
		}
	}()
	for i := range clusters {
		name := clusterName(i + 1)
		fmt.Fprintf(out, "Starting %s's control plane (etcd, kube-apiserver)...\n", name)
		start := time.Now()
		cp, err := apiserver.Start(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c := &devCluster{name: name, cp: cp, client: kubernetes.NewForConfigOrDie(cp.Config), pool: pools[i],
			kubeconfig: filepath.Join(opts.StateDir, name+".kubeconfig")}
		clusters[i] = c
		if err := cp.WriteAdminKubeconfig(c.kubeconfig); err != nil {
			return err
		}
		if err := gatewayapi.Install(ctx, cp.Config); err != nil {
			log.Error(err, "Gateway API not installed; Gateways are off there", "cluster", name)
		}
		fmt.Fprintf(out, "%s ready in %s.\n", name, seconds(time.Since(start)))
	}
	mgmt := clusters[0]
	// The first cluster's kubeconfig is also the usual one, for `outrigger
	// sim` and the console.
	if _, err := writeState(opts.StateDir, mgmt.cp, cloudURL, pools[0].String()); err != nil {
		return err
	}
	if err := writeTenantSecrets(ctx, mgmt.client, clusters, cloudURL); err != nil {
		return err
	}

	simCtx, stopSim := context.WithCancel(ctx)
	defer stopSim()
	for _, c := range clusters {
		l := prefixLister{cloud: cloud, prefix: c.name + "-"}
		go (&kubeletsim.Simulator{Cloud: l, Client: c.client}).Run(simCtx)
		go (&kubeletsim.NodePorts{Cloud: l, Client: c.client}).Run(simCtx)
	}

	o := opts.Outrigger
	o.Kubeconfig = filepath.Join(opts.StateDir, "kubeconfig")
	o.CloudProvider = ProviderName
	o.CloudConfig = filepath.Join(opts.StateDir, "cloud.yaml")
	o.ConfigureCloudRoutes = false
	o.TenantsNamespace = tenantsNamespace
	o.TenantsSelector = tenantLabel + "=true"
	o.Serving.BindAddress = net.IPv4(127, 0, 0, 1)
	o.DisableMetricsAuthentication = true
	reg := provider.NewRegistry()
	reg.Register(ProviderName, NewProvider)
	mgr, err := manager.New(ctx, o, reg)
	if err != nil {
		return err
	}
	// The console shows the first cluster (also the management cluster)
	// and every cluster as a tenant.
	gw, err := gwclient.NewForConfig(mgmt.cp.Config)
	if err != nil {
		return fmt.Errorf("building the Gateway API client: %w", err)
	}
	consoleURL, err := startConsole(ctx, opts, mgmt.client, gw, cloud, pools[0].String(), manager.ConsoleTenants(mgr))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nOutrigger is running, one process serving %d clusters (tenant mode) on one sim cloud, %d simulated nodes each.\n\n", len(clusters), opts.Nodes)
	for _, c := range clusters {
		fmt.Fprintf(out, "  %s: export KUBECONFIG=%s   (VIPs from %s)\n", c.name, absPath(c.kubeconfig), c.pool)
	}
	fmt.Fprintf(out, `
%s is also the management cluster: the tenants' kubeconfig Secrets and
their Leases are in its namespace %s.

  kubectl --kubeconfig %s get secrets,leases -n %s
  ./bin/outrigger sim list                # every cluster's instances, by name

Cloud routes are off: the clusters share the sim cloud's route table.
`, mgmt.name, tenantsNamespace, absPath(mgmt.kubeconfig), tenantsNamespace)
	if consoleURL != "" {
		fmt.Fprintf(out, "\nThe web console (the tenants; %s's load balancers, pools and nodes; cloud calls): %s\n", mgmt.name, consoleURL)
	}
	fmt.Fprint(out, "\nCtrl-C stops everything.\n\n")
	for _, c := range clusters {
		go nodeProgress{Client: c.client, Out: out, Want: opts.Nodes, Poll: 250 * time.Millisecond, Every: 5 * time.Second, Cluster: c.name}.Run(simCtx)
	}
	err = mgr.Start(ctx)
	stopSim()
	time.Sleep(100 * time.Millisecond)
	return err
}

// writeTenantSecrets puts each cluster's Secret in the management cluster:
// its kubeconfig, its own cloud-config (its part of the VIP pool) and the
// one account they share.
func writeTenantSecrets(ctx context.Context, mgmt kubernetes.Interface, clusters []*devCluster, cloudURL string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantsNamespace}}
	if _, err := mgmt.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", tenantsNamespace, err)
	}
	for _, c := range clusters {
		kc, err := os.ReadFile(c.kubeconfig)
		if err != nil {
			return err
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenantsNamespace, Name: c.name, Labels: map[string]string{tenantLabel: "true"}},
			Data: map[string][]byte{
				tenants.KeyKubeconfig:  kc,
				tenants.KeyCloudConfig: []byte("sim:\n  endpoint: " + cloudURL + "\nlocal:\n  pool: " + c.pool.String() + "\n"),
				tenants.KeyAccount:     []byte(devAccount),
			},
		}
		if _, err := mgmt.CoreV1().Secrets(tenantsNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("writing %s's Secret: %w", c.name, err)
		}
	}
	return nil
}

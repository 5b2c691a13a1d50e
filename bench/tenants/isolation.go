package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// brokenWays are the ways the first tenant is broken, in order; "none" is
// the baseline the others are read against.
var brokenWays = []string{"none", "api-server-down", "api-server-hangs", "credentials-wrong", "provider-hangs"}

// isolationRow is how long the healthy tenants take with one broken.
type isolationRow struct {
	way             string
	converge, churn time.Duration
}

// runBroken serves n tenants with one Outrigger, the first tenant broken
// the given way from the start, and times the n-1 others: their nodes
// initialized, then a churn (nodes and Services) served.
func runBroken(ctx context.Context, cfg config, w *world, n int, way string) (isolationRow, error) {
	r := isolationRow{way: way}
	if err := w.reset(ctx); err != nil {
		return r, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	cloud, url, err := serveCloud(runCtx, cfg)
	if err != nil {
		return r, err
	}
	// tarpit accepts connections and never answers: an API server or a
	// cloud API that hangs.
	tarpit, err := listenTarpit(runCtx)
	if err != nil {
		return r, err
	}
	nodes := make([][]string, n)
	for i := 1; i < n; i++ {
		for j := range cfg.nodes {
			name := fmt.Sprintf("broken-%s-%s-n%d", way, tenantName(i), j)
			if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
				return r, err
			}
			if err := kubeletsim.Register(ctx, w.tenants[i].client, name); err != nil {
				return r, err
			}
			nodes[i] = append(nodes[i], name)
		}
	}
	for i := range n {
		cc := fmt.Appendf(nil, "endpoint: %s\ncaller: %s\n", url, tenantName(i))
		kc, err := clientcmd.LoadFromFile(w.tenants[i].kubeconfig)
		if err != nil {
			return r, err
		}
		if i == 0 {
			switch way {
			case "api-server-down":
				setServer(kc, "https://"+closedAddress())
			case "api-server-hangs":
				setServer(kc, "https://"+tarpit)
			case "credentials-wrong":
				for _, a := range kc.AuthInfos {
					*a = clientcmdapi.AuthInfo{Token: "not-a-token-of-this-cluster"}
				}
			case "provider-hangs":
				cc = fmt.Appendf(nil, "endpoint: http://%s\ncaller: %s\n", tarpit, tenantName(i))
			}
		}
		data, err := clientcmd.Write(*kc)
		if err != nil {
			return r, err
		}
		if err := w.putSecretData(ctx, w.tenants[i], data, cc); err != nil {
			return r, err
		}
	}
	args := []string{"--cloud-provider=sim", "--secure-port=0", "--configure-cloud-routes=false", "--leader-elect-resource-name=bench-broken-" + way,
		"--kubeconfig=" + w.mgmt.kubeconfig, "--tenants-namespace=" + tenantsNamespace, "--tenants-selector=" + benchLabel,
		"--tenants-replica-id=replica-1", fmt.Sprintf("--cloud-qps=%g", cfg.qps)}
	t0 := time.Now()
	proc, err := benchenv.StartProcess(runCtx, cfg.outriggerBin, args, fmt.Sprintf("tenants-%d-broken-%s.log", n, way))
	if err != nil {
		return r, err
	}
	defer func() {
		stop()
		if err := <-proc.Done; err != nil {
			progress("Outrigger exited: %v", err)
		}
	}()
	if !waitFor(ctx, cfg.bound, func() bool { return servedAll(w, nodes, nil) }) {
		return r, fmt.Errorf("one tenant %s: the others' nodes not initialized within %s", way, cfg.bound)
	}
	r.converge = time.Since(t0)
	healthy := make([]int, 0, n-1)
	for i := 1; i < n; i++ {
		healthy = append(healthy, i)
	}
	if r.churn, err = runChurn(ctx, cfg, w, cloud, healthy, "broken-"+way); err != nil {
		return r, fmt.Errorf("one tenant %s: the others': %w", way, err)
	}
	progress("one of %d tenants %s: the others converged in %s, their churn served in %s", n, way,
		r.converge.Round(10*time.Millisecond), r.churn.Round(10*time.Millisecond))
	return r, nil
}

func setServer(kc *clientcmdapi.Config, server string) {
	for _, c := range kc.Clusters {
		c.Server = server
	}
}

// closedAddress is a loopback address nothing listens on: a port this
// process held a moment ago.
func closedAddress() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:1"
	}
	defer l.Close()
	return l.Addr().String()
}

// listenTarpit accepts connections until ctx ends and never answers them.
func listenTarpit(ctx context.Context) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String(), nil
}

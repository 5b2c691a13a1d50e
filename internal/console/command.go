package console

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// commandOptions are `outrigger console`'s flags.
type commandOptions struct {
	kubeconfig      string
	address         string
	metricsURL      string
	metricsInsecure bool
	ranges          []string
	class           string
	interval        time.Duration
}

// NewCommand returns `outrigger console`: the console on its own, reading
// the cluster with a kubeconfig and the call metrics from Outrigger's
// /metrics. It is read-only and listens on loopback unless told otherwise.
func NewCommand() *cobra.Command {
	o := commandOptions{address: "127.0.0.1:8482", interval: time.Second}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console (load balancers, IP pools, nodes, cloud calls, timeline) for a cluster Outrigger manages",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig to read the cluster with (default: $KUBECONFIG, then in-cluster).")
	f.StringVar(&o.address, "address", o.address, "Address to serve the console on. It has no authentication of its own: keep it on loopback.")
	f.StringVar(&o.metricsURL, "metrics-url", "", "Outrigger's /metrics (e.g. https://127.0.0.1:10258/metrics), scraped with the kubeconfig's credentials for the call charts; empty leaves them empty.")
	f.BoolVar(&o.metricsInsecure, "metrics-insecure-skip-tls-verify", false, "Do not verify --metrics-url's serving certificate (Outrigger's is self-signed unless --tls-cert-file is given).")
	f.StringArrayVar(&o.ranges, "range", nil, "An address range to show the usage of: name=CIDR for load balancer VIPs, name=CIDR@mask for a cluster CIDR cut into node pod CIDRs of /mask. Repeatable.")
	f.StringVar(&o.class, "load-balancer-class", "", "The loadBalancerClass Outrigger runs with (its --load-balancer-class).")
	f.DurationVar(&o.interval, "interval", o.interval, "How often the metrics are sampled and changes pushed to the page.")
	return cmd
}

func (o commandOptions) run(ctx context.Context, cmd *cobra.Command) error {
	ranges, err := ParseRanges(o.ranges)
	if err != nil {
		return fmt.Errorf("--range: %w", err)
	}
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.UserAgent = "outrigger-console"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the client: %w", err)
	}
	gw, err := gwclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the Gateway API client: %w", err)
	}
	opts := Options{Client: client, Gateway: gw, Ranges: ranges, Class: o.class, Interval: o.interval, Log: klog.FromContext(ctx)}
	if o.metricsURL != "" {
		hc, err := metricsClient(cfg, o.metricsURL, o.metricsInsecure)
		if err != nil {
			return err
		}
		opts.Gatherer = ScrapeGatherer{URL: o.metricsURL, Client: hc}
	}
	srv := New(opts)
	l, err := Listen(ctx, o.address)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Outrigger console: http://%s/\n", l.Addr())
	return Serve(ctx, srv, l)
}

// metricsClient reaches Outrigger's secure port with the kubeconfig's
// credentials (a token or a client certificate), which its delegated
// authentication accepts as the API server would.
func metricsClient(cfg *rest.Config, metricsURL string, insecure bool) (*http.Client, error) {
	u, err := url.Parse(metricsURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("--metrics-url %q: not a URL", metricsURL)
	}
	c := rest.CopyConfig(cfg)
	c.Host = u.Scheme + "://" + u.Host
	// The API server's CA does not sign Outrigger's serving certificate.
	c.CAData, c.CAFile, c.ServerName = nil, "", ""
	c.Insecure = insecure
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: %w", err)
	}
	return hc, nil
}

// Listen listens on address, warning when it is not loopback: the console
// serves without authentication of its own.
func Listen(ctx context.Context, address string) (net.Listener, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if tcp, ok := l.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		klog.FromContext(ctx).Info("Warning: the console listens beyond loopback and has no authentication of its own", "address", l.Addr().String())
	}
	return l, nil
}

// hostGuard refuses requests whose Host is not an address the console
// serves: with no authentication of its own, a page on another site could
// otherwise reach it through a DNS name that resolves to this machine (DNS
// rebinding). IP literals the listener answers on are allowed, and
// "localhost" when it listens on loopback or everywhere.
func hostGuard(addr net.Addr, next http.Handler) http.Handler {
	tcp, _ := addr.(*net.TCPAddr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if tcp != nil && hostAllowed(tcp.IP, strings.Trim(host, "[]")) {
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "Host "+strconv.Quote(r.Host)+" is not an address this console serves: use its IP address (or localhost)", http.StatusMisdirectedRequest)
	})
}

func hostAllowed(listen net.IP, host string) bool {
	if strings.EqualFold(host, "localhost") {
		return listen.IsLoopback() || listen.IsUnspecified()
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	return listen.IsUnspecified() || ip.Equal(listen)
}

// Serve serves srv on l and samples its metrics until ctx ends.
func Serve(ctx context.Context, srv *Server, l net.Listener) error {
	hs := &http.Server{Handler: hostGuard(l.Addr(), srv.Handler()), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = srv.Start(ctx) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		// Streams never end on their own; Shutdown gave them their chance.
		_ = hs.Close()
	}()
	if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

// Command gateway measures Gateways on the embedded default (`outrigger
// dev`: a real API server, the dev provider's VIPs on loopback, the
// simulated nodes running each Gateway's data plane): -gateways Gateways
// with -routes HTTPRoutes between them, created at once, timed until every
// Gateway is Programmed and until every route answers through its Gateway;
// then route changes timed until traffic follows; the data plane's added
// latency against the same backend reached directly; and the RSS of one
// `outrigger gateway-dataplane` process per 1,000 routes.
//
//	go run ./bench/gateway -gateways 100 -routes 1000
//
// With -cluster it measures route changes on the real cluster instead
// (cluster.go). It writes the table to -out (markdown) and prints it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

type config struct {
	bin              string
	gateways, routes int
	changes, samples int
	bound            time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.bin, "outrigger", "bin/outrigger", "the outrigger binary (make build)")
	flag.IntVar(&cfg.gateways, "gateways", 100, "Gateways")
	flag.IntVar(&cfg.routes, "routes", 1000, "HTTPRoutes, spread evenly over the Gateways")
	flag.IntVar(&cfg.changes, "changes", 50, "route changes timed")
	flag.IntVar(&cfg.samples, "samples", 2000, "requests timed through a Gateway and directly")
	flag.DurationVar(&cfg.bound, "bound", 5*time.Minute, "bound on each wait")
	onCluster := flag.Bool("cluster", false, "measure route changes on the real cluster instead (root; after make cluster-binaries cluster-images image): -changes at -rate a second while -rps requests a second flow")
	rate := flag.Int("rate", 10, "with -cluster: route changes a second")
	rps := flag.Int("rps", 200, "with -cluster: requests a second through the Gateways during the changes")
	out := flag.String("out", "docs/performance/gateway.md", "markdown table to write")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var table string
	var err error
	if *onCluster {
		table, err = runOnCluster(ctx, cfg, *rate, *rps)
	} else {
		table, err = run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/gateway:", err)
		os.Exit(1)
	}
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench/gateway:", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, cfg config) (string, error) {
	dir, err := os.MkdirTemp("", "bench-gateway-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	// outrigger dev on ranges of its own: a developer's `make dev` keeps
	// running beside it.
	dev := exec.CommandContext(ctx, cfg.bin, "dev", "--nodes=3", "--state-dir="+dir, "--cloud-address=127.0.0.1:0",
		"--console-address=", "--secure-port=0", "--node-ip-range=127.6.0.0/16", "--lb-pool=127.0.206.0/24")
	logf, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		return "", err
	}
	dev.Stdout, dev.Stderr = logf, logf
	dev.Cancel = func() error { return dev.Process.Signal(syscall.SIGTERM) }
	dev.WaitDelay = 30 * time.Second
	if err := dev.Start(); err != nil {
		return "", err
	}
	defer func() { _ = dev.Cancel(); _ = dev.Wait() }()

	kubeconfig := filepath.Join(dir, "kubeconfig")
	var c client.Client
	if err := poll(ctx, cfg.bound, func() (bool, error) {
		if _, err := os.Stat(kubeconfig); err != nil {
			return false, nil
		}
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return false, nil
		}
		rc.QPS, rc.Burst = 500, 1000
		scheme := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(scheme)
		_ = gwv1.Install(scheme)
		if c, err = client.New(rc, client.Options{Scheme: scheme}); err != nil {
			return false, nil
		}
		var gc gwv1.GatewayClass
		return c.Get(ctx, types.NamespacedName{Name: "outrigger-dev"}, &gc) == nil &&
			meta.IsStatusConditionTrue(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted)), nil
	}); err != nil {
		return "", fmt.Errorf("outrigger dev with its GatewayClass accepted (%s): %w", filepath.Join(dir, "dev.log"), err)
	}

	const backends = 10
	for b := range backends {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("b%d", b)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "b"},
				Ports: []corev1.ServicePort{{Port: 80}}}}
		if err := c.Create(ctx, svc); err != nil {
			return "", err
		}
	}
	perGateway := max(cfg.routes/cfg.gateways, 1)
	start := time.Now()
	for g := range cfg.gateways {
		gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("g%d", g)},
			Spec: gwv1.GatewaySpec{GatewayClassName: "outrigger-dev", Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
		if err := c.Create(ctx, gw); err != nil {
			return "", err
		}
	}
	if err := parallel(ctx, cfg.gateways*perGateway, 16, func(i int) error {
		return c.Create(ctx, route(i/perGateway, i%perGateway, fmt.Sprintf("/r%d", i%perGateway), fmt.Sprintf("b%d", i%backends)))
	}); err != nil {
		return "", err
	}
	applied := time.Since(start)

	vips := map[int]string{}
	if err := poll(ctx, cfg.bound, func() (bool, error) {
		var gws gwv1.GatewayList
		if err := c.List(ctx, &gws, client.InNamespace("default")); err != nil {
			return false, err
		}
		n := 0
		for _, gw := range gws.Items {
			if meta.IsStatusConditionTrue(gw.Status.Conditions, string(gwv1.GatewayConditionProgrammed)) && len(gw.Status.Addresses) > 0 {
				var g int
				_, _ = fmt.Sscanf(gw.Name, "g%d", &g)
				vips[g] = gw.Status.Addresses[0].Value
				n++
			}
		}
		return n == cfg.gateways, nil
	}); err != nil {
		return "", fmt.Errorf("all Gateways Programmed: %w", err)
	}
	programmed := time.Since(start)

	httpc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableKeepAlives: false}}
	answers := func(url, want string) bool {
		resp, err := httpc.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && bytes.Contains(b, []byte(want))
	}
	var remaining atomic.Int64
	remaining.Store(int64(cfg.gateways * perGateway))
	if err := parallel(ctx, cfg.gateways*perGateway, 32, func(i int) error {
		g, r := i/perGateway, i%perGateway
		url := fmt.Sprintf("http://%s/r%d/x", vips[g], r)
		want := fmt.Sprintf("default/b%d port 80", i%backends)
		err := poll(ctx, cfg.bound, func() (bool, error) { return answers(url, want), nil })
		remaining.Add(-1)
		return err
	}); err != nil {
		return "", fmt.Errorf("every route answering: %w", err)
	}
	traffic := time.Since(start)

	// Route changes: a route's backend moves; timed until its traffic
	// follows.
	var follow []time.Duration
	for k := range cfg.changes {
		g := k % cfg.gateways
		var hr gwv1.HTTPRoute
		key := types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("g%d-r0", g)}
		if err := c.Get(ctx, key, &hr); err != nil {
			return "", err
		}
		to := fmt.Sprintf("b%d", (k+1)%backends)
		if to == string(hr.Spec.Rules[0].BackendRefs[0].Name) {
			to = fmt.Sprintf("b%d", (k+2)%backends)
		}
		hr.Spec.Rules[0].BackendRefs[0].Name = gwv1.ObjectName(to)
		t0 := time.Now()
		if err := c.Update(ctx, &hr); err != nil {
			return "", err
		}
		url, want := fmt.Sprintf("http://%s/r0/x", vips[g]), "default/"+to+" port 80"
		if err := poll(ctx, cfg.bound, func() (bool, error) { return answers(url, want), nil }); err != nil {
			return "", fmt.Errorf("route change %d: %w", k, err)
		}
		follow = append(follow, time.Since(t0))
	}

	// Latency: the same backend through g0 and directly at its node port.
	var svc corev1.Service
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "b0"}, &svc); err != nil {
		return "", err
	}
	var node corev1.Node
	if err := c.Get(ctx, types.NamespacedName{Name: "node-1"}, &node); err != nil {
		return "", err
	}
	nodeIP := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
			nodeIP = a.Address
		}
	}
	direct := fmt.Sprintf("http://%s/", net.JoinHostPort(nodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort)))
	// g0's routes: r0 moved with the changes; r{j} for j = backends keeps b0
	// only when there are that many routes per Gateway, so time r0 after
	// moving it back to b0.
	viaURL := fmt.Sprintf("http://%s/r%d/", vips[0], 0)
	if err := moveRoute(ctx, c, "g0-r0", "b0"); err != nil {
		return "", err
	}
	if err := poll(ctx, cfg.bound, func() (bool, error) { return answers(viaURL, "default/b0 port 80"), nil }); err != nil {
		return "", err
	}
	viaP50, viaP99, err := latency(httpc, viaURL, cfg.samples)
	if err != nil {
		return "", err
	}
	dirP50, dirP99, err := latency(httpc, direct, cfg.samples)
	if err != nil {
		return "", err
	}

	// RSS per 1,000 routes: one data plane process programmed with a
	// Gateway of no routes, then with one of 1,000.
	rssEmpty, err := dataPlaneRSS(ctx, c, cfg, kubeconfig, dir, "rss-empty", 0)
	if err != nil {
		return "", err
	}
	rssFull, err := dataPlaneRSS(ctx, c, cfg, kubeconfig, dir, "rss-full", 1000)
	if err != nil {
		return "", err
	}

	var b strings.Builder
	fmt.Fprintf(&b, "| %d Gateways, %d HTTPRoutes, `outrigger dev` (3 simulated nodes) | |\n| --- | ---: |\n", cfg.gateways, cfg.gateways*perGateway)
	fmt.Fprintf(&b, "| s to create them all (the API server) | %.1f |\n", applied.Seconds())
	fmt.Fprintf(&b, "| s from the first create to every Gateway `Programmed` | %.1f |\n", programmed.Seconds())
	fmt.Fprintf(&b, "| s from the first create to every route answering through its Gateway | %.1f |\n", traffic.Seconds())
	p50, p99 := percentiles(follow)
	fmt.Fprintf(&b, "| s from a route's change to its traffic following, p50 / p99 (%d changes) | %.2f / %.2f |\n", len(follow), p50.Seconds(), p99.Seconds())
	fmt.Fprintf(&b, "| ms per request through a Gateway, p50 / p99 (%d requests) | %.3f / %.3f |\n", cfg.samples, ms(viaP50), ms(viaP99))
	fmt.Fprintf(&b, "| ms per request to the same backend directly, p50 / p99 | %.3f / %.3f |\n", ms(dirP50), ms(dirP99))
	fmt.Fprintf(&b, "| data plane RSS MiB: no routes / 1,000 routes | %.1f / %.1f |\n", rssEmpty, rssFull)
	return b.String(), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func route(g, r int, path, backend string) *gwv1.HTTPRoute {
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("g%d-r%d", g, r)},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(fmt.Sprintf("g%d", g))}}},
			Rules: []gwv1.HTTPRouteRule{{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(path)}}},
				BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(backend), Port: ptr.To(gwv1.PortNumber(80))}}}},
			}},
		},
	}
}

func moveRoute(ctx context.Context, c client.Client, name, to string) error {
	var hr gwv1.HTTPRoute
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, &hr); err != nil {
		return err
	}
	hr.Spec.Rules[0].BackendRefs[0].Name = gwv1.ObjectName(to)
	return c.Update(ctx, &hr)
}

// dataPlaneRSS makes a Gateway with n routes, runs one data plane process
// for it until it is programmed, and returns its resident memory.
func dataPlaneRSS(ctx context.Context, c client.Client, cfg config, kubeconfig, dir, name string, n int) (float64, error) {
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: gwv1.GatewaySpec{GatewayClassName: "outrigger-dev", Listeners: []gwv1.Listener{{Name: "http", Port: 8080, Protocol: gwv1.HTTPProtocolType}}}}
	if err := c.Create(ctx, gw); err != nil {
		return 0, err
	}
	if err := parallel(ctx, n, 16, func(i int) error {
		hr := route(0, i, fmt.Sprintf("/p%d", i), fmt.Sprintf("b%d", i%10))
		hr.Name = fmt.Sprintf("%s-%d", name, i)
		hr.Spec.ParentRefs[0].Name = gwv1.ObjectName(name)
		return c.Create(ctx, hr)
	}); err != nil {
		return 0, err
	}
	secret := gateway.DataPlaneName("default", name)
	// Every route attached (the programming holds them all).
	if err := poll(ctx, cfg.bound, func() (bool, error) {
		var got gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
			return false, err
		}
		return len(got.Status.Listeners) == 1 && got.Status.Listeners[0].AttachedRoutes == int32(n), nil
	}); err != nil {
		return 0, fmt.Errorf("%s with %d routes attached: %w", name, n, err)
	}
	l, err := net.Listen("tcp", "127.0.0.66:0")
	if err != nil {
		return 0, err
	}
	health := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := benchenv.StartProcess(pctx, cfg.bin, []string{"gateway-dataplane", "--kubeconfig=" + kubeconfig,
		"--namespace=" + gateway.DefaultNamespace, "--secret=" + secret, "--listen-address=127.0.0.66", fmt.Sprintf("--health-port=%d", health)},
		"bench-gateway-"+name+".log")
	if err != nil {
		return 0, err
	}
	url := fmt.Sprintf("http://127.0.0.66:%d/readyz", health)
	if err := poll(ctx, cfg.bound, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	}); err != nil {
		return 0, fmt.Errorf("data plane for %s ready: %w", name, err)
	}
	// Programmed: the peak so far is what holding its routes took.
	return p.PeakRSS()
}

func latency(c *http.Client, url string, n int) (p50, p99 time.Duration, err error) {
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			return 0, 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, 0, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		ds = append(ds, time.Since(t0))
	}
	p50, p99 = percentiles(ds)
	return p50, p99, nil
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)*99/100, len(s)-1)]
}

// poll checks cond every 100 ms until it holds, fails, or bound passes.
func poll(ctx context.Context, bound time.Duration, cond func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, bound, true, func(context.Context) (bool, error) { return cond() })
}

// parallel runs f(0..n-1) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, n, workers int, f func(int) error) error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

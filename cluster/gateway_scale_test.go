package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
)

// scaleWorld is many Gateways, each with its share of HTTPRoutes, on real
// pods: every route sends its hostname to Service a or b (agnhost netexec,
// whose /hostname says which pod answered), so a change of a route's
// backend is seen when its traffic comes from the other Deployment.
type scaleWorld struct {
	c                        *Cluster
	cl                       client.Client
	gateways, routes         int
	changeRate, changes, rps int
	vips                     []string // by Gateway
	hostA, hostB             string   // the pods' hostnames
	routeBackend             []string // by route: "a" or "b"
	sent, failed             atomic.Int64
	errMu                    sync.Mutex
	errs                     []string // the first failures, for the report
	// achieved is the rate the changes were written at.
	achieved float64
}

// scaleSettings are the counts of TestGatewayRouteChangesAtScale:
// OUTRIGGER_ROUTE_SCALE overrides them ("gateways=100,routes=1000,
// rate=10,changes=300,rps=200"); the defaults keep `make cluster-test`
// short.
func scaleSettings(t *testing.T) (gateways, routes, rate, changes, rps int) {
	gateways, routes, rate, changes, rps = 4, 40, 10, 20, 100
	for _, kv := range strings.Split(os.Getenv("OUTRIGGER_ROUTE_SCALE"), ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("OUTRIGGER_ROUTE_SCALE: %q is not key=positive count", kv)
		}
		switch k {
		case "gateways":
			gateways = n
		case "routes":
			routes = n
		case "rate":
			rate = n
		case "changes":
			changes = n
		case "rps":
			rps = n
		default:
			t.Fatalf("OUTRIGGER_ROUTE_SCALE: unknown key %q", k)
		}
	}
	if routes < gateways {
		t.Fatalf("OUTRIGGER_ROUTE_SCALE: %d routes for %d Gateways", routes, gateways)
	}
	return
}

// TestGatewayRouteChangesAtScale changes HTTPRoutes, spread over many
// Gateways, at a steady rate while traffic flows through every Gateway,
// and times each change from its write to the first request that reaches
// the new backend. It asserts what users rely on: every change is followed
// and no request fails. The times are reported (OUTRIGGER_ROUTE_SCALE_REPORT
// names a file for the table), never asserted.
func TestGatewayRouteChangesAtScale(t *testing.T) {
	withCluster(t, false, func(ctx context.Context, c *Cluster) {
		gws, routes, rate, changes, rps := scaleSettings(t)
		w := &scaleWorld{c: c, gateways: gws, routes: routes, changeRate: rate, changes: changes, rps: rps}
		start := time.Now()
		w.start(ctx, t)
		ready := time.Since(start)

		stop := w.load(ctx)
		lat := w.change(ctx, t)
		stop()
		w.checkConsoleTraffic(ctx, t)

		slices.Sort(lat)
		report := []string{
			"| Gateways | HTTPRoutes | changes | written /s | s to every route served | s from a change to its traffic, p50 / p99 / max | requests during the changes | failed |",
			"| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
			fmt.Sprintf("| %d | %d | %d | %.1f | %.1f | %.3f / %.3f / %.3f | %d | %d |", gws, routes, len(lat), w.achieved, ready.Seconds(),
				pct(lat, 50).Seconds(), pct(lat, 99).Seconds(), lat[len(lat)-1].Seconds(), w.sent.Load(), w.failed.Load()),
		}
		t.Log("\n" + strings.Join(report, "\n"))
		if f := os.Getenv("OUTRIGGER_ROUTE_SCALE_REPORT"); f != "" {
			if err := os.WriteFile(f, []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
				t.Error(err)
			}
		}
		if n := w.failed.Load(); n > 0 {
			t.Errorf("%d of %d requests failed while routes changed; the first:\n%s", n, w.sent.Load(), strings.Join(w.errs, "\n"))
		}
	})
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*p/100)]
}

func routeHost(i int) string { return fmt.Sprintf("r%d.scale.example", i) }

// start creates the backends, the Gateways (one data plane pod each: the
// parameters' replicas) and the routes, and waits until every route is
// answered through its Gateway.
func (w *scaleWorld) start(ctx context.Context, t *testing.T) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = gwv1.Install(scheme)
	// The changes' own rate, not client-go's default 5 a second, paces
	// the writes.
	cfg := rest.CopyConfig(w.c.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w.cl = cl
	const ns = "default"
	objs := []client.Object{&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scale-params", Labels: map[string]string{gateway.ParametersLabel: "true"}},
		Data:       map[string]string{"replicas": "1"},
	}}
	for _, b := range []string{"a", "b"} {
		labels := map[string]string{"app": "scale-" + b}
		objs = append(objs, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scale-" + b},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "agnhost", Image: "outrigger.local/agnhost:" + apiserver.KubernetesVersion, ImagePullPolicy: corev1.PullNever,
					Args:           []string{"netexec", "--http-port=8080"},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}}}},
			},
		}, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scale-" + b},
			Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}},
		})
	}
	for g := range w.gateways {
		objs = append(objs, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("scale-%d", g)},
			Spec: gwv1.GatewaySpec{
				GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("local", "")),
				Infrastructure:   &gwv1.GatewayInfrastructure{ParametersRef: &gwv1.LocalParametersReference{Group: "", Kind: "ConfigMap", Name: "scale-params"}},
				Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
			},
		})
	}
	w.routeBackend = make([]string, w.routes)
	for i := range w.routes {
		w.routeBackend[i] = "a"
		objs = append(objs, scaleRoute(ns, i, i%w.gateways, "a"))
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	// Every Gateway Programmed with an address.
	w.vips = make([]string, w.gateways)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list gwv1.GatewayList
		if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil //nolint:nilerr // the API server may be busy; polled again
		}
		n := 0
		for _, gw := range list.Items {
			var g int
			if _, err := fmt.Sscanf(gw.Name, "scale-%d", &g); err != nil || g >= w.gateways {
				continue
			}
			p := meta.FindStatusCondition(gw.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
			if p != nil && p.Status == metav1.ConditionTrue && p.ObservedGeneration == gw.Generation && len(gw.Status.Addresses) > 0 {
				w.vips[g] = gw.Status.Addresses[0].Value
				n++
			}
		}
		return n == w.gateways, w.c.anyExited()
	}); err != nil {
		t.Fatalf("not every Gateway Programmed with an address: %v", err)
	}
	// Every route answered, which also names the two backends' pods.
	hc := HarnessHTTPClient()
	for i := range w.routes {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			host, err := w.get(ctx, hc, i)
			if err != nil || host == "" {
				return false, nil //nolint:nilerr // not served yet
			}
			if w.hostA == "" {
				w.hostA = host
			}
			return host == w.hostA, nil
		}); err != nil {
			t.Fatalf("route %d not answered by backend a through Gateway %d: %v", i, i%w.gateways, err)
		}
	}
	pods, err := w.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=scale-b"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("backend b's pod: %v (%d pods)", err, len(pods.Items))
	}
	w.hostB = pods.Items[0].Name
}

// scaleRoute is route i of Gateway g, to backend b.
func scaleRoute(ns string, i, g int, b string) *gwv1.HTTPRoute {
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("scale-%d", i)},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(fmt.Sprintf("scale-%d", g))}}},
			Hostnames:       []gwv1.Hostname{gwv1.Hostname(routeHost(i))},
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
				BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName("scale-" + b), Port: ptr.To(gwv1.PortNumber(8080))},
			}}}}},
		},
	}
}

// get asks route i's Gateway for /hostname under the route's hostname:
// the pod that answered.
func (w *scaleWorld) get(ctx context.Context, hc *http.Client, i int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.vips[i%w.gateways]+"/hostname", nil)
	req.Host = routeHost(i)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(body)), nil
}

// load sends w.rps requests a second, over every route in turn, on
// keep-alive connections from the harness namespace, until stopped
// (bounded by 10 minutes and w.rps*600 requests). Any error or status
// but 200 is a failure.
func (w *scaleWorld) load(ctx context.Context) (stop func()) {
	const workers = 8
	quit := make(chan struct{})
	var wg sync.WaitGroup
	deadline, maxCount := time.Now().Add(10*time.Minute), int64(w.rps*600)
	var next atomic.Int64
	for range workers {
		tr := &http.Transport{
			MaxIdleConnsPerHost: 2,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialInNetns(ctx, "/var/run/netns/"+harnessNS, network, addr)
			},
		}
		hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			tick := time.NewTicker(time.Second * workers / time.Duration(w.rps))
			defer tick.Stop()
			for {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
				if time.Now().After(deadline) || w.sent.Load() >= maxCount {
					return
				}
				w.sent.Add(1)
				i := int(next.Add(1)) % w.routes
				if _, err := w.get(ctx, hc, i); err != nil {
					w.failed.Add(1)
					w.errMu.Lock()
					if len(w.errs) < 10 {
						w.errs = append(w.errs, fmt.Sprintf("%s route %d (Gateway %d at %s): %v", time.Now().Format(time.TimeOnly), i, i%w.gateways, w.vips[i%w.gateways], err))
					}
					w.errMu.Unlock()
				}
			}
		}()
	}
	return func() { close(quit); wg.Wait() }
}

// change moves w.changes routes (in turn) to their other backend, at
// w.changeRate a second, and times each from its write to the first
// answer from the new backend, polled every 20 ms. The polls go on
// keep-alive connections shared by every change under way (a data plane
// routes each request by the programming it has then, so a connection
// opened before the change sees it as a new one would): with a new
// connection per poll, each change not yet followed added 50 dials a
// second to a saturated machine, so a slow spell fed itself and the
// measurement grew its own tail.
func (w *scaleWorld) change(ctx context.Context, t *testing.T) []time.Duration {
	t.Helper()
	poll := &http.Transport{
		MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, "/var/run/netns/"+harnessNS, network, addr)
		},
	}
	defer poll.CloseIdleConnections()
	hc := &http.Client{Transport: poll, Timeout: 5 * time.Second}
	tick := time.NewTicker(time.Second / time.Duration(w.changeRate))
	defer tick.Stop()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	began := time.Now()
	for k := range w.changes {
		<-tick.C
		i := k % w.routes
		to, want := "b", w.hostB
		if w.routeBackend[i] == "b" {
			to, want = "a", w.hostA
		}
		w.routeBackend[i] = to
		// One write: the route's rule, its backend the other.
		rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("scale-%d", i)}}
		patch := fmt.Sprintf(`{"spec":{"rules":[{"backendRefs":[{"name":"scale-%s","port":8080}]}]}}`, to)
		written := time.Now()
		if err := w.cl.Patch(ctx, rt, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("changing route %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				host, err := w.get(ctx, hc, i)
				return err == nil && host == want, nil
			})
			if err != nil {
				t.Errorf("route %d's traffic did not follow its change to %s within 30 s", i, to)
				return
			}
			mu.Lock()
			lat = append(lat, time.Since(written))
			mu.Unlock()
		}()
	}
	// The writes' own rate: the last was written one tick after the one
	// before it, or later if a write took longer.
	w.achieved = float64(w.changes) / time.Since(began).Seconds()
	wg.Wait()
	if len(lat) == 0 {
		t.Fatal("no change followed")
	}
	return lat
}

//go:build integration

package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// nodePortServices is how many of the test's Services take a NodePort: the
// API server's default NodePort range (30000-32767) holds 2,768, and the
// Services past it go without (allocateLoadBalancerNodePorts: false).
const nodePortServices = 2000

// TestConsoleAtScale measures the page with many Services and nodes
// (docs/console.md records the numbers). It writes thousands of objects, so
// it runs only when asked: OUTRIGGER_CONSOLE_SCALE=SERVICESxNODES, e.g.
// 1000x5000.
func TestConsoleAtScale(t *testing.T) {
	spec := os.Getenv("OUTRIGGER_CONSOLE_SCALE")
	if spec == "" {
		t.Skip("set OUTRIGGER_CONSOLE_SCALE=1000x5000 to measure the console at that many Services and nodes")
	}
	svcs, nodes, err := parseScale(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	cfg := rest.CopyConfig(testenv.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client := kubernetes.NewForConfigOrDie(cfg)

	start := time.Now()
	prefix := testenv.Name("scale")
	parallel(t, nodes, func(i int) error {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-node-%d", prefix, i), Labels: map[string]string{
				corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3), corev1.LabelInstanceTypeStable: "sim.small"}},
			Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("sim://i-%08x", i), PodCIDRs: []string{fmt.Sprintf("fd00:10:0:%x::/64", i)}},
		}
		created, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionStatus(map[bool]string{true: "True", false: "False"}[i%50 != 0]),
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: netip.AddrFrom4([4]byte{127, 2, byte(i >> 8), byte(i)}).String()}},
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(context.Background(), created, metav1.UpdateOptions{})
		return err
	})
	t.Cleanup(func() {
		parallel(t, nodes, func(i int) error {
			return client.CoreV1().Nodes().Delete(context.Background(), fmt.Sprintf("%s-node-%d", prefix, i), metav1.DeleteOptions{})
		})
	})
	ns := prefix
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// One Service in ten stays pending with a condition saying why.
	parallel(t, svcs, func(i int) error {
		svc := lbService(ns, fmt.Sprintf("svc-%d", i), 80)
		if i >= nodePortServices {
			svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
		}
		s, err := client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if i%10 == 9 {
			s.Status.Conditions = []metav1.Condition{{Type: "LoadBalancerReady", Status: "False", Reason: "QuotaExceeded", Message: "load balancer quota exceeded", LastTransitionTime: metav1.Now()}}
		} else {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: vip(i).String()}}
		}
		_, err = client.CoreV1().Services(ns).UpdateStatus(context.Background(), s, metav1.UpdateOptions{})
		return err
	})
	t.Logf("created %d nodes and %d Services in %s", nodes, svcs, time.Since(start).Round(time.Millisecond))

	ranges, err := console.ParseRanges([]string{"vips=198.18.0.0/18", "pods-ipv6=fd00:10::/48@64"})
	if err != nil {
		t.Fatal(err)
	}
	url := serveConsole(t, console.Options{Ranges: ranges})
	// The server's side: the first request starts the informers and waits
	// for their sync; a snapshot is then built and encoded per change.
	t0 := time.Now()
	resp, err := http.Get(url + "api/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	size, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("first GET api/snapshot (informers started and synced): %s, %d bytes", time.Since(t0).Round(time.Millisecond), size)
	probe := console.New(console.Options{Client: testenv.Client, Ranges: ranges})
	probe.Snapshot(console.View{})
	// Each view built and encoded 7 times, the views taking turns so that
	// a passing stall (the informers still taking in the objects just
	// written, a garbage collection) does not land on one: the median.
	views := []struct {
		name string
		view console.View
	}{
		{"no filter", console.View{}},
		{"node filter to one", console.View{Nodes: fmt.Sprintf("%s-node-%d", prefix, nodes-1)}},
		{"Services not ready", console.View{NotReady: true}},
	}
	took := make([][]time.Duration, len(views))
	sizes := make([]int, len(views))
	for range 7 {
		for i, v := range views {
			t0 := time.Now()
			data, err := json.Marshal(probe.Snapshot(v.view))
			if err != nil {
				t.Fatal(err)
			}
			took[i] = append(took[i], time.Since(t0))
			sizes[i] = len(data)
		}
	}
	for i, v := range views {
		slices.Sort(took[i])
		t.Logf("snapshot built and encoded, %s: median %s (of 7: %s to %s), %d bytes", v.name, took[i][3].Round(time.Millisecond),
			took[i][0].Round(time.Millisecond), took[i][6].Round(time.Millisecond), sizes[i])
	}

	// Chromium starts before the clock does.
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d load balancers, %d nodes", svcs, nodes)
	waitFor(t, ctx, "everything loaded", fmt.Sprintf(`document.querySelector("#status").textContent.includes(%q)`, want))
	t.Logf("navigation to page showing %s: %s", want, time.Since(t0).Round(time.Millisecond))
	t.Logf("first render: %s ms", eval[string](t, ctx, `document.body.dataset.renderMs`))
	// The page's own clock, from the navigation's start: what a user waits
	// for, without the test's polling and its DevTools round trips.
	t.Logf("page's clock (ms from navigation start): %s", eval[string](t, ctx, `(() => { const n = performance.getEntriesByType("navigation")[0];
		return JSON.stringify({html: Math.round(n.responseEnd), domContentLoaded: Math.round(n.domContentLoadedEventEnd), everythingShown: Number(document.body.dataset.firstShownMs)}); })()`))
	if got := eval[int](t, ctx, `document.querySelectorAll("#node-table tbody tr").length`); got != min(nodes, 200) {
		t.Errorf("node rows: %d, want %d (the first 200)", got, min(nodes, 200))
	}
	pending := eval[string](t, ctx, `document.querySelector("#lbs-count").textContent`)
	if wantCount := fmt.Sprintf("(%d, %d ready)", svcs, svcs-svcs/10); pending != wantCount {
		t.Errorf("Service count %q, want %q", pending, wantCount)
	}

	// A filter is applied by the server: a keystroke's time is until the
	// page draws the rows of the new view (after its 120 ms debounce).
	filter := func(id, value, done string) float64 {
		t.Helper()
		js := fmt.Sprintf(`new Promise((resolve, reject) => {
			const i = document.querySelector(%q), t0 = performance.now();
			i.value = %q; i.dispatchEvent(new Event("input"));
			const check = () => (%s) ? resolve(performance.now() - t0) :
				performance.now() - t0 > 60000 ? reject(new Error("not drawn in 60 s")) : setTimeout(check, 5);
			check();
		})`, id, value, done)
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("filtering %s to %q: %v", id, value, err)
		}
		return v
	}
	last := fmt.Sprintf("%s-node-%d", prefix, nodes-1)
	ms := filter("#node-filter", last, fmt.Sprintf(`document.querySelectorAll("#node-table tbody tr").length === 1 && document.querySelector("#node-table tbody tr").dataset.node === %q`, last))
	t.Logf("node filter keystroke until the one row is drawn: %.1f ms", ms)
	ms = filter("#lb-filter", "quota", `document.body.dataset.view.startsWith("services=quota&")`)
	t.Logf("Service filter keystroke until the %s rows are drawn: %.1f ms", eval[string](t, ctx, `String(document.querySelectorAll("#lb-table tbody tr").length)`), ms)
	if got, want := eval[string](t, ctx, `document.querySelector("#lbs-more").textContent`), fmt.Sprintf("Showing 200 of %d matching Services", svcs/10); svcs/10 > 200 && !strings.HasPrefix(got, want) {
		t.Errorf("under the filter the page says %q, want %q...", got, want)
	}

	// Under churn: Services change while the page is open; each push is
	// rendered, and the page keeps answering.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`window.__renders = []; new MutationObserver(() => window.__renders.push(Number(document.body.dataset.renderMs))).observe(document.body, {attributes: true, attributeFilter: ["data-render-ms", "data-generated"]})`)); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for i := range 20 {
		s, err := client.CoreV1().Services(ns).Get(context.Background(), fmt.Sprintf("svc-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: vip(svcs + i).String()}}
		if _, err := client.CoreV1().Services(ns).UpdateStatus(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	last20 := vip(svcs + 19).String()
	// The table draws the first 200 matching rows: filtered to svc-19's
	// name, its row is among them at any size.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector("#lb-filter").value = "svc-19"; document.querySelector("#lb-filter").dispatchEvent(new Event("input"))`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the last change shown", fmt.Sprintf(`document.querySelector('tr[data-lb="%s/svc-19"] .vip').textContent === %q`, ns, last20))
	t.Logf("20 Service status updates until the page shows the last: %s", time.Since(t0).Round(time.Millisecond))
	t.Logf("renders during churn (ms): %s", eval[string](t, ctx, `JSON.stringify(window.__renders)`))
	t.Logf("JS heap: %s MB", eval[string](t, ctx, `performance.memory ? (performance.memory.usedJSHeapSize / 1048576).toFixed(1) : "n/a"`))
	if dir := os.Getenv("OUTRIGGER_CONSOLE_SCREENSHOTS"); dir != "" {
		screenshot(t, ctx, screenshotDir(t), "console-scale.png")
	}
}

// vip is Service i's ingress address, inside the console's vips range (a
// /18: 16,384 addresses, more than the largest size measured).
func vip(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }

func parseScale(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "x")
	svcs, err1 := strconv.Atoi(a)
	nodes, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || svcs < 10 || nodes < 1 {
		return 0, 0, fmt.Errorf("OUTRIGGER_CONSOLE_SCALE=%q: want SERVICESxNODES, e.g. 1000x5000", s)
	}
	return svcs, nodes, nil
}

// parallel runs f(0..n-1) on 32 workers and fails the test on the first
// error.
func parallel(t *testing.T, n int, f func(int) error) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
	)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { ferr = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if ferr != nil {
		t.Fatal(ferr)
	}
}

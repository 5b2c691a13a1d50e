//go:build integration

package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestGatewaysInBrowser drives the Gateways section against a real API
// server with the Gateway API's CRDs and Outrigger's gateway controller
// (sim provider) running: a programmed Gateway shows its address,
// listeners and accepted routes (an HTTPRoute and a GRPCRoute); one the
// provider refused (its quota) shows NotProgrammed with the reason and
// message; a Gateway of another controller's class is not marked as
// Outrigger's; the filter is the server's.
// gatewayBrowser installs the Gateway API's CRDs in the test's API server
// and opens a browser: what each Gateway page test starts with.
func gatewayBrowser(t *testing.T) (*gwclient.Clientset, context.Context) {
	t.Helper()
	if err := gatewayapi.Install(context.Background(), testenv.Config); err != nil {
		t.Fatal(err)
	}
	gw, err := gwclient.NewForConfig(testenv.Config)
	if err != nil {
		t.Fatal(err)
	}
	return gw, browser(t)
}

func TestGatewaysInBrowser(t *testing.T) {
	bg := context.Background()
	gw, ctx := gatewayBrowser(t)
	cloud := testenv.StartCloud(t)
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1}) // the second Gateway is refused
	// A class of its own: the Services other tests left behind (their
	// namespaces go in the background) are not this Outrigger's to
	// serve, nor to count against the quota.
	lbClass := "example.com/" + testenv.Name("gateways")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller",
		"--gateway-namespace="+testenv.Name("dataplanes"), "--load-balancer-class="+lbClass)
	ns := testenv.Name("gateways")
	if _, err := testenv.Client.CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Registered after Outrigger started, so run before it stops: its
	// finalizer lets the Gateways go once their load balancers are gone.
	t.Cleanup(func() {
		_ = gw.GatewayV1().Gateways(ns).DeleteCollection(bg, metav1.DeleteOptions{}, metav1.ListOptions{})
		testenv.Eventually(t, time.Minute, "the test's Gateways gone", func() (bool, error) {
			l, err := gw.GatewayV1().Gateways(ns).List(bg, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, err
		})
		_ = testenv.Client.CoreV1().Namespaces().Delete(bg, ns, metav1.DeleteOptions{})
	})
	url := serveConsole(t, console.Options{Gateway: gw, Owners: []console.Owner{{Provider: "sim", Class: lbClass}}})
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the stream", `document.querySelector("#status").className === "live"`)

	if _, err := testenv.Client.CoreV1().Services(ns).Create(bg, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newGateway := func(name, class string) {
		t.Helper()
		g := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class),
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
		if _, err := gw.GatewayV1().Gateways(ns).Create(bg, g, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	programmed := func(name string) *metav1.Condition {
		g, err := gw.GatewayV1().Gateways(ns).Get(bg, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return meta.FindStatusCondition(g.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	}
	ours := gateway.ClassNameFor("sim", lbClass)
	newGateway("shop", ours)
	route := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front"}, Spec: gwv1.HTTPRouteSpec{
		CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "shop"}}},
		Hostnames:       []gwv1.Hostname{"shop.example.com"},
		Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr.To(gwv1.PortNumber(8080))}}}}}},
	}}
	if _, err := gw.GatewayV1().HTTPRoutes(ns).Create(bg, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rpc := &gwv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rpc"}, Spec: gwv1.GRPCRouteSpec{
		CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "shop"}}},
		Hostnames:       []gwv1.Hostname{"rpc.example.com"},
		Rules:           []gwv1.GRPCRouteRule{{BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr.To(gwv1.PortNumber(8080))}}}}}},
	}}
	if _, err := gw.GatewayV1().GRPCRoutes(ns).Create(bg, rpc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "shop programmed", func() (bool, error) {
		p := programmed("shop")
		return p != nil && p.Status == metav1.ConditionTrue, nil
	})
	newGateway("second", ours)
	testenv.Eventually(t, time.Minute, "second refused by the provider", func() (bool, error) {
		// Programmed is False from the start ("waiting for the load
		// balancer"); the refusal is the message naming the provider's answer.
		p := programmed("second")
		return p != nil && p.Status == metav1.ConditionFalse && strings.Contains(p.Message, "QuotaExceeded"), nil
	})
	foreign := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("foreign")}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/another-controller"}}
	if _, err := gw.GatewayV1().GatewayClasses().Create(bg, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.GatewayV1().GatewayClasses().Delete(bg, foreign.Name, metav1.DeleteOptions{}) })
	newGateway("elsewhere", foreign.Name)

	shop, err := gw.GatewayV1().Gateways(ns).Get(bg, "shop", metav1.GetOptions{})
	if err != nil || len(shop.Status.Addresses) == 0 {
		t.Fatalf("shop: %v, addresses %v", err, shop.Status.Addresses)
	}
	row := func(name string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-gw="%s/%s"]')`, ns, name)
	}
	waitFor(t, ctx, "shop programmed with its address and listener", fmt.Sprintf(`(() => { const r = %s; return !!r && r.dataset.state === "Programmed" && r.querySelector(".addresses").textContent === %q && r.querySelector(".listeners-summary").textContent === "http HTTP/80 (2)" && r.querySelector(".controller").textContent.startsWith("Outrigger (sim)"); })()`, row("shop"), shop.Status.Addresses[0].Value))
	second := programmed("second")
	waitFor(t, ctx, "second's reason and message", fmt.Sprintf(`(() => { const r = %s; return !!r && r.dataset.state === "NotProgrammed" && r.classList.contains("failing") && r.querySelector(".reason b").textContent === %q && r.querySelector(".reason").textContent.includes(%q); })()`, row("second"), second.Reason, second.Message))
	waitFor(t, ctx, "the other controller's Gateway", fmt.Sprintf(`(() => { const r = %s; return !!r && r.dataset.state === "Pending" && r.querySelector(".controller").textContent === "example.com/another-controller"; })()`, row("elsewhere")))

	// The routes are behind the Gateway's disclosure, opened from the
	// keyboard.
	pressEnterOn(t, ctx, fmt.Sprintf(`tr[data-gw="%s/shop"] summary`, ns))
	waitFor(t, ctx, "shop's route accepted", fmt.Sprintf(`(() => { const li = document.querySelector('tr[data-gw="%s/shop"] li[data-route="HTTPRoute/%s/front"]'); return !!li && li.dataset.state === "Accepted" && li.textContent.includes("shop.example.com"); })()`, ns, ns))
	waitFor(t, ctx, "shop's GRPCRoute accepted", fmt.Sprintf(`(() => { const li = document.querySelector('tr[data-gw="%s/shop"] li[data-route="GRPCRoute/%s/rpc"]'); return !!li && li.dataset.state === "Accepted" && li.textContent.includes("rpc.example.com"); })()`, ns, ns))
	waitFor(t, ctx, "shop's load balancer Service", fmt.Sprintf(`%s.querySelector(".gw-lb").textContent.startsWith("Service ")`, row("shop")))
	if low := eval[[]string](t, ctx, contrastCheck); len(low) > 0 {
		t.Errorf("text below 4.5:1 contrast: %v", low)
	}
	shots := screenshotDir(t)
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#gws")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "console-gateways.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}

	// The server filters: one row, the counts of all.
	count := eval[string](t, ctx, `document.querySelector("#gws-count").textContent`)
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#gw-filter"), "quota")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "only the refused Gateway", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("#gw-table tbody tr")]; return document.body.dataset.view === "gateways=quota" && rows.length === 1 && rows[0].dataset.gw === %q; })()`, ns+"/second"))
	if got := eval[string](t, ctx, `document.querySelector("#gws-count").textContent`); got != count {
		t.Errorf("the Gateway count says %q under a filter, want %q as before", got, count)
	}

	// Deleted, it leaves the page.
	if err := gw.GatewayV1().Gateways(ns).Delete(bg, "elsewhere", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const i = document.querySelector("#gw-filter"); i.value = ""; i.dispatchEvent(new Event("input")); })()`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the deleted Gateway gone", fmt.Sprintf(`document.body.dataset.view === "" && !%s && !!%s`, row("elsewhere"), row("shop")))
}

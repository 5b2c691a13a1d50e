//go:build integration

package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestGatewayTrafficNotReadInBrowser drives the Gateway view's data plane
// traffic against a real API server under its RBAC authorizer, the
// console reading as an identity granted, step by step, what
// deploy/rbac-gateway.yaml grants it: without list on pods the page says
// RBAC refused them; with it, a pod not ready is named as such, and the
// ready pod's scrape is refused for want of get on pods/proxy; with that
// too, the API server itself answers the scrape (this harness has no
// kubelet, and the pod's loopback address is not one it proxies to), and
// the page says so. Figures read through a real kubelet are the real
// cluster's test (TestGatewayRouteChangesAtScale, cluster package).
func TestGatewayTrafficNotReadInBrowser(t *testing.T) {
	bg := context.Background()
	gw, ctx := gatewayBrowser(t)
	ns, dp := testenv.Name("traffic"), testenv.Name("traffic-dp")
	for _, n := range []string{ns, dp} {
		if _, err := testenv.Client.CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testenv.Client.CoreV1().Namespaces().Delete(bg, n, metav1.DeleteOptions{}) })
	}
	// A class of an Outrigger controller that no Outrigger runs here: the
	// console goes by the class, the Service and the pods' labels.
	class := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("traffic")}, Spec: gwv1.GatewayClassSpec{ControllerName: "outrigger.dev/traffic-test"}}
	if _, err := gw.GatewayV1().GatewayClasses().Create(bg, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.GatewayV1().GatewayClasses().Delete(bg, class.Name, metav1.DeleteOptions{}) })
	g, err := gw.GatewayV1().Gateways(ns).Create(bg, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class.Name), Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string]string{"app.kubernetes.io/managed-by": "outrigger", gateway.GatewayUIDLabel: string(g.UID)}
	if _, err := testenv.Client.CoreV1().Services(dp).Create(bg, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: dp, Name: "shop", Labels: owned},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http-80", Protocol: corev1.ProtocolTCP, Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods need their ServiceAccount; no controller makes it here.
	if _, err := testenv.Client.CoreV1().ServiceAccounts(dp).Create(bg, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		ready bool
	}{{"shop-dp-a", true}, {"shop-dp-b", false}} {
		pod, err := testenv.Client.CoreV1().Pods(dp).Create(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: dp, Name: p.name, Labels: owned},
			Spec: corev1.PodSpec{NodeName: "no-kubelet", Containers: []corev1.Container{{Name: "dataplane", Image: "outrigger:test",
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 15021, Protocol: corev1.ProtocolTCP}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
		if p.ready {
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		}
		if _, err := testenv.Client.CoreV1().Pods(dp).UpdateStatus(bg, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The console's identity may read Services cluster-wide (to find the
	// Gateway's load balancer Service), nothing in the data plane
	// namespace yet.
	user := testenv.Name("traffic-console")
	grant := func(kind string, rules ...rbacv1.PolicyRule) {
		t.Helper()
		name := testenv.Name("traffic")
		subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		if kind == "ClusterRole" {
			if _, err := testenv.Client.RbacV1().ClusterRoles().Create(bg, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := testenv.Client.RbacV1().ClusterRoleBindings().Create(bg, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = testenv.Client.RbacV1().ClusterRoleBindings().Delete(bg, name, metav1.DeleteOptions{})
				_ = testenv.Client.RbacV1().ClusterRoles().Delete(bg, name, metav1.DeleteOptions{})
			})
			return
		}
		if _, err := testenv.Client.RbacV1().Roles(dp).Create(bg, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := testenv.Client.RbacV1().RoleBindings(dp).Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grant("ClusterRole", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}})
	cfg := rest.CopyConfig(testenv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := serveConsole(t, console.Options{Client: as, Gateway: gw})
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the stream", `document.querySelector("#status").className === "live"`)
	row := fmt.Sprintf(`document.querySelector('tr[data-gw="%s/shop"]')`, ns)
	waitFor(t, ctx, "shop's row", "!!"+row)
	pressEnterOn(t, ctx, fmt.Sprintf(`tr[data-gw="%s/shop"] summary`, ns))
	waitFor(t, ctx, "pods not listed: RBAC", fmt.Sprintf(`(() => { const r = %s, why = r.querySelector(".traffic-why");
		return r.querySelector(".traffic-summary").textContent === "not read" && !!why && why.textContent.includes("RBAC refused (list pods)") && why.textContent.includes(%q); })()`, row, dp))

	// Pods listed: one not ready, the other's scrape refused.
	grant("Role", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
	pod := func(name string) string {
		return fmt.Sprintf(`((%s.querySelector('.not-read li[data-pod="%s"]') || {}).textContent || "")`, row, name)
	}
	waitFor(t, ctx, "the scrape refused: RBAC", fmt.Sprintf(`(() => { const p = %s.querySelector(".traffic-pods");
		return !!p && p.textContent.startsWith("0 of 2 pods read in %s") && %s.includes("RBAC refused (get pods/proxy)") && %s.includes("pod not ready (Pending)"); })()`,
		row, dp, pod("shop-dp-a"), pod("shop-dp-b")))

	// Allowed, the API server has no kubelet and no pod address to proxy
	// to: the page says the scrape failed, with the API server's answer.
	grant("Role", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get"}})
	waitFor(t, ctx, "the scrape answered by the API server", fmt.Sprintf(`(() => { const a = %s; return a.includes("get pods/proxy failed") && !a.includes("RBAC"); })()`, pod("shop-dp-a")))
	if low := eval[[]string](t, ctx, contrastCheck); len(low) > 0 {
		t.Errorf("text below 4.5:1 contrast: %v", low)
	}
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#gws")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir(t), "console-gateway-traffic-not-read.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("shop-dp-a: %s", eval[string](t, ctx, pod("shop-dp-a")))
}

package cluster

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// outriggerIdentity is Outrigger's ServiceAccount as the API server
// authenticates its pods (deploy/: kube-system/cloud-controller-manager).
var outriggerIdentity = rest.ImpersonationConfig{
	UserName: "system:serviceaccount:kube-system:cloud-controller-manager",
	Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
}

// checkConsoleTraffic reads Gateway scale-0's data plane figures as the
// web console does, under Outrigger's own RBAC, through the API server's
// pod proxy to the data plane pod on a real kubelet, after the load sent
// requests to each of its routes: its pod is read, and its first route's
// requests are counted.
func (w *scaleWorld) checkConsoleTraffic(ctx context.Context, t *testing.T) {
	t.Helper()
	var gw gwv1.Gateway
	if err := w.cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "scale-0"}, &gw); err != nil {
		t.Fatal(err)
	}
	pods, err := w.c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: gateway.GatewayUIDLabel + "=" + string(gw.UID)})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("Gateway scale-0's data plane pods: %v (%d found)", err, len(pods.Items))
	}
	cfg := rest.CopyConfig(w.c.Config)
	cfg.Impersonate = outriggerIdentity
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := console.ReadGatewayTraffic(ctx, as, string(gw.UID), pods.Items[0].Namespace)
	if tr.Reason != "" || tr.PodsRead != len(pods.Items) || len(tr.NotRead) > 0 {
		t.Fatalf("the console read %d of %d data plane pods of scale-0: %s %+v", tr.PodsRead, len(pods.Items), tr.Reason, tr.NotRead)
	}
	var requests float64
	for _, r := range tr.Routes {
		if r.Name == "default/scale-0" {
			requests = r.Requests
		}
	}
	if requests == 0 {
		t.Errorf("the console counts no request of route default/scale-0 on its Gateway (routes: %+v)", tr.Routes)
	}
}

package apiserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestTenantModeRunsWithTheChartsRBAC installs the RBAC the chart renders
// for tenant mode in a management cluster, and runs tenant mode as the
// chart's ServiceAccount with nothing more: it reads the tenant's Secret,
// holds its Lease, records its Event, and the tenant's node is initialized.
func TestTenantModeRunsWithTheChartsRBAC(t *testing.T) {
	ctx := context.Background()
	release, tenants := testenv.Name("mgmt"), testenv.Name("tenants")
	createNamespace(t, release)
	createNamespace(t, tenants)
	rel, err := charttest.Render(release, fmt.Sprintf("cloudProvider: sim\ntenants: {enabled: true, namespace: %s, selector: example.com/tenant}\n", tenants))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := charttest.Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	for _, obj := range objs {
		if !slices.Contains([]string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, obj.GetKind()) {
			continue
		}
		r, err := c.resource(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "outrigger-chart-test"}); err != nil {
			t.Fatalf("applying %s: %v", charttest.ObjectKey(obj), err)
		}
		t.Cleanup(func() { _ = r.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	}

	// A kubeconfig of the chart's ServiceAccount, as its pod would have.
	tok, err := testenv.Client.CoreV1().ServiceAccounts(release).CreateToken(ctx, "cloud-controller-manager",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := testenv.Config.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(testenv.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	saKubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"management": {Server: testenv.Config.Host, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"outrigger": {Token: tok.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"outrigger": {Cluster: "management", AuthInfo: "outrigger"}},
		CurrentContext: "outrigger",
	}, saKubeconfig); err != nil {
		t.Fatal(err)
	}

	cloud := testenv.StartCloud(t)
	tenant := testenv.StartSecondControlPlane(t)
	kc, err := os.ReadFile(tenant.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenants, Name: "shop", Labels: map[string]string{"example.com/tenant": "true"}},
		Data: map[string][]byte{"kubeconfig": kc}}
	if _, err := testenv.Client.CoreV1().Secrets(tenants).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := testenv.Name("shop-node")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: node, Zone: "zone-a", Addresses: []simcloud.Address{{Type: "InternalIP", Address: "198.18.13.1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.Client.CoreV1().Nodes().Create(ctx, kubeletsim.NewNode(node), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	testenv.StartOutrigger(t, cloud, "--kubeconfig="+saKubeconfig, "--tenants-namespace="+tenants, "--tenants-selector=example.com/tenant",
		"--tenants-replica-id=pod-1", "--controllers=cloud-node-controller",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=300ms")
	testenv.Eventually(t, 60*time.Second, "the tenant's node initialized by tenant mode under the chart's RBAC", func() (bool, error) {
		n, err := tenant.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return n.Spec.ProviderID != "" && !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool {
			return tt.Key == cloudproviderapi.TaintExternalCloudProvider
		}), nil
	})
	lease, err := testenv.Client.CoordinationV1().Leases(tenants).Get(ctx, "outrigger-tenant-shop", metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != "pod-1" {
		t.Errorf("tenant Lease %v (%v), want held by pod-1", lease, err)
	}
	testenv.Eventually(t, 30*time.Second, "the TenantStarted Event on the Secret", func() (bool, error) {
		events, err := testenv.Client.CoreV1().Events(tenants).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=shop"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == "TenantStarted" }), nil
	})
}

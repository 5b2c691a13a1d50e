//go:build integration

package manager_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/apiproxy"
)

// identityAccount makes a ServiceAccount with deploy/rbac.yaml's
// ClusterRole but for get on namespaces/kube-system, and returns a
// kubeconfig that authenticates as it (a token, as a pod's) and grant,
// which gives it that get: RBAC written for the upstream CCM, or not yet
// synced, until grant.
func identityAccount(t *testing.T) (kubeconfig string, grant func()) {
	t.Helper()
	ctx := context.Background()
	c := testenv.Client
	name := testenv.Name("identity")
	data, err := os.ReadFile("../../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" && role.Name == "system:cloud-controller-manager" {
			rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "namespaces") })
		}
	}
	if len(rules) == 0 {
		t.Fatal("deploy/rbac.yaml has no ClusterRole system:cloud-controller-manager")
	}
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(roleName string, rules []rbacv1.PolicyRule) {
		if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: roleName}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: roleName},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: roleName},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, roleName, metav1.DeleteOptions{})
			_ = c.RbacV1().ClusterRoles().Delete(ctx, roleName, metav1.DeleteOptions{})
		})
	}
	bind(name, rules)
	t.Cleanup(func() { _ = c.CoreV1().ServiceAccounts("default").Delete(ctx, name, metav1.DeleteOptions{}) })
	tok, err := c.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(testenv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.ClientCertificate, ai.ClientKey, ai.ClientCertificateData, ai.ClientKeyData = "", "", nil, nil
		ai.Token = tok.Status.Token
	}
	kubeconfig = filepath.Join(t.TempDir(), "identity.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, func() {
		bind(name+"-kube-system", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"kube-system"}, Verbs: []string{"get"}}})
	}
}

// identityReads is outrigger_cluster_identity_reads_total{tenant="",result} now.
func identityReads(t *testing.T, result string) float64 {
	t.Helper()
	return metricstest.Value(t, "outrigger_cluster_identity_reads_total", map[string]string{"tenant": "", "result": result})
}

// loadBalancerIdentity creates a Service of type LoadBalancer and returns
// the cluster-id tag of the load balancer made for it.
func loadBalancerIdentity(t *testing.T, cloud *testenv.Cloud) string {
	t.Helper()
	svc, err := testenv.Client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("identity-lb"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	var id string
	testenv.Eventually(t, 30*time.Second, "a load balancer for "+svc.Name, func() (bool, error) {
		for _, lb := range cloud.LoadBalancers() {
			if lb.Tags[sim.TagServiceUID] == string(svc.UID) {
				id = lb.Tags[sim.TagClusterID]
				return true, nil
			}
		}
		return false, nil
	})
	return id
}

func kubeSystemUID(t *testing.T) types.UID {
	t.Helper()
	ns, err := testenv.Client.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.UID
}

// A refusal to read kube-system lasting past the lease duration starts the
// no-identity mode, with an Event; once RBAC grants the read, the running
// Outrigger picks the identity up, says so, and tags the load balancers it
// makes from then on, without a restart.
func TestClusterIdentityRefusedPastTheLeaseIsPickedUpOnceGranted(t *testing.T) {
	kubeconfig, grant := identityAccount(t)
	lease := testenv.Name("identity-lease")
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--kubeconfig="+kubeconfig, "--controllers=service",
		"--leader-elect-resource-name="+lease, "--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1s", "--leader-elect-retry-period=500ms")
	testenv.Eventually(t, 60*time.Second, "an Event "+manager.ReasonClusterIdentityUnavailable, func() (bool, error) {
		return len(testenv.Events(t, lease)[manager.ReasonClusterIdentityUnavailable]) > 0, nil
	})
	if id := loadBalancerIdentity(t, cloud); id != "" {
		t.Errorf("load balancer made while refused carries identity %q", id)
	}
	grant()
	testenv.Eventually(t, 90*time.Second, "an Event "+manager.ReasonClusterIdentityRead, func() (bool, error) {
		return len(testenv.Events(t, lease)[manager.ReasonClusterIdentityRead]) > 0, nil
	})
	if id, want := loadBalancerIdentity(t, cloud), kubeSystemUID(t); id != string(want) {
		t.Errorf("load balancer made once readable carries identity %q, want kube-system's UID %s", id, want)
	}
}

// A refusal shorter than the lease duration (RBAC not yet synced, an
// authentication webhook's outage) is waited out: the providers start with
// the identity, and the first load balancer carries it.
func TestClusterIdentityBriefRefusalIsWaitedOut(t *testing.T) {
	kubeconfig, grant := identityAccount(t)
	lease := testenv.Name("identity-lease")
	cloud := testenv.StartCloud(t)
	refused := identityReads(t, "refused")
	testenv.StartOutrigger(t, cloud, "--kubeconfig="+kubeconfig, "--controllers=service",
		"--leader-elect-resource-name="+lease, "--leader-elect-lease-duration=10m")
	testenv.Eventually(t, 60*time.Second, "a refused read of kube-system", func() (bool, error) {
		return identityReads(t, "refused") > refused, nil
	})
	grant()
	if id, want := loadBalancerIdentity(t, cloud), kubeSystemUID(t); id != string(want) {
		t.Errorf("first load balancer carries identity %q, want kube-system's UID %s", id, want)
	}
	if e := testenv.Events(t, lease)[manager.ReasonClusterIdentityUnavailable]; len(e) > 0 {
		t.Errorf("Event %s after a brief refusal: %s", manager.ReasonClusterIdentityUnavailable, e[0].Message)
	}
}

// copyProxy serves the package's API server to one client as a control
// plane restored from its etcd snapshot would look, marked as a copy: the
// same objects, the same UIDs, and kube-system annotated
// outrigger.dev/cluster-copy=name. It returns a kubeconfig through it.
func copyProxy(t *testing.T, name string) string {
	t.Helper()
	const kubeSystem = "/api/v1/namespaces/kube-system"
	return apiproxy.StartRewriting(t, func(r *httputil.ProxyRequest) {
		if r.In.URL.Path == kubeSystem {
			// JSON, to be rewritten below.
			r.Out.Header.Set("Accept", "application/json")
		}
	}, func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || resp.Request.URL.Path != kubeSystem || resp.StatusCode != http.StatusOK {
			return nil
		}
		var ns corev1.Namespace
		if err := json.NewDecoder(resp.Body).Decode(&ns); err != nil {
			return err
		}
		resp.Body.Close()
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		ns.Annotations[manager.AnnotationClusterCopy] = name
		data, err := json.Marshal(&ns)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(data))
		resp.ContentLength = int64(len(data))
		resp.Header.Set("Content-Length", strconv.Itoa(len(data)))
		resp.Header.Set("Content-Type", "application/json")
		return nil
	})
}

// A control plane restored from an etcd snapshot beside its original, both
// on one cloud account, the copy marked outrigger.dev/cluster-copy: the
// copy's Outrigger, seeing the same Services with the same UIDs, neither
// changes nor takes over the original's load balancer (the cloud refuses
// its writes, which name the copy's identity), while the original keeps
// serving it.
func TestRestoredCopyBesideItsOriginalLeavesItsLoadBalancersAlone(t *testing.T) {
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service")
	uid := string(kubeSystemUID(t))
	svc, err := testenv.Client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("original"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	find := func() (simcloud.LoadBalancer, bool) {
		for _, lb := range cloud.LoadBalancers() {
			if lb.Tags[sim.TagServiceUID] == string(svc.UID) {
				return lb, true
			}
		}
		return simcloud.LoadBalancer{}, false
	}
	var before simcloud.LoadBalancer
	testenv.Eventually(t, 30*time.Second, "the original's load balancer", func() (bool, error) {
		var ok bool
		before, ok = find()
		return ok && before.Tags[sim.TagClusterID] == uid, nil
	})

	testenv.StartOutrigger(t, cloud, "--controllers=service", "--kubeconfig="+copyProxy(t, "dr-drill"))
	testenv.Eventually(t, 60*time.Second, "the copy refused the original's load balancer", func() (bool, error) {
		return len(testenv.Events(t, svc.Name)["SyncLoadBalancerFailed"]) > 0, nil
	})
	after, ok := find()
	if !ok || after.VIP != before.VIP || after.Tags[sim.TagClusterID] != uid || !maps.Equal(after.Tags, before.Tags) {
		t.Errorf("the original's load balancer changed under the copy: before %+v, after %+v (found %t)", before, after, ok)
	}
	if n := len(cloud.LoadBalancers()); n != 1 {
		t.Errorf("%d load balancers, want the original's alone", n)
	}
}

//go:build integration

package manager_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestDeployRBACGivesEnoughAndNoMore runs Outrigger with each of deploy/'s
// two RBAC manifests, as the manifests' ServiceAccount, under the API
// server's RBAC authorizer, through every controller's work: nodes
// initialized, given pod CIDRs and routes, deleted when their instance is
// gone; load balancers provisioned, failing (a quota) and deleted; leader
// election; Events, repeated ones included; the secure port's delegated
// authentication and authorization; and, with --use-service-account-
// credentials, each controller's own ServiceAccount and token. Then the
// API server's audit log must show
//   - enough: no request of those identities refused (403), and
//   - no more: every verb the manifest grants on every resource used by
//     the identity it is granted to.
func TestDeployRBACGivesEnoughAndNoMore(t *testing.T) {
	for _, tc := range []struct {
		manifest, other string
		flags           []string
	}{
		{manifest: "rbac.yaml", other: "rbac-service-account-credentials.yaml"},
		{manifest: "rbac-service-account-credentials.yaml", other: "rbac.yaml", flags: []string{"--use-service-account-credentials"}},
	} {
		t.Run(tc.manifest, func(t *testing.T) {
			since := time.Now()
			grants := applyOnly(t, "../../deploy/"+tc.manifest, "../../deploy/"+tc.other)
			// Refusals explain a controller that got stuck too: reported
			// even when the exercise below fails.
			defer func() {
				_, refused := auditedRequests(t, testenv.AuditLog, since)
				for _, r := range refused {
					t.Errorf("refused (a verb deploy/%s lacks): %s", tc.manifest, r)
				}
			}()
			exerciseEveryController(t, tc.flags...)
			used, _ := auditedRequests(t, testenv.AuditLog, since)
			for user, rules := range grants {
				for _, g := range rules {
					if why, ok := unexercised[g.String()]; ok {
						t.Logf("not checked: %s %s: %s", strings.TrimPrefix(user, "system:serviceaccount:"), g, why)
						continue
					}
					if !g.used(used[user]) {
						t.Errorf("deploy/%s grants %s %s, which no code path used", tc.manifest, strings.TrimPrefix(user, "system:serviceaccount:"), g)
					}
				}
			}
		})
		// Still under that manifest's RBAC, outside the audit window above
		// (these requests are refused on purpose).
		t.Run(tc.manifest+" refuses", refusesOthersLeasesAndTokens)
	}
}

// refusesOthersLeasesAndTokens checks, under the real authorizer, that
// Outrigger's ServiceAccount cannot take over the kube-controller-manager's
// or the kube-scheduler's Lease, nor mint a token for any kube-system
// account but the controllers' own.
func refusesOthersLeasesAndTokens(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(testenv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:cloud-controller-manager"}
	as := kubernetes.NewForConfigOrDie(cfg)
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}}
		if _, err := testenv.Client.CoordinationV1().Leases("kube-system").Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		theirs, err := as.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("Outrigger read the %s Lease: err = %v", name, err)
		}
		if theirs == nil || theirs.Name == "" {
			theirs = lease
		}
		theirs.Spec.HolderIdentity = ptr.To("outrigger")
		if _, err := as.CoordinationV1().Leases("kube-system").Update(ctx, theirs, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("Outrigger took over the %s Lease: err = %v", name, err)
		}
	}
	for _, account := range []string{"default", "clusterrole-aggregation-controller", "cloud-controller-manager"} {
		_, err := as.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, account, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("Outrigger minted a token for kube-system/%s: err = %v", account, err)
		}
	}
}

// unexercised are grants a code path needs that this test cannot reach,
// with the reason.
var unexercised = map[string]string{
	"list on /nodes":    "informers list when the API server does not stream the initial list (WatchList off, older servers); here it streams",
	"list on /services": "informers list when the API server does not stream the initial list (WatchList off, older servers); here it streams",
}

// applyOnly leaves the API server with manifest's RBAC and none of
// other's (they bind the same ServiceAccount), the controllers'
// ServiceAccounts removed so Outrigger has to create them, and returns
// what manifest grants to whom.
func applyOnly(t *testing.T, manifest, other string) map[string][]grant {
	t.Helper()
	kubectl := filepath.Join(apiserver.AssetsDir(), "kubectl")
	for _, args := range [][]string{
		{"delete", "--ignore-not-found", "--wait", "-f", other},
		{"delete", "--ignore-not-found", "--wait", "-n", "kube-system", "serviceaccount", "node-controller", "service-controller", "route-controller"},
		{"apply", "-f", manifest},
		{"apply", "--dry-run=server", "-f", "../../deploy/deployment.yaml"},
	} {
		if out, err := exec.Command(kubectl, append(args, "--kubeconfig", testenv.Kubeconfig)...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	return manifestGrants(t, manifest)
}

// grant is one verb on one resource, or, for a Role the manifest binds but
// does not define (a built-in one), any of that Role's.
type grant struct {
	verbs     []string
	resources []string // "group/resource[/subresource]"
}

func (g grant) String() string {
	return fmt.Sprintf("%s on %s", strings.Join(g.verbs, "|"), strings.Join(g.resources, "|"))
}

func (g grant) used(used map[string]bool) bool {
	for _, r := range g.resources {
		for _, v := range g.verbs {
			if used[v+" "+r] {
				return true
			}
		}
	}
	return false
}

// manifestGrants reads the Roles, ClusterRoles and bindings of a manifest.
func manifestGrants(t *testing.T, path string) map[string][]grant {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Kind     string              `json:"kind"`
		Metadata metav1.ObjectMeta   `json:"metadata"`
		Rules    []rbacv1.PolicyRule `json:"rules"`
		RoleRef  rbacv1.RoleRef      `json:"roleRef"`
		Subjects []rbacv1.Subject    `json:"subjects"`
	}
	roles := map[string][]rbacv1.PolicyRule{}
	var bindings []object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o.Kind {
		case "Role", "ClusterRole":
			roles[o.Kind+"/"+o.Metadata.Name] = o.Rules
		case "RoleBinding", "ClusterRoleBinding":
			bindings = append(bindings, o)
		}
	}
	out := map[string][]grant{}
	for _, b := range bindings {
		var gs []grant
		if rules, ok := roles[b.RoleRef.Kind+"/"+b.RoleRef.Name]; ok {
			for _, r := range rules {
				for _, res := range ruleResources(r) {
					for _, v := range r.Verbs {
						gs = append(gs, grant{verbs: []string{v}, resources: []string{res}})
					}
				}
			}
		} else {
			// A built-in Role: binding it must be needed, not each of
			// its verbs, which are upstream's.
			role, err := testenv.Client.RbacV1().Roles(b.Metadata.Namespace).Get(context.Background(), b.RoleRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s binds %s %s: %v", path, b.RoleRef.Kind, b.RoleRef.Name, err)
			}
			var any grant
			for _, r := range role.Rules {
				any.verbs = append(any.verbs, r.Verbs...)
				any.resources = append(any.resources, ruleResources(r)...)
			}
			gs = append(gs, any)
		}
		for _, s := range b.Subjects {
			user := "system:serviceaccount:" + s.Namespace + ":" + s.Name
			out[user] = append(out[user], gs...)
		}
	}
	return out
}

func ruleResources(r rbacv1.PolicyRule) []string {
	var out []string
	for _, g := range r.APIGroups {
		for _, res := range r.Resources {
			out = append(out, g+"/"+res)
		}
	}
	return out
}

// auditedRequests reads the audit log from since on: the requests each
// ServiceAccount of kube-system made ("verb group/resource[/sub]"), and
// those refused.
func auditedRequests(t *testing.T, path string, since time.Time) (used map[string]map[string]bool, refused []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used = map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Verb             string                     `json:"verb"`
			RequestURI       string                     `json:"requestURI"`
			User             struct{ Username string }  `json:"user"`
			ImpersonatedUser *struct{ Username string } `json:"impersonatedUser"`
			ObjectRef        *struct {
				Resource, Subresource, APIGroup string
			} `json:"objectRef"`
			ResponseStatus *struct{ Code int } `json:"responseStatus"`
			Received       metav1.MicroTime    `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Received.Time.Before(since) {
			continue
		}
		user := ev.User.Username
		if ev.ImpersonatedUser != nil {
			user = ev.ImpersonatedUser.Username
		}
		if !strings.HasPrefix(user, "system:serviceaccount:kube-system:") {
			continue
		}
		what := ev.RequestURI
		if ev.ObjectRef != nil {
			what = ev.ObjectRef.APIGroup + "/" + ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				what += "/" + ev.ObjectRef.Subresource
			}
		}
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusForbidden {
			refused = append(refused, fmt.Sprintf("%s: %s %s", strings.TrimPrefix(user, "system:serviceaccount:"), ev.Verb, what))
			continue
		}
		if used[user] == nil {
			used[user] = map[string]bool{}
		}
		used[user][ev.Verb+" "+what] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(refused)
	return used, slices.Compact(refused)
}

// exerciseEveryController runs Outrigger as the deploy/ ServiceAccount
// through every controller's work, then stops it (releasing its lease).
func exerciseEveryController(t *testing.T, flags ...string) {
	t.Helper()
	ctx := context.Background()
	// A token of the ServiceAccount, as a pod has: the API server
	// authenticates Outrigger as the ServiceAccount itself (impersonation
	// would be audited as the admin impersonating it).
	tok, err := testenv.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "cloud-controller-manager", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
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
	saKubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, saKubeconfig); err != nil {
		t.Fatal(err)
	}

	cloud := testenv.StartCloud(t)
	name, routeless, gone, unknown := testenv.Name("rbac"), testenv.Name("rbac-routeless"), testenv.Name("rbac-gone"), testenv.Name("rbac-unknown")
	in, _ := cloud.Create(simcloud.CreateRequest{Name: name})
	_, _ = cloud.Create(simcloud.CreateRequest{Name: routeless})
	goneIn, _ := cloud.Create(simcloud.CreateRequest{Name: gone})
	testenv.CreateNode(t, name, nil)
	testenv.CreateNode(t, gone, nil)
	port := freeport.Reserve(t) // held until Outrigger binds it, with SO_REUSEPORT
	// The default lock name, the only one the manifests let Outrigger take;
	// gone first, so that taking it is exercised from its creation.
	if err := testenv.Client.CoordinationV1().Leases("kube-system").Delete(ctx, "cloud-controller-manager", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	o := testenv.StartOutrigger(t, cloud, append([]string{"--kubeconfig=" + saKubeconfig, "--leader-elect=true",
		"--allocate-node-cidrs", "--cluster-cidr=198.18.128.0/17,fd00:120::/56", "--route-reconciliation-period=500ms",
		"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--permit-port-sharing"},
		flags...)...)

	testenv.Eventually(t, 30*time.Second, "both nodes initialized", func() (bool, error) {
		return testenv.GetNode(t, name).Spec.ProviderID == "sim://"+in.ID && testenv.GetNode(t, gone).Spec.ProviderID != "", nil
	})
	testenv.Eventually(t, 30*time.Second, "pod CIDRs, a route and NetworkUnavailable=False", func() (bool, error) {
		n := testenv.GetNode(t, name)
		for _, c := range n.Status.Conditions {
			if c.Type == "NetworkUnavailable" {
				return len(n.Spec.PodCIDRs) == 2 && c.Status == "False" && len(cloud.Routes()) >= 2, nil
			}
		}
		return false, nil
	})
	if _, err := cloud.SetState(goneIn.ID, simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}
	testenv.SetReady(t, gone, false)
	testenv.Eventually(t, 30*time.Second, "node of the terminated instance deleted, its routes too", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Nodes().Get(ctx, gone, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(cloud.Routes()) == 2, nil
	})
	// Quotas that make some work fail over and over (a repeated Event is
	// written as a patch of the first): a node the route table has no room
	// for, a second load balancer; and a node with no instance behind it.
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1, MaxRoutes: 2})
	testenv.CreateNode(t, routeless, nil)
	testenv.CreateNode(t, unknown, nil)

	// Load balancers: one provisioned, one refused by the quota.
	var lbs []string
	for range 2 {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("rbac-lb"), Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := testenv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		lbs = append(lbs, svc.Name)
	}
	testenv.Eventually(t, 30*time.Second, "one load balancer provisioned, repeated failures for the other", func() (bool, error) {
		n := 0
		for _, s := range lbs {
			got, err := testenv.Client.CoreV1().Services("default").Get(ctx, s, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			n += len(got.Status.LoadBalancer.Ingress)
		}
		return n == 1 && repeated(t, lbs...) && repeated(t, routeless) && repeated(t, unknown), nil
	})
	for _, s := range lbs {
		if err := testenv.Client.CoreV1().Services("default").Delete(ctx, s, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "services deleted, their finalizers removed", func() (bool, error) {
		for _, s := range lbs {
			if _, err := testenv.Client.CoreV1().Services("default").Get(ctx, s, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return len(cloud.LoadBalancers()) == 0, nil
	})

	// The secure port: a scraper's token is reviewed, its access checked.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	for _, path := range []string{"/healthz", "/readyz", "/readyz/informer-sync", "/livez"} {
		testenv.Eventually(t, 20*time.Second, path+" answering 200 without credentials", func() (bool, error) {
			resp, err := hc.Get(base + path)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}
	for _, tc := range []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{newServiceAccount(t, testenv.Name("rbac-scraper"), []string{"/metrics"}), http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want && !(tc.want == http.StatusUnauthorized && resp.StatusCode == http.StatusForbidden) {
			t.Errorf("/metrics (token given: %v) answered %d, want %d", tc.token != "", resp.StatusCode, tc.want)
		}
	}
	o.Stop()
}

// repeated says whether an Event about one of the objects named was
// recorded more than once (and so patched).
func repeated(t *testing.T, names ...string) bool {
	t.Helper()
	for _, n := range names {
		for _, evs := range testenv.Events(t, n) {
			for _, e := range evs {
				if e.Count > 1 {
					return true
				}
			}
		}
	}
	return false
}

//go:build integration

package gateway_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestDataPlaneDeployment: with an image configured, each Gateway's data
// plane is a Deployment in the data plane namespace (made by Outrigger)
// whose pods pass Pod Security "restricted" as the API server's own
// admission enforces it; the Gateway is not Programmed before the pods are
// available; an HTTPS listener's certificate reaches the programming.
func TestDataPlaneDeployment(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller",
		"--gateway-namespace="+dpNS, "--gateway-data-plane-image=registry.example/outrigger:test")
	ns := namespace(t, c)
	certPEM, keyPEM := testcert.SelfSigned(t, "secure.example.com")
	create(t, c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	})
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: ptr.To(gwv1.Hostname("secure.example.com")),
					TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}},
			},
		},
	}
	create(t, c, gw)
	key := types.NamespacedName{Namespace: dpNS, Name: gateway.DataPlaneName(ns, "gw")}
	var dep appsv1.Deployment
	testenv.Eventually(t, time.Minute, "data plane Deployment made, Gateway waiting for it", func() (bool, error) {
		if err := c.Get(ctx, key, &dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		var got gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
			return false, err
		}
		p := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == string(gwv1.GatewayReasonPending) && len(got.Status.Addresses) == 1, nil
	})
	if args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); args != "gateway-dataplane --namespace="+dpNS+" --secret="+key.Name {
		t.Errorf("data plane args %q", args)
	}

	// The API server's Pod Security admission, enforcing "restricted",
	// admits the pods (a dry run creates nothing).
	enforced := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("restricted"),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	create(t, c, enforced)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: enforced.Name, Name: "dataplane"}, Spec: dep.Spec.Template.Spec}
	if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Errorf("Pod Security restricted refuses the data plane pod: %v", err)
	}

	var secret corev1.Secret
	if err := c.Get(ctx, key, &secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := dataplane.Unmarshal(secret.Data[gateway.ConfigKey])
	if err != nil {
		t.Fatal(err)
	}
	var https *dataplane.Port
	for i := range cfg.Ports {
		if cfg.Ports[i].Protocol == dataplane.HTTPS {
			https = &cfg.Ports[i]
		}
	}
	if https == nil || len(https.Certificates) != 1 || https.Certificates[0].Hostname != "secure.example.com" || string(https.Certificates[0].CertPEM) != string(certPEM) {
		t.Fatalf("HTTPS programming %+v, want the Secret's certificate for secure.example.com", https)
	}

	// The pods run as the Gateway's own ServiceAccount, which reads its
	// programming through the data plane's own watch and no other Secret
	// of the namespace (another Gateway's keys).
	// Two pods spread over nodes, replaced without lowering the count, a
	// budget keeping one through drains.
	if r := dep.Spec.Replicas; r == nil || *r != 2 || len(dep.Spec.Template.Spec.TopologySpreadConstraints) != 1 ||
		dep.Spec.Strategy.RollingUpdate == nil || dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("data plane Deployment replicas %v, spread %v, strategy %+v", r, dep.Spec.Template.Spec.TopologySpreadConstraints, dep.Spec.Strategy)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := c.Get(ctx, key, &pdb); err != nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("data plane disruption budget %+v: %v", pdb.Spec, err)
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != key.Name {
		t.Fatalf("data plane pods run as %q, want the Gateway's own %q", sa, key.Name)
	}
	create(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dpNS, Name: "another-gateways-keys"}})
	asPods := rest.CopyConfig(testenv.Config)
	asPods.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + dpNS + ":" + key.Name}
	pods, err := kubernetes.NewForConfig(asPods)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.CoreV1().Secrets(dpNS).Get(ctx, "another-gateways-keys", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the data plane's identity reads another Secret: %v", err)
	}
	if _, err := pods.CoreV1().Secrets(dpNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the data plane's identity lists the namespace's Secrets: %v", err)
	}
	var l net.ListenConfig
	proxy := dataplane.New(dataplane.Options{ListenTCP: func(int32) (net.Listener, error) { return l.Listen(ctx, "tcp", "127.0.0.1:0") }})
	defer proxy.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	applied := make(chan error, 1)
	go dataplane.Watch(watchCtx, pods, dpNS, key.Name, proxy, func(err error) {
		select {
		case applied <- err:
		default:
		}
	})
	select {
	case err := <-applied:
		if err != nil {
			t.Errorf("the data plane could not apply its programming as its own identity: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("the data plane never read its programming as its own identity")
	}
	stopWatch()

	// Deleted, the Gateway takes its Deployment and identity along.
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "data plane Deployment and identity deleted", func() (bool, error) {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &policyv1.PodDisruptionBudget{}} {
			if err := c.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
}

// TestForeignObjectsUntouched: an object already at the data plane's name
// that Outrigger did not make for this Gateway is never changed or
// deleted; the Gateway says why it is not programmed.
func TestForeignObjectsUntouched(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dpNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	squatter := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dpNS, Name: gateway.DataPlaneName(ns, "gw"),
		Labels: map[string]string{"app.kubernetes.io/managed-by": "outrigger", gateway.GatewayUIDLabel: "someone-else"}},
		Data: map[string][]byte{"config.json": []byte("theirs")}}
	create(t, c, squatter)
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}},
	}
	create(t, c, gw)
	testenv.Eventually(t, time.Minute, "the Gateway's Warning Event naming the Secret", func() (bool, error) {
		evs, err := testenv.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "gw" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "not Outrigger's") {
				return true, nil
			}
		}
		return false, nil
	})
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "Gateway gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gwv1.Gateway{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	var got corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(squatter), &got); err != nil || string(got.Data["config.json"]) != "theirs" {
		t.Errorf("another's Secret changed or deleted: %v %q", err, got.Data["config.json"])
	}
	if len(cloud.LoadBalancers()) != 0 {
		t.Errorf("load balancers left: %+v", cloud.LoadBalancers())
	}
}

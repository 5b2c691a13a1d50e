//go:build integration

package manager_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/apiproxy"
)

// holdLease takes the lease as another controller manager would, until the
// returned func releases it.
func holdLease(t *testing.T, name, identity string) (release func()) {
	t.Helper()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "kube-system", name,
		testenv.Client.CoreV1(), testenv.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(held) },
				OnStoppedLeading: func() {},
			},
		})
	}()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the test could not take the migration lease")
	}
	release = func() { cancel(); <-done }
	t.Cleanup(release)
	return release
}

func leaseHolder(t *testing.T, name string) string {
	l, err := testenv.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestLeaderMigration: another controller manager holds the migration lease
// and runs the service controller; Outrigger runs its other controllers
// under its main lease, and starts the service controller only once the
// other lets the migration lease go, so the two never both run it.
func TestLeaderMigration(t *testing.T) {
	cloud := testenv.StartCloud(t)
	migrationLease := testenv.Name("extraction-migration")
	config := filepath.Join(t.TempDir(), "migration.yaml")
	if err := os.WriteFile(config, []byte(`kind: LeaderMigrationConfiguration
apiVersion: controllermanager.config.k8s.io/v1
leaderName: `+migrationLease+`
resourceLock: leases
controllerLeaders:
  - name: service
    component: "*"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	release := holdLease(t, migrationLease, "kube-controller-manager-1")

	mainLease := testenv.Name("ccm-main")
	// Through a proxy, to count this Outrigger's own reads of the lease.
	proxy := apiproxy.Start(t, nil)
	testenv.StartOutrigger(t, cloud, "--kubeconfig="+proxy.Kubeconfig, "--leader-elect=true", "--leader-elect-resource-name="+mainLease,
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=200ms",
		"--enable-leader-migration", "--leader-migration-config="+config,
		"--controllers=cloud-node-controller,service-lb-controller")

	// The main lease's controller runs.
	name := testenv.Name("lm")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.18.9.1"})
	})
	testenv.Eventually(t, 30*time.Second, "node initialized under the main lease", func() (bool, error) {
		return testenv.GetNode(t, name).Spec.ProviderID != "", nil
	})

	// The migrated one does not, while the other manager holds the lease.
	ns := "default"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("lm-svc"), Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
	}
	ctx := context.Background()
	if _, err := testenv.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	// Outrigger reads the migration lease at each try for it: three tries
	// since the Service exists. A try that took the lease shows in its
	// holder (checked below); a service controller that did not wait for
	// the lease has been running since the node controller started, and
	// would have put its finalizer on the Service by the third.
	tries := testenv.Count(func() int { return proxy.Requests(http.MethodGet, apiproxy.LeasePath(migrationLease)) })
	testenv.Consistently(t, 30*time.Second, "the service controller not running while another manager holds the migration lease", tries, 3, func() error {
		got, err := testenv.Client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Finalizers) != 0 || len(cloud.LoadBalancers()) != 0 {
			return fmt.Errorf("finalizers %v, %d load balancers", got.Finalizers, len(cloud.LoadBalancers()))
		}
		return nil
	})
	if h := leaseHolder(t, migrationLease); h != "kube-controller-manager-1" {
		t.Fatalf("migration lease holder = %q", h)
	}

	// The other manager lets go: Outrigger takes the lease and provisions.
	release()
	testenv.Eventually(t, 30*time.Second, "load balancer provisioned after the hand-over", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 1 && slices.Contains(s.Finalizers, "service.kubernetes.io/load-balancer-cleanup"), err
	})
	if h := leaseHolder(t, migrationLease); h == "" || h == "kube-controller-manager-1" {
		t.Errorf("migration lease holder after hand-over = %q, want Outrigger", h)
	}
	// Delete while Outrigger still runs, so the finalizer is honoured.
	if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "service deleted", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		return err != nil, nil
	})
}

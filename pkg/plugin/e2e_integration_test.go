//go:build integration

package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// The API server is only needed by this file's tests (the build tag).
func TestMain(m *testing.M) { testenv.Main(m) }

// Outrigger with the grpc provider, the sim provider behind a unix socket:
// nodes are initialized and load balancers provisioned; the plugin is
// killed and restarted mid-work and nothing is lost; a slow plugin hits the
// call deadline and Outrigger recovers when it speeds up.
func TestOutriggerThroughAPlugin(t *testing.T) {
	c := testenv.StartCloud(t)
	endpoint, _ := socket(t)
	stop := serve(t, endpoint, simProvider(t, c))
	cfg := filepath.Join(t.TempDir(), "grpc.yaml")
	if err := os.WriteFile(cfg, []byte("endpoint: "+endpoint+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.StartOutrigger(t, c, "--cloud-provider=grpc", "--cloud-config="+cfg, "--cloud-call-timeout=1s",
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller")

	join := func() string {
		name := testenv.Name("plug")
		if _, err := c.Create(simcloud.CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		testenv.CreateNode(t, name, nil)
		return name
	}
	initialized := func(name string) func() (bool, error) {
		return func() (bool, error) { return testenv.GetNode(t, name).Spec.ProviderID != "", nil }
	}
	first := join()
	testenv.Eventually(t, 30*time.Second, "node initialized through the plugin", initialized(first))
	if got := testenv.GetNode(t, first).Labels[corev1.LabelTopologyZone]; got == "" {
		t.Error("no zone label: metadata did not cross the boundary")
	}

	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("plug-lb"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := testenv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "load balancer provisioned through the plugin", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 1 && len(c.LoadBalancers()) == 1, err
	})

	// The plugin dies; a node joins meanwhile; the plugin comes back on the
	// same socket and the node is initialized.
	stop()
	second := join()
	testenv.Consistently(t, 30*time.Second, "a node not initialized with the plugin down", failedTries(t, second), 2, uninitialized(t, second))
	serve(t, endpoint, simProvider(t, c))
	testenv.Eventually(t, 60*time.Second, "node joined while the plugin was down initialized after it restarted", initialized(second))

	// A slow plugin: calls hit the 1s deadline, nothing wedges, and work
	// resumes when it is fast again.
	c.SetSettings(simcloud.Settings{Latency: simcloud.Duration{Duration: 3 * time.Second}})
	third := join()
	testenv.Consistently(t, 30*time.Second, "a node not initialized while every call outlives its deadline", failedTries(t, third), 2, uninitialized(t, third))
	c.SetSettings(simcloud.Settings{})
	testenv.Eventually(t, 60*time.Second, "node initialized once the plugin is fast again", initialized(third))

	if err := testenv.Client.CoreV1().Services("default").Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "load balancer deleted through the plugin", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
		if len(c.LoadBalancers()) == 0 {
			return true, nil
		}
		// Said on failure: where the deletion stands.
		if err != nil {
			return false, fmt.Errorf("service: %v; cloud: %+v; calls %v", err, c.LoadBalancers(), c.Calls().ByOp)
		}
		return false, fmt.Errorf("service finalizers %v, deletionTimestamp %v, conditions %+v; cloud: %+v; calls %v", s.Finalizers, s.DeletionTimestamp, s.Status.Conditions, c.LoadBalancers(), c.Calls().ByOp)
	})
}

// failedTries counts the node controller's failed tries to initialize a
// node: each records a SyncFailed Event (a repeat adds to its count).
func failedTries(t *testing.T, name string) func() float64 {
	return func() float64 {
		var n float64
		for _, e := range testenv.Events(t, name)[node.ReasonSyncFailed] {
			n += float64(max(e.Count, 1))
		}
		return n
	}
}

func uninitialized(t *testing.T, name string) func() error {
	return func() error {
		if id := testenv.GetNode(t, name).Spec.ProviderID; id != "" {
			return fmt.Errorf("node %s initialized, providerID %s", name, id)
		}
		return nil
	}
}

// Readiness follows the plugin: Ready fails while it is down.
func TestReadyFollowsThePlugin(t *testing.T) {
	c := testenv.StartCloud(t)
	endpoint, _ := socket(t)
	stop := serve(t, endpoint, simProvider(t, c))
	p := dial(t, endpoint).(interface{ Ready(context.Context) error })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready with the plugin up: %v", err)
	}
	stop()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := p.Ready(ctx2); err == nil {
		t.Fatal("Ready with the plugin down")
	}
}

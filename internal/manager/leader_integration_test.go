//go:build integration

package manager_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestGracefulHandOver runs two replicas on one sim cloud with upstream's
// leader election timings (15s lease, 2s retry), and with a 1s retry. The leader is stopped as
// SIGTERM stops it (its context ends) in the middle of provisioning load
// balancers. It must release the Lease, so the standby takes over at its
// next retry instead of after the 15s lease expires, and the cloud's call
// log, where each call carries the replica that made it, must show the
// standby never called the cloud before the hand-over and no call of the new
// leader overlapping one of the old leader's.
func TestGracefulHandOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{name: "upstream timings"},
		// The standby retries every 1 to 2.2s instead of 2 to 4.4s.
		{name: "1s retry period", flags: []string{"--leader-elect-retry-period=1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) { gracefulHandOver(t, tc.flags...) })
	}
}

func gracefulHandOver(t *testing.T, extraFlags ...string) {
	cloud := testenv.StartCloud(t)
	// Every call takes a while, so the leader has calls in flight when it
	// is told to stop.
	cloud.SetSettings(simcloud.Settings{Latency: simcloud.Duration{Duration: 50 * time.Millisecond}})
	ctx := context.Background()
	lease := testenv.Name("outrigger-le")
	flags := append([]string{"--leader-elect=true", "--leader-elect-resource-name=" + lease}, extraFlags...)

	old := testenv.StartOutrigger(t, cloud, flags...)
	var oldID string
	testenv.Eventually(t, 30*time.Second, "the first replica to lead", func() (bool, error) {
		oldID = holder(t, lease)
		return oldID != "", nil
	})
	standby := testenv.StartOutrigger(t, cloud, flags...)

	node := testenv.Name("ho")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: node}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, node, nil)
	services := make([]string, 0, 16)
	addServices := func(n int) {
		for range n {
			name := testenv.Name("ho-svc")
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
			}
			if _, err := testenv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			services = append(services, name)
		}
	}
	provisioned := func() int {
		n := 0
		for _, name := range services {
			s, err := testenv.Client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && len(s.Status.LoadBalancer.Ingress) > 0 {
				n++
			}
		}
		return n
	}
	addServices(12)
	testenv.Eventually(t, 30*time.Second, "the leader to be provisioning", func() (bool, error) {
		return provisioned() > 0, nil
	})

	// Watch the Lease from here on: releasing it shows as a write with no
	// holder between the old holder's and the new one's.
	l, err := testenv.Client.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := testenv.Client.CoordinationV1().Leases("kube-system").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", lease).String(), ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	stopAt := time.Now()
	stopped := make(chan struct{})
	go func() { old.Stop(); close(stopped) }()
	var (
		holders []string
		newID   string
	)
	timeout := time.After(60 * time.Second)
	for newID == "" {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("lease watch closed")
			}
			if ev.Type != watch.Modified {
				continue
			}
			h := ""
			if id := ev.Object.(*coordinationv1.Lease).Spec.HolderIdentity; id != nil {
				h = *id
			}
			holders = append(holders, h)
			if h != "" && h != oldID {
				newID = h
			}
		case <-timeout:
			t.Fatalf("no replica took over; lease holders seen: %q", holders)
		}
	}
	handOver := time.Since(stopAt)
	if len(holders) < 2 || holders[len(holders)-2] != "" {
		t.Errorf("the old leader did not release the lease: holders seen %q (a release writes an empty holder)", holders)
	}
	t.Logf("hand-over: the new leader held the lease %s after the old one was told to stop", handOver.Round(time.Millisecond))
	<-stopped

	addServices(4)
	testenv.Eventually(t, 60*time.Second, "every load balancer provisioned, the last ones by the new leader", func() (bool, error) {
		return provisioned() == len(services), nil
	})
	summary, problems := oneWriterAtATime(cloud.CallLog(), old.Caller, standby.Caller, stopAt)
	for _, p := range problems {
		t.Error(p)
	}
	t.Log("call log: " + summary)

	for _, name := range services {
		if err := testenv.Client.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "services and their load balancers deleted", func() (bool, error) {
		return len(cloud.LoadBalancers()) == 0, nil
	})
}

// holder is the Lease's holder, "" when it has none or does not exist.
func holder(t *testing.T, name string) string {
	t.Helper()
	l, err := testenv.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

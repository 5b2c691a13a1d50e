//go:build integration

package service_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// fakeLB is a provider double whose answers are chosen per Service name.
type fakeLB struct {
	mu sync.Mutex
	// ensure answers EnsureLoadBalancer; nil means a status with one
	// ingress IP.
	ensure    map[string]func() (*corev1.LoadBalancerStatus, error)
	update    map[string]error
	deleteErr error
	calls     map[string]int // "Method name"
}

func newFakeLB() *fakeLB {
	return &fakeLB{ensure: map[string]func() (*corev1.LoadBalancerStatus, error){}, update: map[string]error{}, calls: map[string]int{}}
}

func (f *fakeLB) count(method string, svc *corev1.Service) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method+" "+svc.Name]++
}

func (f *fakeLB) Calls(method, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method+" "+name]
}

func (f *fakeLB) GetLoadBalancer(_ context.Context, _ string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	f.count("GetLoadBalancer", svc)
	return nil, true, nil
}

func (f *fakeLB) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

func (f *fakeLB) EnsureLoadBalancer(_ context.Context, _ string, svc *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	f.count("EnsureLoadBalancer", svc)
	f.mu.Lock()
	fn := f.ensure[svc.Name]
	f.mu.Unlock()
	if fn == nil {
		return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.7.1"}}}, nil
	}
	return fn()
}

func (f *fakeLB) UpdateLoadBalancer(_ context.Context, _ string, svc *corev1.Service, _ []*corev1.Node) error {
	f.count("UpdateLoadBalancer", svc)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.update[svc.Name]
}

func (f *fakeLB) EnsureLoadBalancerDeleted(_ context.Context, _ string, svc *corev1.Service) error {
	f.count("EnsureLoadBalancerDeleted", svc)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deleteErr
}

// startController runs the controller alone in this process with lb as the
// provider, watching only Services of namespace ns, until the test ends.
// Call it before createNamespace, so that the namespace's Services are
// deleted while it still runs.
func startController(t *testing.T, lb cloudprovider.LoadBalancer, ns string) {
	t.Helper()
	testenv.RunController(t, func(mgr manager.Manager) error {
		return service.Setup(mgr, service.Options{LoadBalancer: lb, ClusterName: "test", NodeSyncWindow: 100 * time.Millisecond})
	}, func(o *manager.Options) {
		o.Cache = cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Service{}: {Namespaces: map[string]cache.Config{ns: {}}}}}
	})
}

// retryClock creates, in ns, a Service whose EnsureLoadBalancer always
// fails, and returns the count of its attempts. The controller retries a
// failure with its per-Service backoff (1s, 2s, 4s...): n attempts of this
// Service prove the controller has been retrying failures, with that
// backoff, for as long, so a failure of another Service made before this
// one's first attempt would have been retried by then. It is deleted when
// the test ends (the namespace's cleanup).
// provisionAll creates n Services ok-0.. and waits until each has an
// ingress.
func provisionAll(t *testing.T, ns string, n int, within time.Duration, what string) {
	t.Helper()
	for i := range n {
		create(t, lbService(ns, fmt.Sprintf("ok-%d", i), 80))
	}
	testenv.Eventually(t, within, what, func() (bool, error) {
		for i := range n {
			if len(get(t, ns, fmt.Sprintf("ok-%d", i)).Status.LoadBalancer.Ingress) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

func retryClock(t *testing.T, lb *fakeLB, ns string) func() float64 {
	t.Helper()
	const name = "retry-clock"
	lb.mu.Lock()
	lb.ensure[name] = func() (*corev1.LoadBalancerStatus, error) { return nil, errors.New("the retry clock always fails") }
	lb.mu.Unlock()
	create(t, lbService(ns, name, 80))
	return testenv.Count(func() int { return lb.Calls("EnsureLoadBalancer", name) })
}

// A provider whose load balancers another component makes answers
// ImplementedElsewhere: as upstream, that is no failure (no Event, no
// condition, no retry), the status stays the other component's, and a
// deleted Service does not stay Terminating.
func TestImplementedElsewhere(t *testing.T) {
	lb := newFakeLB()
	lb.ensure["ext"] = func() (*corev1.LoadBalancerStatus, error) { return nil, cloudprovider.ImplementedElsewhere }
	lb.update["ext"] = cloudprovider.ImplementedElsewhere
	lb.deleteErr = cloudprovider.ImplementedElsewhere
	ns := testenv.Name("lb")
	startController(t, lb, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.1", nil)

	create(t, lbService(ns, "ext", 80))
	testenv.Eventually(t, 20*time.Second, "EnsureLoadBalancer called", func() (bool, error) {
		return lb.Calls("EnsureLoadBalancer", "ext") > 0, nil
	})
	// The other component writes the status (the controller may still be
	// writing the Service: retry on a conflict, as that component would).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := get(t, ns, "ext")
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.9.9", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}}
		_, err := testenv.Client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A failure is retried with the controller's backoff: a Service that
	// really fails, created after ext's EnsureLoadBalancer, tried three
	// times (its first try and retries after 1s and 2s) shows that ext,
	// had its answer been taken for a failure, would have been retried.
	testenv.Consistently(t, 30*time.Second, "one EnsureLoadBalancer, no failure recorded, the other component's status kept",
		retryClock(t, lb, ns), 3, func() error {
			s := get(t, ns, "ext")
			ev := testenv.Events(t, "ext")
			if n := lb.Calls("EnsureLoadBalancer", "ext"); n != 1 {
				return fmt.Errorf("EnsureLoadBalancer called %d times", n)
			}
			if len(ev[service.EventSyncFailed]) != 0 {
				return fmt.Errorf("events %v", reasons(ev))
			}
			if c := meta.FindStatusCondition(s.Status.Conditions, service.ConditionLoadBalancerReady); c != nil {
				return fmt.Errorf("condition %+v", *c)
			}
			if ing := s.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "198.18.9.9" {
				return fmt.Errorf("status %+v", s.Status.LoadBalancer)
			}
			return nil
		})
	// As upstream, the finalizer is there all the same.
	if s := get(t, ns, "ext"); !slices.Contains(s.Finalizers, service.Finalizer) {
		t.Errorf("finalizers = %v", s.Finalizers)
	}
	// A node joining reaches UpdateLoadBalancer, which is no failure either.
	node(t, "198.18.8.2", nil)
	testenv.Eventually(t, 20*time.Second, "UpdateLoadBalancer called", func() (bool, error) {
		return lb.Calls("UpdateLoadBalancer", "ext") > 0, nil
	})

	deleteAndWait(t, ns, "ext")
	if lb.Calls("EnsureLoadBalancerDeleted", "ext") == 0 {
		t.Error("EnsureLoadBalancerDeleted not called")
	}
	// Events are sent asynchronously: wait for the last one.
	testenv.Eventually(t, 10*time.Second, "DeletedLoadBalancer recorded", func() (bool, error) {
		return len(testenv.Events(t, "ext")[service.EventDeleted]) > 0, nil
	})
	if ev := testenv.Events(t, "ext"); len(ev[service.EventSyncFailed])+len(ev[service.EventUpdateFailed]) != 0 {
		t.Errorf("events: %v", reasons(ev))
	}
}

// EnsureLoadBalancer answering (nil, nil): as upstream, a failed sync that
// leaves the Service's status alone.
func TestEnsureReturnsNilStatus(t *testing.T) {
	lb := newFakeLB()
	lb.ensure["nil"] = func() (*corev1.LoadBalancerStatus, error) { return nil, nil }
	ns := testenv.Name("lb")
	startController(t, lb, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.3", nil)

	create(t, lbService(ns, "nil", 80))
	testenv.Eventually(t, 20*time.Second, "SyncLoadBalancerFailed", func() (bool, error) {
		return len(testenv.Events(t, "nil")[service.EventSyncFailed]) > 0, nil
	})
	// A status from before (another CCM, or an earlier sync) is kept.
	s := get(t, ns, "nil")
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.9.10"}}
	if _, err := testenv.Client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := lb.Calls("EnsureLoadBalancer", "nil")
	testenv.Eventually(t, 20*time.Second, "retried", func() (bool, error) {
		return lb.Calls("EnsureLoadBalancer", "nil") > calls, nil
	})
	if ing := get(t, ns, "nil").Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "198.18.9.10" {
		t.Errorf("ingress = %v, want the earlier one kept", ing)
	}
	if ev := testenv.Events(t, "nil"); len(ev[service.EventEnsured]) != 0 {
		t.Errorf("events: %v", reasons(ev))
	}
}

// A failed backend update: upstream's Event and nodesync_error_total.
func TestUpdateLoadBalancerFails(t *testing.T) {
	lb := newFakeLB()
	lb.update["upd"] = errors.New("backend service unavailable")
	ns := testenv.Name("lb")
	startController(t, lb, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.4", nil)
	create(t, lbService(ns, "upd", 80))
	testenv.Eventually(t, 20*time.Second, "provisioned", func() (bool, error) {
		return len(get(t, ns, "upd").Status.LoadBalancer.Ingress) == 1, nil
	})
	errs := metricstest.Value(t, "service_controller_nodesync_error_total", nil)
	syncs := metricstest.Value(t, "service_controller_loadbalancer_sync_total", nil)
	node(t, "198.18.8.5", nil)
	testenv.Eventually(t, 20*time.Second, "UpdateLoadBalancerFailed", func() (bool, error) {
		return len(testenv.Events(t, "upd")[service.EventUpdateFailed]) > 0, nil
	})
	if got := metricstest.Value(t, "service_controller_nodesync_error_total", nil); got <= errs {
		t.Errorf("nodesync_error_total = %v, was %v", got, errs)
	}
	if got := metricstest.Value(t, "service_controller_loadbalancer_sync_total", nil); got <= syncs {
		t.Errorf("loadbalancer_sync_total = %v, was %v", got, syncs)
	}
}

func reasons(ev map[string][]corev1.Event) map[string]int {
	out := map[string]int{}
	for r, e := range ev {
		out[r] = len(e)
	}
	return out
}

// The metrics carry upstream's names, no labels, and upstream's buckets
// (1s doubling to 16384s).
func TestMetricsRegistered(t *testing.T) {
	want := []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	for _, name := range []string{"service_controller_loadbalancer_sync_total", "service_controller_nodesync_error_total"} {
		if mf := metricstest.Family(t, name); mf.GetType() != dto.MetricType_COUNTER || len(mf.GetMetric()[0].GetLabel()) != 0 {
			t.Errorf("%s: %v", name, mf)
		}
	}
	for _, name := range []string{"service_controller_nodesync_latency_seconds", "service_controller_update_loadbalancer_host_latency_seconds"} {
		mf := metricstest.Family(t, name)
		var got []float64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			got = append(got, b.GetUpperBound())
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM || !slices.Equal(got, want) || len(mf.GetMetric()[0].GetLabel()) != 0 {
			t.Errorf("%s: type %v, buckets %v, want %v", name, mf.GetType(), got, want)
		}
	}
}

// lbCloud is a provider with only a load balancer, for the call layer.
type lbCloud struct {
	fakecloud.Cloud
	lb cloudprovider.LoadBalancer
}

func (c *lbCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lb, true }

// A provider hung on some Services (ignoring its context, as one stuck on a
// dead socket does) costs only those Services: more of them than the call
// layer's load balancer family lets run at once do not keep any other
// Service from its load balancer.
func TestHungServicesCostOnlyThemselves(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // before the namespace's Services are deleted
	lb := newFakeLB()
	const hung = cloud.DegradedAbandoned + 4 // more than the family runs at once, and degraded
	for i := range hung {
		lb.ensure[fmt.Sprintf("hang-%d", i)] = func() (*corev1.LoadBalancerStatus, error) {
			<-release
			return nil, errors.New("released")
		}
	}
	layer := cloud.New(&lbCloud{lb: lb}, cloud.Options{Timeout: 200 * time.Millisecond})
	viaLayer, _ := layer.LoadBalancer()
	ns := testenv.Name("lb")
	startController(t, viaLayer, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.3", nil)

	for i := range hung {
		create(t, lbService(ns, fmt.Sprintf("hang-%d", i), 80))
	}
	testenv.Eventually(t, 20*time.Second, "every hung Service's call abandoned", func() (bool, error) {
		return layer.Degraded()[cloud.FamilyLoadBalancers] >= hung, nil
	})
	provisionAll(t, ns, 10, 30*time.Second, "every other Service provisioned behind the hung ones")
}

// 300 Services hung in the provider, more than the load balancer family
// runs at once and than the controller's workers, created first, with a
// call timeout of an hour: the others are provisioned all the same, by the
// hung calls giving their places back and their workers going on as
// stragglers, not by any timeout (no call is abandoned).
func TestHungServicesDoNotWaitForTimeouts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	lb := newFakeLB()
	// More than the controller's 256 workers: each worker goes on once
	// its call straggles.
	const hung = 300
	for i := range hung {
		lb.ensure[fmt.Sprintf("hang-%d", i)] = func() (*corev1.LoadBalancerStatus, error) {
			<-release
			return nil, errors.New("released")
		}
	}
	layer := cloud.New(&lbCloud{lb: lb}, cloud.Options{Timeout: time.Hour})
	viaLayer, _ := layer.LoadBalancer()
	ns := testenv.Name("lb")
	startController(t, viaLayer, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.4", nil)
	for i := range hung {
		create(t, lbService(ns, fmt.Sprintf("hang-%d", i), 80))
	}
	testenv.Eventually(t, 60*time.Second, "every hung Service's call sent", func() (bool, error) {
		for i := range hung {
			if lb.Calls("EnsureLoadBalancer", fmt.Sprintf("hang-%d", i)) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	provisionAll(t, ns, 10, 60*time.Second, "every other Service provisioned behind 300 hung ones")
	if got := layer.Degraded()[cloud.FamilyLoadBalancers]; got != 0 {
		t.Errorf("%d calls abandoned at an hour's timeout", got)
	}
}

// A Service whose cloud call its worker stopped waiting for is not failing
// meanwhile: when the call returns a failure, the Service is retried as
// after a first failure (the controller's base backoff), as upstream's
// worker, which waits on the call, retries it; not after a backoff grown
// with every look at the call still running.
func TestDetachedCallFailureRetriedAsAFirstFailure(t *testing.T) {
	release := make(chan struct{})
	lb := newFakeLB()
	var slowCalls atomic.Int32
	lb.ensure["slow"] = func() (*corev1.LoadBalancerStatus, error) {
		if slowCalls.Add(1) == 1 {
			<-release
			return nil, errors.New("released")
		}
		return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.8.9"}}}, nil
	}
	layer := cloud.New(&lbCloud{lb: lb}, cloud.Options{Timeout: time.Hour})
	viaLayer, _ := layer.LoadBalancer()
	ns := testenv.Name("lb")
	startController(t, viaLayer, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.5", nil)
	// Answered calls first: a call straggles past its family's answers.
	provisionAll(t, ns, 5, 30*time.Second, "the answered Services provisioned")
	clock := retryClock(t, lb, ns)
	create(t, lbService(ns, "slow", 80))
	testenv.Eventually(t, 30*time.Second, "the slow Service's call left running", func() (bool, error) {
		c := meta.FindStatusCondition(get(t, ns, "slow").Status.Conditions, service.ConditionLoadBalancerReady)
		return c != nil && c.Reason == cloud.ReasonCallInFlight, nil
	})
	// While the retry clock fails three more times (1s, 2s, 4s... apart),
	// a Service looked at on every failure would have grown its backoff as
	// much. The call returns just after one of the clock's attempts: its
	// next is at least 8 s away, a first failure's retry 1 s.
	from := clock()
	testenv.Eventually(t, 60*time.Second, "three more attempts of the retry clock", func() (bool, error) { return clock() >= from+3, nil })
	at := clock()
	close(release)
	testenv.Eventually(t, 60*time.Second, "the slow Service provisioned after its call failed", func() (bool, error) {
		return len(get(t, ns, "slow").Status.LoadBalancer.Ingress) > 0, nil
	})
	if got := clock(); got > at {
		t.Errorf("the slow Service was provisioned after %v more attempts of the retry clock; a first failure's retry comes before its next", got-at)
	}
	if n := slowCalls.Load(); n != 2 {
		t.Errorf("the slow Service's EnsureLoadBalancer was called %d times, want 2 (the failed call, then the retry)", n)
	}
}

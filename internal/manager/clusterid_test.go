package manager

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// identityAPI is a fake API server whose kube-system reads answer with the
// errors in answers, in turn, then with the last one (nil: the namespace)
// for good; reads counts them.
type identityAPI struct {
	mu      sync.Mutex
	answers []error
	reads   atomic.Int64
	client  *fake.Clientset
}

func newIdentityAPI(uid string, annotations map[string]string, answers ...error) *identityAPI {
	a := &identityAPI{answers: answers}
	a.client = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(uid), Annotations: annotations}})
	a.client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		a.reads.Add(1)
		a.mu.Lock()
		defer a.mu.Unlock()
		err := a.answers[0]
		if len(a.answers) > 1 {
			a.answers = a.answers[1:]
		}
		return err != nil, nil, err
	})
	return a
}

// setAnswer makes every read from now on answer err (nil: the namespace).
func (a *identityAPI) setAnswer(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers = []error{err}
}

var (
	forbidden    = apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "kube-system", errors.New("RBAC: not yet synced"))
	unauthorized = apierrors.NewUnauthorized("authentication webhook unavailable")
	unavailable  = apierrors.NewServiceUnavailable("the API server is restarting")
)

func startIdentity(t *testing.T, api *identityAPI, refusalLimit time.Duration) (*clusterIdentity, *record.FakeRecorder) {
	t.Helper()
	rec := record.NewFakeRecorder(10)
	c := newClusterIdentity(api.client, refusalLimit, rec, &corev1.ObjectReference{Kind: "Lease", Namespace: "kube-system", Name: "ccm"})
	c.backoff, c.maxBackoff = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c, rec
}

func waitSettled(t *testing.T, c *clusterIdentity) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.wait(ctx); err != nil {
		t.Fatalf("identity never settled: %v", err)
	}
}

// A refusal or an outage shorter than the lease duration is waited out:
// the identity is read, never given up, and no Event says otherwise.
func TestClusterIdentityShortRefusalsAndOutagesAreRetried(t *testing.T) {
	for name, answers := range map[string][]error{
		"forbidden":    {forbidden, forbidden, forbidden, nil},
		"unauthorized": {unauthorized, unauthorized, nil},
		"unavailable":  {unavailable, unavailable, unavailable, nil},
		"mixed":        {forbidden, unavailable, unauthorized, errors.New("connection refused"), nil},
		"first read":   {nil},
	} {
		t.Run(name, func(t *testing.T) {
			api := newIdentityAPI("0f6e3c7a-0000-4000-8000-000000000001", nil, answers...)
			c, rec := startIdentity(t, api, time.Hour)
			waitSettled(t, c)
			if got := c.get(); got != "0f6e3c7a-0000-4000-8000-000000000001" {
				t.Errorf("identity %q after %d reads, want the UID", got, api.reads.Load())
			}
			if n := api.reads.Load(); n != int64(len(answers)) {
				t.Errorf("%d reads, want %d", n, len(answers))
			}
			select {
			case e := <-rec.Events:
				t.Errorf("unexpected Event %q", e)
			default:
			}
		})
	}
}

// Errors other than a refusal never end in the no-identity mode, however
// long they last, and each starts the refusal count again: refusals
// interrupted by outages over far longer than the limit are waited out.
func TestClusterIdentityOutagesNeverGiveUp(t *testing.T) {
	var answers []error
	for range 40 {
		answers = append(answers, forbidden, unavailable)
	}
	api := newIdentityAPI("0f6e3c7a-0000-4000-8000-000000000002", nil, append(answers, nil)...)
	start := time.Now()
	c, rec := startIdentity(t, api, 20*time.Millisecond)
	waitSettled(t, c)
	if got := c.get(); got != "0f6e3c7a-0000-4000-8000-000000000002" || api.reads.Load() != 81 {
		t.Errorf("identity %q after %d reads, want the UID after 81", got, api.reads.Load())
	}
	// 80 failed reads at least 2.5ms apart (half the capped backoff) take
	// 200ms, ten times the limit: a count that was not started again
	// would have given up.
	if elapsed := time.Since(start); elapsed < 100*time.Millisecond {
		t.Fatalf("read in %s: the test proves nothing", elapsed)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("unexpected Event %q", e)
	default:
	}
}

// A refusal lasting past the lease duration starts the no-identity mode
// (an Event, the metric at 1, providers initialized without one); the
// identity is read as soon as the refusal ends, and every provider that
// started without it is given it, with an Event and the metric back at 0.
func TestClusterIdentityLastingRefusalThenPickedUp(t *testing.T) {
	api := newIdentityAPI("0f6e3c7a-0000-4000-8000-000000000003", nil, forbidden)
	c, rec := startIdentity(t, api, 20*time.Millisecond)
	waitSettled(t, c)
	if e := <-rec.Events; !strings.Contains(e, ReasonClusterIdentityUnavailable) || !strings.Contains(e, "Warning") {
		t.Errorf("Event %q, want a warning %s", e, ReasonClusterIdentityUnavailable)
	}
	if got := testutil.ToFloat64(clusterIdentityUnavailable.WithLabelValues("")); got != 1 {
		t.Errorf("outrigger_cluster_identity_unavailable %v, want 1", got)
	}
	if id := c.get(); id != "" {
		t.Errorf("identity %q while refused", id)
	}
	var given []string
	var mu sync.Mutex
	got := make(chan struct{}, 2)
	for range 2 {
		c.subscribe(func(id string) {
			mu.Lock()
			given = append(given, id)
			mu.Unlock()
			got <- struct{}{}
		})
	}
	// Still refused after settling: reading goes on.
	before := api.reads.Load()
	for api.reads.Load() < before+3 {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-got:
		t.Fatal("a provider was given an identity while refused")
	default:
	}
	api.setAnswer(nil)
	<-got
	<-got
	mu.Lock()
	if len(given) != 2 || given[0] != "0f6e3c7a-0000-4000-8000-000000000003" || given[1] != given[0] {
		t.Errorf("providers given %q, want the UID each", given)
	}
	mu.Unlock()
	if e := <-rec.Events; !strings.Contains(e, ReasonClusterIdentityRead) {
		t.Errorf("Event %q, want %s", e, ReasonClusterIdentityRead)
	}
	if got := testutil.ToFloat64(clusterIdentityUnavailable.WithLabelValues("")); got != 0 {
		t.Errorf("outrigger_cluster_identity_unavailable %v, want 0", got)
	}
	// A provider initialized later is given it at once.
	var late string
	c.subscribe(func(id string) { late = id })
	if late != given[0] {
		t.Errorf("late provider given %q", late)
	}
}

// A control plane marked as a restored copy has an identity of its own,
// the same over restarts, distinct per copy name, and a UUID as the UID.
func TestClusterIdentityOfARestoredCopy(t *testing.T) {
	const uid = "0f6e3c7a-0000-4000-8000-000000000004"
	for _, tc := range []struct {
		copyName string
		same     bool
	}{
		{"", true},
		{"dr-drill", false},
	} {
		api := newIdentityAPI(uid, map[string]string{AnnotationClusterCopy: tc.copyName}, nil)
		c, _ := startIdentity(t, api, time.Hour)
		waitSettled(t, c)
		id := c.get()
		if (id == uid) != tc.same {
			t.Errorf("copy %q: identity %q, original %q", tc.copyName, id, uid)
		}
		if id != ClusterIdentityFor(uid, tc.copyName) || len(id) != len(uid) {
			t.Errorf("copy %q: identity %q is not ClusterIdentityFor's %q", tc.copyName, id, ClusterIdentityFor(uid, tc.copyName))
		}
	}
	if a, b := ClusterIdentityFor(uid, "dr-drill"), ClusterIdentityFor(uid, "dr-drill-2"); a == b {
		t.Errorf("two copies share identity %q", a)
	}
	if a, b := ClusterIdentityFor(uid, "dr-drill"), ClusterIdentityFor("0f6e3c7a-0000-4000-8000-000000000005", "dr-drill"); a == b {
		t.Errorf("copies of two clusters share identity %q", a)
	}
}

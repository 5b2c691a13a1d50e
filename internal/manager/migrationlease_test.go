package manager

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// The migration lease is released only after the migrated controllers
// have returned: otherwise the next holder could start writing while this
// one still does. A fake clientset is enough here: what is checked is the
// order of our own calls, not the API server.
func TestMigrationLeaseReleasedAfterControllersStop(t *testing.T) {
	client := fake.NewClientset()
	var (
		running  atomic.Int32
		renewed  atomic.Int64
		started  = make(chan struct{}, 1)
		stopping = make(chan struct{}, 1)
		finish   = make(chan struct{})
		released = make(chan int32, 1)
	)
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			select {
			case released <- running.Load():
			default:
			}
		} else {
			renewed.Add(1)
		}
		return false, nil, nil
	})
	// A controller that, like a reconcile in flight, goes on after its
	// context ends, until the test lets it finish.
	slow := manager.RunnableFunc(func(ctx context.Context) error {
		running.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		stopping <- struct{}{}
		<-finish
		running.Add(-1)
		return nil
	})
	opts := NewOptions()
	opts.LeaderElectRetryPeriod = 100 * time.Millisecond
	m := &migrationLease{cfg: defaultMigrationConfig(), opts: opts, client: client, runnables: []manager.Runnable{slow}}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the migrated controller never started")
	}
	cancel()
	<-stopping
	// The lease is kept while the controller still runs: the elector
	// renews it twice more meanwhile (once a retry period), never
	// releasing it.
	poll.Consistently(t, 30*time.Second, "the migration lease kept while a migrated controller still runs", poll.Count(renewed.Load), 2, func() error {
		select {
		case n := <-released:
			return fmt.Errorf("released while %d migrated controller(s) still ran", n)
		default:
			return nil
		}
	})
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case n := <-released:
		if n != 0 {
			t.Errorf("the lease was released while %d migrated controller(s) still ran", n)
		}
	default:
		t.Error("the lease was not released on shutdown")
	}
}

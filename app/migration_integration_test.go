//go:build integration

package app_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// renewals counts the renewals of a lease seen at each call: each call
// reads it, and counts one when its renew time moved since the last read
// (reads further apart than renewals count fewer, never more).
func renewals(t *testing.T, leases coordinationclient.LeaseInterface, name string) func() float64 {
	var (
		last time.Time
		n    float64
	)
	return func() float64 {
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Logf("reading lease %s: %v", name, err)
			return n
		}
		if r := l.Spec.RenewTime; r != nil && !r.Time.Equal(last) {
			if !last.IsZero() {
				n++
			}
			last = r.Time
		}
		return n
	}
}

// TestLeaderMigrationProviderControllers: under --enable-leader-migration,
// a provider's own controller the migration configuration names (GCP's
// names its node IPAM) runs under the migration lease, as upstream's:
// not while another component holds it, and once it is let go.
func TestLeaderMigrationProviderControllers(t *testing.T) {
	ctx := context.Background()
	lease := testenv.Name("provider-migration")
	cfg := filepath.Join(t.TempDir(), "migration.yaml")
	if err := os.WriteFile(cfg, []byte(`kind: LeaderMigrationConfiguration
apiVersion: controllermanager.config.k8s.io/v1
leaderName: `+lease+`
controllerLeaders:
  - name: provider-ipam
    component: "*"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Another component holds the migration lease, renewed an hour ago
	// for an hour.
	leases := testenv.Client.CoordinationV1().Leases("kube-system")
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: "kube-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("kube-controller-manager-1"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var ipamStarted, watcherStarted atomic.Bool
	own := func(started *atomic.Bool) app.ControllerInitFuncConstructor {
		return extra(func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			started.Store(true)
			return nil, true, nil
		})
	}
	constructors := maps.Clone(app.DefaultInitFuncConstructors)
	constructors["provider-ipam"] = own(&ipamStarted)
	constructors["provider-watcher"] = own(&watcherStarted)

	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	cloudInit := func(*config.CompletedConfig) cloudprovider.Interface { return fakeCloud() }
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, constructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	mainLease := testenv.Name("app")
	ended := startCommand(t, cmd, stop, "--cloud-provider=gce", "--enable-leader-migration", "--leader-migration-config="+cfg,
		"--leader-elect-resource-name="+mainLease,
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=200ms")

	// Under the main lease: the unnamed controller, and nodes initialized.
	waitInitialized(t, ended)
	testenv.Eventually(t, 30*time.Second, "provider-watcher started under the main lease", func() (bool, error) {
		return watcherStarted.Load(), nil
	})
	// Still not, after the manager's electors have had their chances for
	// longer than a lease duration (3 s): the main lease renewed 16 times,
	// once a retry period (200 ms), the migration lease's elector trying
	// as often.
	testenv.Consistently(t, 60*time.Second, "provider-ipam not started while another component holds the migration lease",
		renewals(t, leases, mainLease), 16, func() error {
			if ipamStarted.Load() {
				return errors.New("provider-ipam started")
			}
			return nil
		})

	// The other component lets go.
	if err := leases.Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "provider-ipam started under the migration lease", func() (bool, error) {
		if done, err := ended(); done {
			t.Fatalf("the command ended: %v", err)
		}
		return ipamStarted.Load(), nil
	})
	l, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h == "" || h == "kube-controller-manager-1" {
		t.Errorf("migration lease holder = %q, want this manager", h)
	}
}

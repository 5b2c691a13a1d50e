//go:build integration

package app_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	ended := startCommand(t, cmd, stop, "--cloud-provider=gce", "--enable-leader-migration", "--leader-migration-config="+cfg,
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=200ms")

	// Under the main lease: the unnamed controller, and nodes initialized.
	waitInitialized(t, ended)
	testenv.Eventually(t, 30*time.Second, "provider-watcher started under the main lease", func() (bool, error) {
		return watcherStarted.Load(), nil
	})
	if ipamStarted.Load() {
		t.Fatal("provider-ipam started while another component holds the migration lease")
	}
	time.Sleep(3 * time.Second)
	if ipamStarted.Load() {
		t.Fatal("provider-ipam started while another component holds the migration lease")
	}

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

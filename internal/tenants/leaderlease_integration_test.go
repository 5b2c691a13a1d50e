//go:build integration

package tenants_test

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/tenants"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// A tenant whose leader Lease (in its own cluster) a holder stopped
// renewing long ago is served at once, not a lease duration after this
// replica first saw the Lease, as client-go's elector alone would (five
// minutes here); a tenant whose leader Lease is renewed by someone else (a
// CCM already serving it) is left to that holder.
func TestTenantsTakeADeadHoldersLeaderLeaseAtOnce(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	dead, live := startTenant(t, "lease-dead"), startTenant(t, "lease-live")
	putLeader := func(tn *tenant, renewed time.Time) {
		t.Helper()
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cloud-controller-manager"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-ccm"), LeaseDurationSeconds: ptr.To(int32(300)),
				AcquireTime: ptr.To(metav1.NewMicroTime(renewed)), RenewTime: ptr.To(metav1.NewMicroTime(renewed))},
		}
		if _, err := tn.client.CoordinationV1().Leases("kube-system").Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	putLeader(dead, time.Now().Add(-time.Hour))
	putLeader(live, time.Now())
	for _, tn := range []*tenant{dead, live} {
		putSecret(t, ns, tn.name, map[string][]byte{tenants.KeyKubeconfig: tn.kc})
	}
	testenv.StartOutrigger(t, cloud, append(flags(ns, "r1"), "--leader-elect=true", "--leader-elect-lease-duration=5m")...)
	nodeDead, nodeLive := dead.addNode(t, cloud, "198.18.13.1"), live.addNode(t, cloud, "198.18.13.2")
	testenv.Eventually(t, 60*time.Second, "the tenant whose leader Lease's holder is long gone served", func() (bool, error) {
		return dead.initialized(t, nodeDead), nil
	})
	l, err := dead.client.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h == "" || h == "another-ccm" {
		t.Errorf("the dead holder's leader Lease is held by %q", h)
	}
	// The other tenant is this replica's too, but its leader Lease is
	// renewed: a few rounds on, its node is still the live holder's.
	if holderOf(t, ns, live.name) != "r1" {
		waitRounds(t, ns, 1)
	}
	waitRounds(t, ns, 3)
	if live.initialized(t, nodeLive) {
		t.Error("the tenant whose leader Lease is held and renewed was served by a second CCM")
	}
	l, err = live.client.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "another-ccm" {
		t.Errorf("the renewed leader Lease is held by %q, want its holder's", h)
	}
}

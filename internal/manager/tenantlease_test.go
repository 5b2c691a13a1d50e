package manager

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaseExpired(t *testing.T) {
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(-ago))) }
	for _, tc := range []struct {
		name   string
		spec   coordinationv1.LeaseSpec
		expect bool
	}{
		{"renewed a duration and more ago", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: at(16 * time.Second)}, true},
		{"renewed within its duration", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: at(14 * time.Second)}, false},
		{"acquired long ago, never renewed", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To(int32(15)), AcquireTime: at(time.Hour)}, true},
		{"renew time wins over acquire time", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To(int32(15)), AcquireTime: at(time.Hour), RenewTime: at(time.Second)}, false},
		{"no holder: free already", coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: at(time.Hour)}, false},
		{"empty holder: free already", coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: at(time.Hour)}, false},
		{"no duration: left to the elector", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: at(time.Hour)}, false},
		{"no times: left to the elector", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To(int32(15))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseExpired(&coordinationv1.Lease{Spec: tc.spec}, now); got != tc.expect {
				t.Errorf("leaseExpired = %v, want %v", got, tc.expect)
			}
		})
	}
}

package nodeipam

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// A CIDR goes back to the pool only when the write that would have given it
// to a node certainly failed. An answer lost after the API server committed
// it (a timeout, a 5xx) keeps the reservation: with one CIDR left, the next
// node must not get the CIDR the first one now holds.
func TestCIDRKeptAfterAnAmbiguousWrite(t *testing.T) {
	nodeGroup := schema.GroupResource{Resource: "nodes"}
	for _, tc := range []struct {
		name string
		// answer is what the API server's answer to the first node's
		// patch becomes; committed says whether the patch was applied.
		answer    error
		committed bool
		// released: the CIDR may go to the second node.
		released bool
	}{
		{"timeout after commit", apierrors.NewTimeoutError("the answer was lost", 1), true, false},
		{"server timeout after commit", apierrors.NewServerTimeout(nodeGroup, "patch", 1), true, false},
		{"5xx after commit", apierrors.NewInternalError(errors.New("etcd answered late")), true, false},
		{"connection lost", errors.New("read tcp: connection reset by peer"), true, false},
		{"refused", apierrors.NewForbidden(nodeGroup, "a", errors.New("no")), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
			b := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}}
			failed := false
			c := fake.NewClientBuilder().WithObjects(a, b).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if obj.GetName() != "a" || failed {
						return c.Patch(ctx, obj, patch, opts...)
					}
					failed = true
					if tc.committed {
						if err := c.Patch(ctx, obj, patch, opts...); err != nil {
							return err
						}
					}
					return tc.answer
				},
			}).Build()
			ranges, err := newRangeAllocator([]netip.Prefix{netip.MustParsePrefix("198.19.240.0/24")}, 24, 64)
			if err != nil {
				t.Fatal(err)
			}
			r := &reconciler{client: c, recorder: record.NewFakeRecorder(10), ranges: ranges, rebuilt: true}

			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "a"}}); err == nil {
				t.Fatal("the first node's lost answer was not an error")
			}
			// The second node comes before the first one is retried.
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "b"}})
			if err != nil {
				t.Fatal(err)
			}
			var got corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: "b"}, &got); err != nil {
				t.Fatal(err)
			}
			if given := len(got.Spec.PodCIDRs) > 0; given != tc.released {
				t.Fatalf("second node given %v (requeue %v); want a CIDR: %v", got.Spec.PodCIDRs, res.RequeueAfter, tc.released)
			}
		})
	}
}

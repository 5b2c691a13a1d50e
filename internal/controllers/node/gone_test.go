package node

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// A node deleted between the read and the write is not an error: there is
// nothing left to write to, and no retry to make.
func TestPatchOfADeletedNodeIsNoError(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone", Labels: map[string]string{corev1.LabelFailureDomainBetaZone: "z"}}}
	notFound := func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "gone")
	}
	c := fake.NewClientBuilder().WithObjects(n).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "gone")
		},
		SubResourcePatch: notFound,
	}).Build()
	r := &Reconciler{client: c}
	if err := r.reconcileLabels(context.Background(), n.DeepCopy()); err != nil {
		t.Errorf("labels of a deleted node: %v", err)
	}
	if wrote, err := patchAddresses(context.Background(), c, n.DeepCopy(), []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.9"}}); err != nil || wrote {
		t.Errorf("addresses of a deleted node: wrote %v, err %v", wrote, err)
	}
}

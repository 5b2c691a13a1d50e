package manager

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cache keeps neither managedFields nor a node's images: no controller
// reads them, and at thousands of nodes they are much of the memory.
func TestCacheStripsWhatNoControllerReads(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{ProviderID: "sim://n"},
		Status: corev1.NodeStatus{
			Images:    []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}},
		},
	}
	got, err := stripUnread(node)
	if err != nil {
		t.Fatal(err)
	}
	n := got.(*corev1.Node)
	if n.ManagedFields != nil || n.Status.Images != nil {
		t.Errorf("cached node keeps managedFields %v, images %v", n.ManagedFields, n.Status.Images)
	}
	if n.Spec.ProviderID != "sim://n" || len(n.Status.Addresses) != 1 || n.Labels["a"] != "b" {
		t.Errorf("stripping dropped what controllers read: %+v", n)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	if got, _ := stripUnread(svc); got.(*corev1.Service).ManagedFields != nil {
		t.Error("cached Service keeps managedFields")
	}
}

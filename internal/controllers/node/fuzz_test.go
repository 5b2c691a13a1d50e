package node

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// FuzzProvidedNodeIP feeds kubelet's --node-ip annotation, which a user
// sets, and the cloud's addresses through the address merge: a malformed
// or unmatched value is an error quoting the annotation (the node's
// SyncFailed Event), never a panic, and a merge that succeeds keeps only
// the cloud's addresses.
func FuzzProvidedNodeIP(f *testing.F) {
	f.Add("198.18.0.5", "198.18.0.5", "fd00::5", true)
	f.Add("198.18.0.5,fd00::5", "198.18.0.5", "fd00::5", true)
	f.Add("fd00::5,198.18.0.5", "198.18.0.5", "fd00::5", true)
	f.Add("::", "198.18.0.5", "", true)
	f.Add("0.0.0.0", "198.18.0.5", "", true)
	f.Add("198.18.0.5,198.18.0.6", "198.18.0.5", "", true)
	f.Add("not-an-ip", "198.18.0.5", "", true)
	f.Add("", "", "", false)
	f.Fuzz(func(t *testing.T, annotation, cloudV4, cloudV6 string, set bool) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		if set {
			node.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: annotation}
		}
		var cloud []corev1.NodeAddress
		for _, a := range []string{cloudV4, cloudV6} {
			if a != "" {
				cloud = append(cloud, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
			}
		}
		addrs, refused, ok, err := desiredAddresses(node, cloud)
		if err != nil {
			if !strings.Contains(err.Error(), cloudproviderapi.AnnotationAlphaProvidedIPAddr) {
				t.Fatalf("error does not name the annotation: %v", err)
			}
			return
		}
		if !ok {
			if len(cloud) != len(refused) {
				t.Fatalf("cloud addresses %v ignored", cloud)
			}
			return
		}
		for _, a := range addrs {
			found := false
			for _, c := range cloud {
				found = found || c == a
			}
			if !found {
				t.Fatalf("merged address %v is not one of the cloud's %v", a, cloud)
			}
		}
	})
}

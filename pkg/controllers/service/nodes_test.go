package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIsBackend(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name   string
		labels map[string]string
		taints []corev1.Taint
		ready  corev1.ConditionStatus
		del    *metav1.Time
		want   bool
	}{
		{name: "plain node", want: true},
		{name: "not ready still serves (KEP-3458)", ready: corev1.ConditionFalse, want: true},
		{name: "exclude label true", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "true"}, want: false},
		{name: "exclude label empty is not a boolean: excluded", labels: map[string]string{corev1.LabelNodeExcludeBalancers: ""}, want: false},
		{name: "exclude label false keeps the node", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "false"}, want: true},
		{name: "exclude label FALSE keeps the node", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "FALSE"}, want: true},
		{name: "exclude label garbage excludes", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "maybe"}, want: false},
		{name: "autoscaler taint", taints: []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}, want: false},
		{name: "other taint", taints: []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}, want: true},
		{name: "being deleted", del: &now, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tt.labels, DeletionTimestamp: tt.del}}
			n.Spec.Taints = tt.taints
			if tt.ready != "" {
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: tt.ready}}
			}
			if got := IsBackend(n); got != tt.want {
				t.Errorf("IsBackend = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBackendChanged(t *testing.T) {
	base := func() *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		n.Spec.ProviderID = "sim://i-1"
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
		return n
	}
	tests := []struct {
		name   string
		mutate func(*corev1.Node)
		want   bool
	}{
		{name: "heartbeat", mutate: func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, want: false},
		{name: "unrelated label", mutate: func(n *corev1.Node) { n.Labels = map[string]string{"team": "a"} }, want: false},
		{name: "excluded", mutate: func(n *corev1.Node) { n.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "true"} }, want: true},
		{name: "autoscaler taint", mutate: func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint}} }, want: true},
		{name: "providerID set", mutate: func(n *corev1.Node) { n.Spec.ProviderID = "sim://i-2" }, want: true},
		{name: "address changed", mutate: func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base()
			tt.mutate(cur)
			if got := backendChanged(base(), cur); got != tt.want {
				t.Errorf("backendChanged = %v, want %v", got, tt.want)
			}
		})
	}
}

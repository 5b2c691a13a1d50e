package gateway

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// A data plane pod names the port of its /metrics "metrics", next to its
// listeners' ports, so that a PodMonitor (the chart's) scrapes it by name;
// the pods carry the labels such a monitor selects them by.
func TestDataPlanePodNamesItsMetricsPort(t *testing.T) {
	r := &reconciler{opts: Options{Namespace: DefaultNamespace, DataPlaneImage: "outrigger:test"}}
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	d := r.deployment(gw, []corev1.ServicePort{{Name: "http-80", Port: 80, Protocol: corev1.ProtocolTCP}}, 2)
	c := d.Spec.Template.Spec.Containers[0]
	var names []string
	found := false
	for _, p := range c.Ports {
		names = append(names, p.Name)
		if p.Name == "metrics" {
			found = p.ContainerPort == dataplane.HealthPort && p.Protocol == corev1.ProtocolTCP
		}
	}
	if !found || len(c.Ports) != 2 {
		t.Errorf("container ports %v, want http-80 and metrics (TCP %d)", names, dataplane.HealthPort)
	}
	labels := d.Spec.Template.Labels
	if labels[managedByLabel] != managedBy || labels[GatewayUIDLabel] != "u1" || labels[GatewayLabel] != "web" || labels[GatewayNamespaceLabel] != "shop" {
		t.Errorf("pod labels %v, want the ones the chart's PodMonitor selects and relabels", labels)
	}
}

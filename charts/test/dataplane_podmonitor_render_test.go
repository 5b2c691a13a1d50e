package charttest

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestDataPlanePodMonitorRender: the data planes' PodMonitor is off by
// default; on, it scrapes the port named metrics of Outrigger's data plane
// pods in any namespace (or those listed), labels each series with its
// Gateway, and carries the labels a Prometheus selects it by. Without the
// gateway controller there is nothing to scrape, and nothing is rendered.
func TestDataPlanePodMonitorRender(t *testing.T) {
	for _, o := range renderObjects(t, "cloudProvider: sim\n") {
		if o.GetKind() == "PodMonitor" {
			t.Errorf("rendered %s by default", objectKey(o))
		}
	}

	pm := only(t, renderObjects(t, `
cloudProvider: sim
monitoring:
  dataPlanePodMonitor:
    enabled: true
    labels: {release: kube-prometheus-stack}
    interval: 30s
`), "PodMonitor")
	if pm.GetAPIVersion() != "monitoring.coreos.com/v1" || pm.GetNamespace() != namespace || pm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("PodMonitor %s %s labels %v", pm.GetAPIVersion(), objectKey(pm), pm.GetLabels())
	}
	if anyNS, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !anyNS {
		t.Error("namespaceSelector does not pick any namespace: data planes may live in their Gateways' namespaces")
	}
	if by, _, _ := unstructured.NestedString(pm.Object, "spec", "selector", "matchLabels", "app.kubernetes.io/managed-by"); by != "outrigger" {
		t.Errorf("selector managed-by %q, want outrigger", by)
	}
	exprs, _, _ := unstructured.NestedSlice(pm.Object, "spec", "selector", "matchExpressions")
	if len(exprs) != 1 || exprs[0].(map[string]any)["key"] != "gateway.outrigger.dev/uid" || exprs[0].(map[string]any)["operator"] != "Exists" {
		t.Errorf("selector expressions %v, want the data plane pods' gateway.outrigger.dev/uid", exprs)
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("podMetricsEndpoints %v, want one", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" || ep["interval"] != "30s" {
		t.Errorf("endpoint %v, want port metrics, path /metrics, interval 30s", ep)
	}
	relabel, _ := ep["relabelings"].([]any)
	gateway := false
	for _, r := range relabel {
		r := r.(map[string]any)
		src, _ := r["sourceLabels"].([]any)
		var names []string
		for _, s := range src {
			names = append(names, s.(string))
		}
		if r["targetLabel"] == "gateway" && r["separator"] == "/" && slices.Equal(names, []string{
			"__meta_kubernetes_pod_label_gateway_outrigger_dev_namespace", "__meta_kubernetes_pod_label_gateway_outrigger_dev_name",
		}) {
			gateway = true
		}
	}
	if !gateway {
		t.Errorf("relabelings %v, want gateway=namespace/name from the pod's labels", relabel)
	}

	listed := only(t, renderObjects(t, "cloudProvider: sim\nmonitoring: {dataPlanePodMonitor: {enabled: true, namespace: monitoring, namespaces: [outrigger-gateways]}}\n"), "PodMonitor")
	names, _, _ := unstructured.NestedStringSlice(listed.Object, "spec", "namespaceSelector", "matchNames")
	if listed.GetNamespace() != "monitoring" || !slices.Equal(names, []string{"outrigger-gateways"}) {
		t.Errorf("PodMonitor %s namespaces %v, want in monitoring, scraping outrigger-gateways", objectKey(listed), names)
	}
	if _, found, _ := unstructured.NestedBool(listed.Object, "spec", "namespaceSelector", "any"); found {
		t.Error("namespaceSelector has any with namespaces listed")
	}

	for _, o := range renderObjects(t, "cloudProvider: sim\ngateway: {enabled: false}\nmonitoring: {dataPlanePodMonitor: {enabled: true}}\n") {
		if o.GetKind() == "PodMonitor" {
			t.Errorf("rendered %s without the gateway controller", objectKey(o))
		}
	}

	if _, err := render(t, "cloudProvider: sim\nmonitoring: {dataPlanePodMonitor: {enabled: true, interval: soon}}\n"); err == nil || !strings.Contains(err.Error(), "interval") {
		t.Errorf("interval soon: %v, want an error naming interval", err)
	}
}

package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// alertFile is files/alerts.yaml as the tests read it.
type alertFile struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

func readAlertFile(t *testing.T) alertFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(Dir(), "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f alertFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// renderedAlerts returns the rendered PrometheusRule's rules by alert name.
func renderedAlerts(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	pr := only(t, objs, "PrometheusRule")
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	out := map[string]map[string]any{}
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			out[rule["alert"].(string)] = rule
		}
	}
	return out
}

// TestMonitoringRender: the PrometheusRule and the dashboard ConfigMap are
// off by default; on, they carry every rule of files/alerts.yaml (less the
// disabled ones, with the added labels) and files/dashboard.json.
func TestMonitoringRender(t *testing.T) {
	for _, o := range renderObjects(t, "cloudProvider: sim\n") {
		if o.GetKind() == "PrometheusRule" || o.GetKind() == "ConfigMap" {
			t.Errorf("rendered %s by default", objectKey(o))
		}
	}

	file := readAlertFile(t)
	var names []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			names = append(names, r["alert"].(string))
		}
	}
	if len(names) == 0 {
		t.Fatal("files/alerts.yaml holds no alerts")
	}

	objs := renderObjects(t, `
cloudProvider: sim
monitoring:
  prometheusRule:
    enabled: true
    labels: {release: kube-prometheus-stack}
    additionalAlertLabels: {team: platform}
  grafanaDashboard:
    enabled: true
    namespace: monitoring
    annotations: {grafana_folder: Kubernetes}
`)
	pr := only(t, objs, "PrometheusRule")
	if pr.GetAPIVersion() != "monitoring.coreos.com/v1" || pr.GetNamespace() != namespace || pr.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule %s %s labels %v", pr.GetAPIVersion(), objectKey(pr), pr.GetLabels())
	}
	alerts := renderedAlerts(t, objs)
	if got := keys(alerts); !slices.Equal(got, sortedCopy(names)) {
		t.Errorf("rendered alerts %v, want files/alerts.yaml's %v", got, names)
	}
	for name, r := range alerts {
		labels, _ := r["labels"].(map[string]any)
		if labels["team"] != "platform" || labels["severity"] == nil {
			t.Errorf("%s: labels %v, want the file's severity and team=platform", name, labels)
		}
	}

	cm := only(t, objs, "ConfigMap")
	if cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetAnnotations()["grafana_folder"] != "Kubernetes" {
		t.Errorf("dashboard ConfigMap %s labels %v annotations %v", objectKey(cm), cm.GetLabels(), cm.GetAnnotations())
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "outrigger.json")
	want, err := os.ReadFile(filepath.Join(Dir(), "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got, wantJSON any
	if err := json.Unmarshal([]byte(data), &got); err != nil {
		t.Fatalf("the ConfigMap's dashboard is no JSON: %v", err)
	}
	if err := json.Unmarshal(want, &wantJSON); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	if !equalJSON(got, wantJSON) {
		t.Error("the ConfigMap's dashboard differs from files/dashboard.json")
	}

	disabled := renderedAlerts(t, renderObjects(t, "cloudProvider: sim\nmonitoring: {prometheusRule: {enabled: true, disabledAlerts: [OutriggerLeaderChangesFrequent]}}\n"))
	if _, ok := disabled["OutriggerLeaderChangesFrequent"]; ok || len(disabled) != len(names)-1 {
		t.Errorf("with OutriggerLeaderChangesFrequent disabled, rendered %v", keys(disabled))
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

package apiserver

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
)

// TestPluginServerSideDryRun applies, as TestServerSideDryRun does, the
// objects of a provider plugin run as a sidecar (a second container, the
// socket's emptyDir, the grpc provider's ConfigMap, one uid for both; the
// plugin's own ServiceAccount, its token's in-memory emptyDir and RBAC) and
// of the secure port's bind addresses: the API server accepts each.
func TestPluginServerSideDryRun(t *testing.T) {
	c := newCluster(t)
	for _, tt := range []struct{ name, values string }{
		{name: "plugin sidecar", values: `
plugin:
  enabled: true
  image: {repository: registry.example/acme-plugin, tag: v1.2.3}
  args: [--region=west]
  env: [{name: ACME_REGION, value: west}]
  resources: {requests: {cpu: 50m, memory: 64Mi}}
cloudConfig: {content: "region: west\n"}
`},
		{name: "plugin as uid 1000, no cloud-config", values: `
cloudProvider: grpc
securityContext: {runAsNonRoot: true, runAsUser: 1000}
plugin: {enabled: true, image: {repository: registry.example/acme-plugin}, command: [/acme-plugin], runAsUser: 1000}
hostNetwork: false
`},
		{name: "plugin with its own ServiceAccount", values: `
plugin: {enabled: true, image: {repository: registry.example/acme-plugin}, kubeAPIAccess: true}
rbac: {extraRules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]}
`},
		{name: "bind address on all addresses", values: "cloudProvider: sim\nbindAddress: \"\"\n"},
		{name: "bind address given", values: "cloudProvider: sim\nbindAddress: 198.18.0.7\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			createNamespace(t, charttest.Namespace)
			createNamespace(t, "outrigger-gateways")
			rel, err := charttest.Render(charttest.Namespace, tt.values)
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			objs, err := charttest.Decode([]byte(rel.Manifest))
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				r, err := c.resource(obj)
				if err != nil {
					t.Error(err)
					continue
				}
				if _, err := r.Apply(context.Background(), obj.GetName(), obj, metav1.ApplyOptions{
					FieldManager: "outrigger-chart-test",
					DryRun:       []string{metav1.DryRunAll},
				}); err != nil {
					t.Errorf("server-side apply (dry run) of %s: %v", charttest.ObjectKey(obj), err)
				}
			}
		})
	}
}

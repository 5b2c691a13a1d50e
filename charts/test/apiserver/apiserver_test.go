// Package apiserver applies the chart's objects to a real kube-apiserver
// (the repository's control plane, through internal/testenv): the server
// validates them as a cluster would, and Helm installs and uninstalls the
// chart against it as `helm install` does.
package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cluster reaches the test API server with any kind of object.
type cluster struct {
	client dynamic.Interface
	mapper meta.RESTMapper
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(testenv.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{
		client: dynamic.NewForConfigOrDie(testenv.Config),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

// resource is the client for obj's kind, in obj's namespace when the kind
// is namespaced.
func (c *cluster) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: the API server does not serve it: %w", charttest.ObjectKey(obj), err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameRoot {
		return c.client.Resource(mapping.Resource), nil
	}
	if obj.GetNamespace() == "" {
		return nil, fmt.Errorf("%s: namespaced, yet the chart gives no namespace", charttest.ObjectKey(obj))
	}
	return c.client.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := testenv.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestServerSideDryRun applies every object the chart renders, for several
// value sets, with server-side apply and dryRun=All: the API server runs its
// defaulting, validation and admission on each as on a real install, and
// stores nothing.
func TestServerSideDryRun(t *testing.T) {
	c := newCluster(t)
	tests := []struct {
		name, namespace, values string
	}{
		{name: "defaults", namespace: charttest.Namespace, values: "cloudProvider: sim\n"},
		{name: "cloud config and extra args", namespace: charttest.Namespace, values: `
cloudProvider: sim
cloudConfig: {content: "endpoint: http://127.0.0.1:8080\n"}
controllers: ["*", "-route"]
clusterCIDR: 198.18.64.0/18
allocateNodeCIDRs: true
configureCloudRoutes: true
extraArgs: {v: 2, logging-format: json}
podAnnotations: {example.com/team: cloud}
`},
		{name: "tenant mode", namespace: "outrigger-system", values: "cloudProvider: sim\ntenants: {enabled: true, namespace: tenants}\n"},
		{name: "service account credentials", namespace: charttest.Namespace, values: "cloudProvider: sim\nuseServiceAccountCredentials: true\ncloudConfig: {existingSecret: cloud-config}\n"},
		// The PrometheusRule needs the Prometheus Operator's CRD, which this
		// API server does not serve; charts/test/monitoring loads its rules.
		{name: "grafana dashboard", namespace: charttest.Namespace, values: "cloudProvider: sim\nmonitoring: {grafanaDashboard: {enabled: true, annotations: {grafana_folder: Kubernetes}}}\n"},
		{name: "gateway namespace mode", namespace: charttest.Namespace, values: "cloudProvider: sim\ngateway: {namespaceMode: gateway}\n"},
		{name: "overrides in another namespace", namespace: "outrigger-system", values: `
cloudProvider: sim
replicaCount: 3
hostNetwork: false
priorityClassName: ""
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
tolerations: [{operator: Exists}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]
podDisruptionBudget: {minAvailable: 2}
extraArgs: [--v=4]
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			createNamespace(t, tt.namespace)
			// The Gateway data plane namespace the chart makes: a dry run
			// cannot place objects in a namespace it only pretends to make.
			createNamespace(t, "outrigger-gateways")
			createNamespace(t, "tenants") // tenant mode's Secrets and Leases
			rel, err := charttest.Render(tt.namespace, tt.values)
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			objs, err := charttest.Decode([]byte(rel.Manifest))
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatal("rendered no objects")
			}
			ctx := context.Background()
			for _, obj := range objs {
				r, err := c.resource(obj)
				if err != nil {
					t.Error(err)
					continue
				}
				_, err = r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{
					FieldManager: "outrigger-chart-test",
					DryRun:       []string{metav1.DryRunAll},
				})
				if err != nil {
					t.Errorf("server-side apply (dry run) of %s: %v", charttest.ObjectKey(obj), err)
				}
			}
		})
	}
}

// TestInstallUninstall installs the chart with Helm as `helm install` does,
// checks every object it rendered is on the API server, then uninstalls it
// and waits for every object to be gone.
func TestInstallUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := charttest.Namespace
	kubeconfig := testenv.Kubeconfig
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig, getter.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", t.Logf); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	chrt, err := charttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	// A Gateway namespace of its own: the dry-run tests made the default.
	vals, err := charttest.UserValues("cloudProvider: sim\ncloudConfig: {content: \"endpoint: http://127.0.0.1:8080\\n\"}\ngateway: {namespace: outrigger-gateways-install}\n")
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = charttest.ReleaseName, ns
	// No nodes run here, so the pods never start: wait for nothing.
	install.Wait = false
	rel, err := install.RunWithContext(ctx, chrt, vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			if _, err := action.NewUninstall(cfg).Run(charttest.ReleaseName); err != nil {
				t.Errorf("helm uninstall: %v", err)
			}
		}
	})
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s, want deployed", rel.Info.Status)
	}
	objs, err := charttest.Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	c := newCluster(t)
	for _, obj := range objs {
		kinds[obj.GetKind()]++
		r, err := c.resource(obj)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s after install: %v", charttest.ObjectKey(obj), err)
			continue
		}
		if owner := got.GetAnnotations()["meta.helm.sh/release-name"]; owner != charttest.ReleaseName {
			t.Errorf("%s: meta.helm.sh/release-name %q, want %q", charttest.ObjectKey(obj), owner, charttest.ReleaseName)
		}
	}
	for _, k := range []string{"Deployment", "PodDisruptionBudget", "ServiceAccount", "Secret", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if kinds[k] == 0 {
			t.Errorf("installed no %s; installed %v", k, kinds)
		}
	}

	if _, err := action.NewUninstall(cfg).Run(charttest.ReleaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	uninstalled = true
	for _, obj := range objs {
		r, err := c.resource(obj)
		if err != nil {
			t.Fatal(err)
		}
		if obj.GetAnnotations()["helm.sh/resource-policy"] == "keep" {
			// Kept on purpose (the Gateway data plane namespace).
			if _, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{}); err != nil {
				t.Errorf("%s is to be kept by helm uninstall: %v", charttest.ObjectKey(obj), err)
			}
			continue
		}
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			t.Errorf("%s after uninstall: still there (%v)", charttest.ObjectKey(obj), err)
		}
	}
}

// Package cluster installs Outrigger on a real cluster (the repository's
// harness, cluster/: kubelets, containerd, kube-proxy in network
// namespaces) as docs/install.md tells an operator to: the image pushed to
// a registry, the packaged chart installed with Helm from its .tgz, the
// image pulled by the nodes' containerd from that registry.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
	"github.com/outrigger-ccm/outrigger/cluster"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/version"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChartFromRegistry starts a two-node cluster without Outrigger, serves
// a registry to its nodes, pushes make image's tarball to it with crane,
// and helm-installs the packaged chart pointed at it. Outrigger must then
// run from the pulled image (both replicas, the image ID the pushed
// digest), initialize both nodes, and give a LoadBalancer Service an
// address that reaches its pods.
func TestChartFromRegistry(t *testing.T) {
	if os.Getenv("OUTRIGGER_CLUSTER") == "" {
		t.Skip("the real-cluster test runs with OUTRIGGER_CLUSTER=1 (as root, after 'make cluster-binaries cluster-images image'; 'make cluster-test' does all that)")
	}
	root := filepath.Join(charttest.Dir(), "..", "..")
	imageTar := os.Getenv("OUTRIGGER_IMAGE")
	if imageTar == "" {
		imageTar = filepath.Join(root, "bin", "outrigger-image.tar")
	}
	img, desc, err := charttest.LoadImage(imageTar, t.TempDir())
	if err != nil {
		t.Fatalf("%v (make image builds it)", err)
	}
	chartTgz, err := charttest.Package(charttest.Dir(), t.TempDir(), version.Version)
	if err != nil {
		t.Fatal(err)
	}
	chrt, err := loader.Load(chartTgz)
	if err != nil {
		t.Fatal(err)
	}

	var ref string
	var rel *release.Release
	o := cluster.Options{Out: testWriter{t}}
	o.Install = func(ctx context.Context, c *cluster.Cluster) error {
		host, err := c.ServeRegistry(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		if err != nil {
			return err
		}
		ref = host + "/outrigger:" + version.Version
		// Pushed from the host through the harness network, where the
		// nodes reach the registry too, over plain HTTP (crane.Insecure).
		if err := crane.Push(img, ref, crane.Insecure, crane.WithAuth(authn.Anonymous), crane.WithTransport(cluster.HarnessHTTPClient().Transport), crane.WithContext(ctx)); err != nil {
			return fmt.Errorf("crane push %s: %w", ref, err)
		}
		ns := charttest.Namespace
		getter := genericclioptions.NewConfigFlags(false)
		getter.KubeConfig, getter.Namespace = &c.Kubeconfig, &ns
		cfg := new(action.Configuration)
		if err := cfg.Init(getter, ns, "secret", t.Logf); err != nil {
			return fmt.Errorf("helm configuration: %w", err)
		}
		// What docs/install.md sets for the local provider, with the
		// cluster's cloud-config.
		content, err := json.Marshal(cluster.CloudConfig)
		if err != nil {
			return err
		}
		vals, err := charttest.UserValues("cloudProvider: local\ncloudConfig: {content: "+string(content)+"}\nextraArgs: {v: 2}\n",
			"image.repository="+host+"/outrigger")
		if err != nil {
			return err
		}
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace = charttest.ReleaseName, ns
		rel, err = install.RunWithContext(ctx, chrt, vals)
		if err != nil {
			return fmt.Errorf("helm install %s: %w", chartTgz, err)
		}
		return nil
	}
	for _, name := range cluster.ClusterImages {
		o.Images = append(o.Images, filepath.Join(apiserver.AssetsDir(), "images", name))
	}
	// Asked for by OUTRIGGER_CLUSTER=1: what is missing is a failure.
	if err := cluster.Preflight(o); err != nil {
		t.Fatalf("cannot run a real cluster here: %v", err)
	}
	ctrllog.SetLogger(logr.Discard())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Down(); err != nil {
			t.Errorf("Down: %v", err)
		}
	}()
	if rel.Info.Status != release.StatusDeployed {
		t.Errorf("release status %s, want deployed", rel.Info.Status)
	}

	// Both replicas ready, running what was pushed, pulled by containerd.
	wantID := strings.TrimSuffix(ref, ":"+version.Version) + "@" + desc.Digest.String()
	var pods []corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods(charttest.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=outrigger"})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		ready := 0
		for _, p := range pods {
			for _, s := range p.Status.ContainerStatuses {
				if s.Ready && s.ImageID == wantID {
					ready++
				}
			}
		}
		return ready == 2, nil
	}); err != nil {
		for _, p := range pods {
			t.Logf("pod %s on %s: %+v", p.Name, p.Spec.NodeName, p.Status.ContainerStatuses)
		}
		t.Fatalf("two Outrigger replicas ready from %s: %v", wantID, err)
	}

	// Up waited for Outrigger to initialize the nodes; check what it wrote.
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID != "local://"+n.Name {
			t.Errorf("node %s: providerID %q, want local://%s", n.Name, n.Spec.ProviderID, n.Name)
		}
	}

	// docs/cluster.md's example: two pods behind a LoadBalancer Service,
	// each answering through the VIP Outrigger gave it.
	manifest, err := cluster.Examples.ReadFile("examples/hostnames.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, manifest); err != nil {
		t.Fatal(err)
	}
	var vip string
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		svc, err := c.Client.CoreV1().Services("default").Get(ctx, "hostnames", metav1.GetOptions{})
		if err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
			vip = svc.Status.LoadBalancer.Ingress[0].IP
		}
		return vip != "", nil
	}); err != nil {
		t.Fatalf("Outrigger gave the Service no load balancer: %v", err)
	}
	hc := cluster.HarnessHTTPClient()
	seen := map[string]bool{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
		if err != nil {
			return false, nil
		}
		resp, err := hc.Get("http://" + vip + "/")
		if err != nil {
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, p := range list.Items {
			if p.Name == string(body) {
				seen[p.Name] = true
			}
		}
		return len(seen) == 2, nil
	}); err != nil {
		t.Fatalf("through VIP %s saw pods %v, want two: %v", vip, seen, err)
	}
}

//go:build integration

package manager_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/dev/controlplane"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

// TestDeployManifestsGiveEnoughAndNoMore applies deploy/rbac.yaml with
// kubectl, checks deploy/deployment.yaml against the API server, and runs
// Outrigger as the manifests' service account: every controller, leader
// election and the secure port work with exactly those permissions.
func TestDeployManifestsGiveEnoughAndNoMore(t *testing.T) {
	kubectl := filepath.Join(controlplane.AssetsDir(), "kubectl")
	for _, args := range [][]string{
		{"apply", "-f", "../../deploy/rbac.yaml"},
		{"apply", "--dry-run=server", "-f", "../../deploy/deployment.yaml"},
	} {
		out, err := exec.Command(kubectl, append(args, "--kubeconfig", testenv.Kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	cfg, err := clientcmd.LoadFromFile(testenv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = "system:serviceaccount:kube-system:cloud-controller-manager"
	}
	saKubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, saKubeconfig); err != nil {
		t.Fatal(err)
	}

	cloud := testenv.StartCloud(t)
	name := testenv.Name("rbac")
	gone := testenv.Name("rbac-gone")
	in, _ := cloud.Create(simcloud.CreateRequest{Name: name})
	goneIn, _ := cloud.Create(simcloud.CreateRequest{Name: gone})
	testenv.CreateNode(t, name, nil)
	testenv.CreateNode(t, gone, nil)
	port := testenv.FreePort(t)
	testenv.StartOutrigger(t, cloud, "--kubeconfig="+saKubeconfig, "--leader-elect=true",
		"--allocate-node-cidrs", "--cluster-cidr=10.120.0.0/16,fd00:120::/56", "--route-reconciliation-period=500ms",
		"--leader-elect-resource-name="+testenv.Name("rbac-lease"), "--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1")

	testenv.Eventually(t, 30*time.Second, "both nodes initialized", func() (bool, error) {
		return testenv.GetNode(t, name).Spec.ProviderID == "sim://"+in.ID && testenv.GetNode(t, gone).Spec.ProviderID != "", nil
	})
	testenv.Eventually(t, 30*time.Second, "pod CIDRs, a route and NetworkUnavailable=False", func() (bool, error) {
		n := testenv.GetNode(t, name)
		for _, c := range n.Status.Conditions {
			if c.Type == "NetworkUnavailable" {
				return len(n.Spec.PodCIDRs) == 2 && c.Status == "False" && len(cloud.Routes()) >= 2, nil
			}
		}
		return false, nil
	})
	if _, err := cloud.SetState(goneIn.ID, simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}
	testenv.SetReady(t, gone, false)
	testenv.Eventually(t, 30*time.Second, "node of the terminated instance deleted", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Nodes().Get(context.Background(), gone, metav1.GetOptions{})
		return err != nil, nil
	})
	testenv.Eventually(t, 10*time.Second, "Synced event recorded", func() (bool, error) {
		return len(testenv.Events(t, name)["Synced"]) > 0, nil
	})

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	for _, path := range []string{"/healthz", "/readyz", "/readyz/informer-sync", "/livez"} {
		testenv.Eventually(t, 20*time.Second, path+" answering 200 without credentials", func() (bool, error) {
			resp, err := hc.Get(base + path)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("/metrics without credentials answered %d, want 401 or 403", resp.StatusCode)
	}
}

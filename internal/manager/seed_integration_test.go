//go:build integration

package manager_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/audit"
)

// seedArgs is the argument list of the cloud-controller-manager DaemonSet in
// the seed talk (shared/seeds/002), with the provider name and the cluster
// CIDR substituted (the project never uses private ranges).
var seedArgs = []string{
	"--cloud-provider=sim",
	"--leader-elect=true",
	"--use-service-account-credentials",
	"--allocate-node-cidrs=true",
	"--configure-cloud-routes=true",
	"--cluster-cidr=198.18.64.0/18",
}

// TestSeedDaemonSetRuns starts the outrigger binary with the seed
// DaemonSet's arguments, as its ServiceAccount with only
// deploy/rbac-service-account-credentials.yaml's rights, and expects it to
// do every controller's job, each controller writing as its own
// ServiceAccount: the audit log shows who wrote what.
func TestSeedDaemonSetRuns(t *testing.T) {
	kubectl := filepath.Join(apiserver.AssetsDir(), "kubectl")
	out, err := exec.Command(kubectl, "apply", "-f", "../../deploy/rbac-service-account-credentials.yaml", "--kubeconfig", testenv.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	cfg, err := clientcmd.LoadFromFile(testenv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = "system:serviceaccount:kube-system:cloud-controller-manager"
	}
	dir := t.TempDir()
	saKubeconfig := filepath.Join(dir, "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, saKubeconfig); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "outrigger")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger").CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}

	cloud := testenv.StartCloud(t)
	name := testenv.Name("seed")
	in, err := cloud.Create(simcloud.CreateRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, nil)

	// What the DaemonSet leaves to the environment: the API server (in a
	// pod, the in-cluster config), the provider's cloud-config, a free port
	// (held for the process until it binds it, with SO_REUSEPORT).
	args := append(append([]string{}, seedArgs...),
		"--kubeconfig="+saKubeconfig, "--cloud-config="+cloud.ConfigFile,
		"--secure-port="+strconv.Itoa(freeport.Reserve(t)), "--permit-port-sharing", "--route-reconciliation-period=1s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	logFile, err := os.Create(filepath.Join(dir, "outrigger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			t.Logf("outrigger exited: %v", err)
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("outrigger's log:\n%s", log)
		}
	})

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("seed-lb"), Namespace: "default"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := testenv.Client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})

	testenv.Eventually(t, 60*time.Second, "the node initialized, given pod CIDRs and a route, the Service a load balancer", func() (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("outrigger exited: %v", err)
		default:
		}
		n := testenv.GetNode(t, name)
		s, err := testenv.Client.CoreV1().Services("default").Get(context.Background(), svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		routed := false
		for _, c := range n.Status.Conditions {
			routed = routed || c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionFalse
		}
		return n.Spec.ProviderID == "sim://"+in.ID && len(n.Spec.PodCIDRs) > 0 && routed && len(s.Status.LoadBalancer.Ingress) > 0, nil
	})

	// Each write by the controllers came from the controller's own
	// ServiceAccount; Outrigger's own identity wrote none of them.
	const sa = "system:serviceaccount:kube-system:"
	want := map[string][]string{
		"nodes/" + name:                    {sa + "node-controller"},                          // initialization, pod CIDRs
		"nodes/" + name + "/status":        {sa + "node-controller", sa + "route-controller"}, // addresses, NetworkUnavailable
		"services/" + svc.Name + "/status": {sa + "service-controller"},                       // the finalizer, the ingress
	}
	testenv.Eventually(t, 10*time.Second, "the audit log to show each controller's identity", func() (bool, error) {
		writers := audit.Writers(t)
		for key, users := range want {
			for _, user := range users {
				if !writers[key][user] {
					return false, fmt.Errorf("no write of %s by %s; writers: %v", key, user, writers[key])
				}
			}
		}
		return true, nil
	})
	writers := audit.Writers(t)
	for key, users := range writers {
		if (strings.Contains(key, name) || strings.Contains(key, svc.Name)) && users[sa+"cloud-controller-manager"] {
			t.Errorf("%s was written by Outrigger's own identity, not a controller's", key)
		}
	}
}

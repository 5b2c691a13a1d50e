//go:build integration

package app_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/providermain"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/audit"
)

// TestMain applies the logging configuration once, with the commands'
// defaults, before any test runs. The commands these tests run in one
// process each apply it as they start, and the first application writes
// klog's global logger: done while a test's own clients log (creating
// nodes for a command just started), that write raced with their reads.
// Applied here first, every command finds it unchanged and leaves it
// (logsapi.ReapplyHandlingIgnoreUnchanged, set by this package's tests).
func TestMain(m *testing.M) {
	if err := logsapi.ValidateAndApply(logsapi.NewLoggingConfiguration(), nil); err != nil {
		fmt.Fprintln(os.Stderr, "applying the logging configuration:", err)
		os.Exit(1)
	}
	testenv.Main(m)
}

// fakeProvider registers upstream's fake cloud under "fake", the part of
// the binary a provider would bring; sample/basic_main.go finds it by name.
const fakeProvider = `package main

import (
	"context"
	"io"
	"net"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

func init() {
	cloudprovider.RegisterCloudProvider("fake", func(io.Reader) (cloudprovider.Interface, error) {
		return &fake.Cloud{
			EnableInstancesV2:  true,
			ExistsByProviderID: true,
			DisableRoutes:      true,
			ExternalIP:         net.ParseIP("198.18.100.1"),
			Zone:               cloudprovider.Zone{FailureDomain: "zone-a", Region: "region-1"},
			OverrideInstanceMetadata: func(_ context.Context, n *v1.Node) (*cloudprovider.InstanceMetadata, error) {
				return &cloudprovider.InstanceMetadata{
					ProviderID:    "fake://" + n.Name,
					InstanceType:  "fake-small",
					NodeAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "198.18.100.10"}},
					Zone:          "zone-a",
					Region:        "region-1",
				}, nil
			},
		}, nil
	})
}
`

// TestUpstreamSampleMain builds k8s.io/cloud-provider's own
// sample/basic_main.go, read from the module cache with only its app
// import changed, and runs it against the package's API server with
// upstream's fake provider: nodes are initialized and a LoadBalancer
// provisioned, each controller writing as the ServiceAccount the sample
// names for it.
func TestUpstreamSampleMain(t *testing.T) {
	bin := providermain.Build(t, providermain.Main{Module: "k8s.io/cloud-provider", File: "sample/basic_main.go",
		GoModDir: "..", Name: "example.com/samplemain", Extra: map[string]string{"fake.go": fakeProvider}})
	// As the sample says, its own client names need their RBAC installed
	// apart: Outrigger's roles, bound to the sample's ServiceAccounts.
	kubectl := filepath.Join(apiserver.AssetsDir(), "kubectl")
	if out, err := exec.Command(kubectl, "apply", "-f", "../deploy/rbac-service-account-credentials.yaml", "--kubeconfig", testenv.Kubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	for sa, role := range map[string]string{
		"mycloud-external-cloud-node-controller":           "outrigger:node-controller",
		"mycloud-external-cloud-node-lifecycle-controller": "outrigger:node-controller",
		"mycloud-external-service-controller":              "outrigger:service-controller",
		"mycloud-external-route-controller":                "outrigger:route-controller",
	} {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "sample:" + sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: sa}},
		}
		if _, err := testenv.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = testenv.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		})
	}

	port := testenv.FreePort(t)
	lease := testenv.Name("sample-ccm")
	providermain.Run(t, bin, "--cloud-provider=fake", "--kubeconfig="+testenv.Kubeconfig,
		"--use-service-account-credentials", "--leader-elect-resource-name="+lease,
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--controllers=*")

	node := testenv.Name("sample-node")
	testenv.CreateNode(t, node, nil)
	testenv.Eventually(t, 90*time.Second, "the node initialized", func() (bool, error) {
		n := testenv.GetNode(t, node)
		for _, taint := range n.Spec.Taints {
			if taint.Key == cloudproviderapi.TaintExternalCloudProvider {
				return false, nil
			}
		}
		return n.Spec.ProviderID == "fake://"+node && n.Labels[corev1.LabelInstanceTypeStable] == "fake-small", nil
	})

	ctx := context.Background()
	ns := "default"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("sample-lb"), Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := testenv.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 60*time.Second, "the Service's load balancer", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ing := s.Status.LoadBalancer.Ingress
		return len(ing) == 1 && ing[0].IP == "198.18.100.1", nil
	})

	// Each controller wrote as the ServiceAccount the sample gave it.
	writers := audit.Writers(t)
	for key, sa := range map[string]string{
		"nodes/" + node:                    "mycloud-external-cloud-node-controller",
		"services/" + svc.Name + "/status": "mycloud-external-service-controller",
	} {
		want := "system:serviceaccount:kube-system:" + sa
		if !writers[key][want] {
			t.Errorf("%s: written by %v, want %s", key, keys(writers[key]), want)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

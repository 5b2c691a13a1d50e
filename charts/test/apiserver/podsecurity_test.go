package apiserver

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestPodSecurity creates the chart's pod, as its Deployment's ReplicaSet
// would (dry run), in namespaces whose Pod Security admission the API
// server enforces: its defaults and its plugin sidecar pass "restricted";
// the host-network mode is refused there and admitted where the namespace
// is "privileged" (as kube-system usually is).
func TestPodSecurity(t *testing.T) {
	const plugin = "plugin: {enabled: true, image: {repository: registry.example/acme-plugin, tag: v1}}\n"
	for _, tc := range []struct {
		name, values, level string
		admitted            bool
	}{
		{"defaults, restricted", "cloudProvider: sim\n", "restricted", true},
		{"plugin sidecar, restricted", plugin, "restricted", true},
		{"plugin with its own ServiceAccount, restricted", "plugin: {enabled: true, image: {repository: registry.example/acme-plugin, tag: v1}, kubeAPIAccess: true}\n", "restricted", true},
		{"without the seccomp profile, restricted", "cloudProvider: sim\npodSecurityContext: null\n", "restricted", false},
		{"host network, restricted", "cloudProvider: sim\nhostNetwork: true\n", "restricted", false},
		{"host network, baseline", "cloudProvider: sim\nhostNetwork: true\n", "baseline", false},
		{"host network, privileged", "cloudProvider: sim\nhostNetwork: true\n", "privileged", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := testenv.Name("pss")
			if _, err := testenv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
				Labels: map[string]string{"pod-security.kubernetes.io/enforce": tc.level}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = testenv.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
			})
			// Critical priority classes are for kube-system; the pod's
			// security is what is tested here.
			rel, err := charttest.Render(ns, tc.values+"priorityClassName: \"\"\n")
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			objs, err := charttest.Decode([]byte(rel.Manifest))
			if err != nil {
				t.Fatal(err)
			}
			var d *appsv1.Deployment
			for _, o := range objs {
				switch o.GetKind() {
				case "Deployment":
					d = &appsv1.Deployment{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
						t.Fatal(err)
					}
				case "ServiceAccount":
					sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Namespace: ns}}
					if _, err := testenv.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if d == nil {
				t.Fatal("the chart rendered no Deployment")
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "outrigger", Namespace: ns, Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec}
			_, err = testenv.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.admitted && err != nil:
				t.Errorf("refused in a %q namespace: %v", tc.level, err)
			case !tc.admitted && err == nil:
				t.Errorf("admitted in a %q namespace, want refused by Pod Security", tc.level)
			case !tc.admitted && !strings.Contains(err.Error(), "violates PodSecurity"):
				t.Errorf("refused, but not by Pod Security: %v", err)
			}
		})
	}
}

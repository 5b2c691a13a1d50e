//go:build integration

package manager_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestUpstreamManifestsApplyUnchanged applies manifests written for the
// upstream CCM (deploy/upstream) to the API server, and checks that each
// container's argument list parses and validates with Outrigger's flags.
func TestUpstreamManifestsApplyUnchanged(t *testing.T) {
	kubectl := filepath.Join(apiserver.AssetsDir(), "kubectl")
	// The seed binds system:cloud-controller-manager to cluster-admin; the
	// binding of deploy/rbac.yaml (another test's) has that name too, and
	// a binding's roleRef cannot change. As on a fresh cluster, go without.
	if out, err := exec.Command(kubectl, "delete", "clusterrolebinding", "system:cloud-controller-manager", "--ignore-not-found", "--kubeconfig", testenv.Kubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	for _, file := range []string{"seed-daemonset.yaml", "deployment.yaml"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("../../deploy/upstream", file)
			out, err := exec.Command(kubectl, "apply", "--dry-run=server", "-f", path, "--kubeconfig", testenv.Kubeconfig).CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			containers := 0
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
			for {
				var obj struct {
					Kind string `json:"kind"`
					Spec struct {
						Template struct {
							Spec struct {
								Containers []struct {
									Command, Args []string
								} `json:"containers"`
							} `json:"spec"`
						} `json:"template"`
					} `json:"spec"`
				}
				if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				for _, c := range obj.Spec.Template.Spec.Containers {
					containers++
					args := append(append([]string{}, c.Command[1:]...), c.Args...)
					opts := manager.NewOptions()
					fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
					opts.AddFlags(fs)
					if err := fs.Parse(args); err != nil {
						t.Fatalf("%v: %v", args, err)
					}
					if err := opts.Validate(); err != nil {
						t.Errorf("%v: %v", args, err)
					}
				}
			}
			if containers == 0 {
				t.Fatal("no containers read")
			}
		})
	}
}

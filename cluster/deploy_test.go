package cluster

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/outrigger-ccm/outrigger/deploy"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// In gateway namespace mode the cluster gets Outrigger as a user deploys
// it for that mode: the flag, and deploy/rbac-gateway-namespaces.yaml's
// ClusterRole writing the data plane's kinds in every namespace; in the
// default mode neither.
func TestDeployManifestsFollowTheGatewayNamespaceMode(t *testing.T) {
	for _, tc := range []struct {
		mode      gateway.NamespaceMode
		wantRole  bool
		wantFlags []string
	}{
		{"", false, nil},
		{gateway.NamespaceShared, false, nil},
		{gateway.NamespaceGateway, true, []string{"--gateway-namespace-mode=gateway"}},
	} {
		files, args := deployManifests(tc.mode)
		if !slices.Equal(args, tc.wantFlags) {
			t.Errorf("mode %q: flags %q, want %q", tc.mode, args, tc.wantFlags)
		}
		var roles []string
		for _, f := range files {
			data, err := deploy.Manifests.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeManifests(data)
			if err != nil {
				t.Fatalf("deploy/%s: %v", f, err)
			}
			for _, o := range objs {
				if r, ok := o.(*rbacv1.ClusterRole); ok {
					roles = append(roles, r.Name)
				}
			}
		}
		if got := slices.Contains(roles, "system:cloud-controller-manager:gateway-namespaces"); got != tc.wantRole {
			t.Errorf("mode %q: ClusterRoles %v; the data plane's kinds granted everywhere: %v, want %v", tc.mode, roles, got, tc.wantRole)
		}
	}
}

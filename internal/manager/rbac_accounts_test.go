package manager

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// With --use-service-account-credentials every controller acts as its own
// ServiceAccount, whose token Outrigger mints: deploy's RBAC for that mode
// must let it mint each controller's account, the gateway-controller's
// included, and no other (the chart's copy is compared with deploy's by
// charts/test).
func TestServiceAccountCredentialsMintEveryControllersAccount(t *testing.T) {
	data, err := os.ReadFile("../../deploy/rbac-service-account-credentials.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var minted []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "serviceaccounts/token") && slices.Contains(r.Verbs, "create") {
				minted = append(minted, r.ResourceNames...)
			}
		}
	}
	var want []string
	for _, d := range controllers {
		if d.ServiceAccount != "" && !slices.Contains(want, d.ServiceAccount) {
			want = append(want, d.ServiceAccount)
		}
	}
	slices.Sort(want)
	slices.Sort(minted)
	if !slices.Equal(minted, want) {
		t.Errorf("deploy/rbac-service-account-credentials.yaml lets Outrigger mint tokens of %v; the controllers' accounts are %v", minted, want)
	}
}

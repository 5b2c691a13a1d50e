package charttest

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestRenderTenants: tenant mode passes its flags (each replica's pod name
// as its identity in the Leases), and its RBAC in the management cluster is
// the tenants namespace's Secrets, Leases and Events, and the secure port's
// reviews: no rule on nodes, Services, Gateways or any other namespace's
// objects.
func TestRenderTenants(t *testing.T) {
	objs := renderObjects(t, "cloudProvider: sim\ntenants: {enabled: true, namespace: tenants, selector: example.com/tenant}\n")
	c := container(t, deployment(t, objs))
	checkArgsParse(t, c)
	for _, want := range []string{"--tenants-namespace=tenants", "--tenants-selector=example.com/tenant", "--tenants-replica-id=$(POD_NAME)"} {
		if !hasArg(c, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if got := expandEnv(c, c.Args); !slices.Contains(got, "--tenants-replica-id="+testPodName) {
		t.Errorf("args expanded as the kubelet does: %q, want the pod's name as replica id", got)
	}
	var roles, clusterRoles []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			clusterRoles = append(clusterRoles, o.GetName())
			cr := toTyped[rbacv1.ClusterRole](t, o)
			for _, r := range cr.Rules {
				for _, res := range r.Resources {
					if res != "tokenreviews" && res != "subjectaccessreviews" {
						t.Errorf("ClusterRole %s grants %v on %s", cr.Name, r.Verbs, res)
					}
				}
			}
		case "Role":
			roles = append(roles, o.GetNamespace()+"/"+o.GetName())
			role := toTyped[rbacv1.Role](t, o)
			for _, r := range role.Rules {
				for _, res := range r.Resources {
					if !slices.Contains([]string{"secrets", "leases", "events"}, res) {
						t.Errorf("Role %s grants %v on %s", role.Name, r.Verbs, res)
					}
				}
			}
		case "RoleBinding":
			if ns := o.GetNamespace(); ns != "tenants" && o.GetName() != "outrigger:tenants:authentication-reader" {
				t.Errorf("RoleBinding %s/%s outside the tenants namespace", ns, o.GetName())
			}
		}
	}
	if !slices.Equal(roles, []string{"tenants/outrigger:tenants"}) || !slices.Equal(clusterRoles, []string{"outrigger:tenants:auth-delegator"}) {
		t.Errorf("Roles %v, ClusterRoles %v; want the tenants namespace's Role and the auth delegator only", roles, clusterRoles)
	}

	// The tenants namespace defaults to the release's.
	objs = renderObjects(t, "cloudProvider: sim\ntenants: {enabled: true}\n")
	if c := container(t, deployment(t, objs)); !hasArg(c, "--tenants-namespace="+Namespace) || !hasArg(c, "--tenants-selector=outrigger.dev/tenant") {
		t.Errorf("args %q, want the release namespace and the default selector", c.Args)
	}
}

package charttest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// rulesBoundTo gathers the rules of every Role and ClusterRole the
// rendered bindings give the ServiceAccount ns/name.
func rulesBoundTo(t testing.TB, objs []*unstructured.Unstructured, ns, name string) []rbacv1.PolicyRule {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			roles["ClusterRole/"+o.GetName()] = toTyped[rbacv1.ClusterRole](t, o).Rules
		case "Role":
			roles["Role/"+o.GetNamespace()+"/"+o.GetName()] = toTyped[rbacv1.Role](t, o).Rules
		}
	}
	var out []rbacv1.PolicyRule
	for _, o := range objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		key := ""
		switch o.GetKind() {
		case "ClusterRoleBinding":
			b := toTyped[rbacv1.ClusterRoleBinding](t, o)
			ref, subjects, key = b.RoleRef, b.Subjects, "ClusterRole/"+b.RoleRef.Name
		case "RoleBinding":
			b := toTyped[rbacv1.RoleBinding](t, o)
			ref, subjects, key = b.RoleRef, b.Subjects, "Role/"+b.Namespace+"/"+b.RoleRef.Name
			if ref.Kind == "ClusterRole" {
				key = "ClusterRole/" + ref.Name
			}
		default:
			continue
		}
		if slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Namespace == ns && s.Name == name
		}) {
			out = append(out, roles[key]...)
		}
	}
	return out
}

// TestRenderPluginOwnIdentity: with plugin.kubeAPIAccess the plugin
// reaches the API as a ServiceAccount of its own, never as Outrigger's
// (whose gateway-controller reads Secrets cluster-wide): the plugin
// container does not mount the pod's token, but an in-memory emptyDir
// Outrigger writes the plugin's token into (--plugin-service-account,
// --plugin-api-access-dir); the plugin's account holds rbac.extraRules and
// no Secret rule; Outrigger's may mint that one account's token and no
// other's.
func TestRenderPluginOwnIdentity(t *testing.T) {
	objs := renderObjects(t, `
plugin:
  enabled: true
  image: {repository: registry.example/acme-plugin}
  kubeAPIAccess: true
rbac:
  extraRules:
  - {apiGroups: [""], resources: [configmaps], verbs: [get]}
`)
	spec := deployment(t, objs).Spec.Template.Spec
	o, p := containerNamed(t, spec, "outrigger"), containerNamed(t, spec, "plugin")
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	const plugin = "cloud-controller-manager-plugin"

	// The pod's token is Outrigger's alone.
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false", spec.AutomountServiceAccountToken)
	}
	podToken, ok := mountAt(o, tokenDir)
	if !ok || podToken.Name != "kube-api-access" {
		t.Fatalf("outrigger mounts %+v at %s, want the pod's token", podToken, tokenDir)
	}
	for _, m := range p.VolumeMounts {
		if m.Name == podToken.Name {
			t.Errorf("the plugin mounts the pod's token (%s) at %s", m.Name, m.MountPath)
		}
		if v, ok := volumeNamed(spec, m.Name); ok && v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }) {
			t.Errorf("the plugin mounts a projected ServiceAccount token of the pod's account: %s", m.Name)
		}
	}

	// The plugin's token: one in-memory emptyDir, written by Outrigger,
	// read by the plugin where rest.InClusterConfig looks.
	pm, ok := mountAt(p, tokenDir)
	if !ok || !pm.ReadOnly {
		t.Fatalf("plugin mounts %+v at %s, want its token, read-only", pm, tokenDir)
	}
	v, ok := volumeNamed(spec, pm.Name)
	if !ok || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("the plugin's token volume %+v, want an emptyDir in memory", v)
	}
	var dir string
	for _, m := range o.VolumeMounts {
		if m.Name == pm.Name {
			dir = m.MountPath
			if m.ReadOnly {
				t.Errorf("outrigger mounts %s read-only: it writes the token there", m.Name)
			}
		}
	}
	checkArgsParse(t, o)
	for _, want := range []string{"--plugin-service-account=" + namespace + "/" + plugin, "--plugin-api-access-dir=" + dir} {
		if dir == "" || !hasArg(o, want) {
			t.Errorf("outrigger args %q lack %s", o.Args, want)
		}
	}

	// The plugin's account: its own, with rbac.extraRules and nothing
	// that reads Secrets.
	sa := byKind(objs, "ServiceAccount")
	if _, ok := sa["ServiceAccount "+namespace+"/"+plugin]; !ok {
		t.Errorf("ServiceAccounts %v lack %s/%s", keys(sa), namespace, plugin)
	}
	rules := rulesBoundTo(t, objs, namespace, plugin)
	if !hasConfigMapGet(rules) {
		t.Errorf("the plugin's rules %+v lack rbac.extraRules", rules)
	}
	for _, r := range rules {
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") {
			t.Errorf("the plugin's account may reach Secrets: %+v", r)
		}
	}

	// Outrigger's account mints that token, by name.
	mine := rulesBoundTo(t, objs, namespace, "cloud-controller-manager")
	want := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{plugin}, Verbs: []string{"create"}}
	if !slices.ContainsFunc(mine, func(r rbacv1.PolicyRule) bool { return equalRule(r, want) }) {
		t.Errorf("Outrigger's rules lack %+v", want)
	}
	for _, r := range mine {
		if slices.Contains(r.Resources, "serviceaccounts/token") && !slices.Equal(r.ResourceNames, []string{plugin}) && !slices.Equal(r.ResourceNames, []string{"node-controller", "service-controller", "route-controller"}) {
			t.Errorf("Outrigger may mint tokens beyond the plugin's: %+v", r)
		}
	}

	// Without kubeAPIAccess: no account, no flags, no token anywhere in
	// the plugin.
	objs = renderObjects(t, "plugin: {enabled: true, image: {repository: registry.example/acme-plugin}}\n")
	spec = deployment(t, objs).Spec.Template.Spec
	o, p = containerNamed(t, spec, "outrigger"), containerNamed(t, spec, "plugin")
	if _, ok := mountAt(p, tokenDir); ok || hasArgPrefix(o, "--plugin-") {
		t.Errorf("without kubeAPIAccess: plugin mounts %+v, outrigger args %q", p.VolumeMounts, o.Args)
	}
	if _, ok := byKind(objs, "ServiceAccount")["ServiceAccount "+namespace+"/"+plugin]; ok {
		t.Errorf("without kubeAPIAccess the plugin's account is rendered")
	}
}

func equalRule(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs)
}

// TestRenderPluginOwnIdentityRejects: rbac.extraRules with a plugin but no
// Kubernetes access would grant nothing anyone uses, and a plugin's token
// is one cluster's, not tenant mode's: both stop Helm, saying why.
func TestRenderPluginOwnIdentityRejects(t *testing.T) {
	for _, tt := range []struct{ values, want string }{
		{"plugin: {enabled: true, image: {repository: p}}\nrbac: {extraRules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}]}\n", "they need plugin.kubeAPIAccess"},
		{"plugin: {enabled: true, image: {repository: p}, kubeAPIAccess: true}\ntenants: {enabled: true}\n", "does not go with tenants.enabled"},
	} {
		if _, err := render(t, tt.values); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("values %q: err %v, want one saying %q", tt.values, err, tt.want)
		}
	}
}

package charttest

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRenderProviderExtras: what a provider's own binary needs from the
// chart, its credentials from the environment or a volume, the plugin's
// Kubernetes access and RBAC rules of its own, lands where it belongs.
func TestRenderProviderExtras(t *testing.T) {
	values := `cloudProvider: ""
env:
- name: HCLOUD_TOKEN
  valueFrom: {secretKeyRef: {name: hcloud, key: token}}
envFrom:
- configMapRef: {name: hcloud-settings}
extraVolumes:
- name: creds
  secret: {secretName: cloud-creds}
extraVolumeMounts:
- {name: creds, mountPath: /etc/cloud-creds, readOnly: true}
rbac:
  extraRules:
  - {apiGroups: [""], resources: [configmaps], verbs: [get]}
plugin:
  enabled: true
  image: {repository: example.com/plugin}
  envFrom:
  - secretRef: {name: plugin-token}
  extraVolumeMounts:
  - {name: creds, mountPath: /creds, readOnly: true}
  kubeAPIAccess: true
`
	objs := renderObjects(t, values)
	d := deployment(t, objs)
	spec := d.Spec.Template.Spec
	c := containerNamed(t, spec, "outrigger")
	names := func() (out []string) {
		for _, e := range c.Env {
			out = append(out, e.Name)
		}
		return out
	}()
	if !slices.Equal(names, []string{"POD_IP", "HCLOUD_TOKEN"}) || c.Env[1].ValueFrom == nil || c.Env[1].ValueFrom.SecretKeyRef.Name != "hcloud" {
		t.Errorf("outrigger env %+v, want POD_IP then HCLOUD_TOKEN from the Secret", c.Env)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "hcloud-settings" {
		t.Errorf("outrigger envFrom %+v", c.EnvFrom)
	}
	if m, ok := mountAt(c, "/etc/cloud-creds"); !ok || m.Name != "creds" {
		t.Errorf("outrigger mounts %+v, want creds at /etc/cloud-creds", c.VolumeMounts)
	}
	if v, ok := volumeNamed(spec, "creds"); !ok || v.Secret == nil || v.Secret.SecretName != "cloud-creds" {
		t.Errorf("volumes %+v, want creds from the Secret cloud-creds", spec.Volumes)
	}
	p := containerNamed(t, spec, "plugin")
	if len(p.EnvFrom) != 1 || p.EnvFrom[0].SecretRef == nil || p.EnvFrom[0].SecretRef.Name != "plugin-token" {
		t.Errorf("plugin envFrom %+v", p.EnvFrom)
	}
	if _, ok := mountAt(p, "/creds"); !ok {
		t.Errorf("plugin mounts %+v, want /creds", p.VolumeMounts)
	}
	if m, ok := mountAt(p, "/var/run/secrets/kubernetes.io/serviceaccount"); !ok || m.Name != "plugin-api-access" {
		t.Errorf("plugin mounts %+v, want its own ServiceAccount's token with kubeAPIAccess", p.VolumeMounts)
	}
	// With a plugin, rbac.extraRules are the plugin's account's, not
	// Outrigger's (TestRenderPluginOwnIdentity); without one, Outrigger's.
	if !hasConfigMapGet(clusterRole(t, objs, "system:cloud-controller-manager:plugin").Rules) {
		t.Errorf("the plugin's ClusterRole lacks rbac.extraRules")
	}
	if hasConfigMapGet(clusterRole(t, objs, "system:cloud-controller-manager").Rules) {
		t.Errorf("Outrigger's ClusterRole holds rbac.extraRules meant for the plugin")
	}
	inProcess := renderObjects(t, "cloudProvider: acme\nrbac: {extraRules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}]}\n")
	if role := clusterRole(t, inProcess, "system:cloud-controller-manager"); !hasConfigMapGet(role.Rules) {
		t.Errorf("ClusterRole rules %+v lack rbac.extraRules", role.Rules)
	}

	// Without kubeAPIAccess the plugin has no token.
	objs = renderObjects(t, "plugin: {enabled: true, image: {repository: example.com/plugin}}\n")
	if _, ok := mountAt(containerNamed(t, deployment(t, objs).Spec.Template.Spec, "plugin"), "/var/run/secrets/kubernetes.io/serviceaccount"); ok {
		t.Error("the plugin mounts a token without kubeAPIAccess")
	}
	for _, bad := range []struct{ values, want string }{
		{"cloudProvider: x\nenv: [{value: x}]\n", "name"},
		{"cloudProvider: x\nextraVolumeMounts: [{name: creds}]\n", "mountPath"},
		{"cloudProvider: x\nrbac: {extraRules: [{resources: [pods]}]}\n", "verbs"},
	} {
		if _, err := render(t, bad.values); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("values %q: err %v, want one naming %s", bad.values, err, bad.want)
		}
	}
}

func hasConfigMapGet(rules []rbacv1.PolicyRule) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"configmaps"}) && slices.Equal(r.Verbs, []string{"get"})
	})
}

func clusterRole(t testing.TB, objs []*unstructured.Unstructured, name string) *rbacv1.ClusterRole {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == name {
			return toTyped[rbacv1.ClusterRole](t, o)
		}
	}
	t.Fatalf("no ClusterRole %s", name)
	return nil
}

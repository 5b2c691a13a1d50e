package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// testPodIP stands for the pod's IP the kubelet gives the downward API.
const testPodIP = "198.18.0.10"

// testPodName is the pod name expandEnv gives $(POD_NAME) from metadata.name.
const testPodName = "cloud-controller-manager-7d9f-abcde"

// expandEnv expands $(NAME) in args as the kubelet does, from the
// container's env: literal values, and status.podIP as testPodIP.
func expandEnv(c corev1.Container, args []string) []string {
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			vars[e.Name] = testPodIP
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = testPodName
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		out[i] = a
	}
	return out
}

// containerNamed returns the pod's container of that name.
func containerNamed(t testing.TB, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q in %d containers", name, len(spec.Containers))
	return corev1.Container{}
}

func mountAt(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volumeNamed(spec corev1.PodSpec, name string) (corev1.Volume, bool) {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

func runAsUser(c corev1.Container) string {
	if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil {
		return "unset"
	}
	return fmt.Sprint(*c.SecurityContext.RunAsUser)
}

// TestRenderPlugin checks a provider plugin run as a sidecar: both
// containers share the socket's emptyDir at /run/outrigger and run as one
// uid, Outrigger runs the grpc provider with a cloud-config naming that
// socket, and the plugin serves there with the provider's cloud-config.
func TestRenderPlugin(t *testing.T) {
	const values = `
plugin:
  enabled: true
  image: {repository: registry.example/acme-plugin, tag: v1.2.3}
  args: [--region=west]
  env: [{name: ACME_TOKEN_FILE, value: /etc/outrigger/token}]
  resources: {requests: {cpu: 50m, memory: 64Mi}}
cloudConfig:
  content: |
    region: west
`
	objs := renderObjects(t, values)
	d := deployment(t, objs)
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "outrigger" {
		t.Fatalf("containers %v, want outrigger first and the plugin", containerNames(spec))
	}
	o, p := containerNamed(t, spec, "outrigger"), containerNamed(t, spec, "plugin")
	checkArgsParse(t, o)

	// Outrigger: the grpc provider, its cloud-config from the ConfigMap.
	for _, want := range []string{"--cloud-provider=grpc", "--cloud-config=/etc/outrigger/grpc.yaml"} {
		if !hasArg(o, want) {
			t.Errorf("outrigger args %q lack %s", o.Args, want)
		}
	}
	cm := toTyped[corev1.ConfigMap](t, only(t, objs, "ConfigMap"))
	if cm.Name != "cloud-controller-manager-plugin" || cm.Namespace != namespace {
		t.Errorf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	}
	var cfg plugin.Config
	if err := decodeStrict(cm.Data["grpc.yaml"], &cfg); err != nil {
		t.Fatalf("the grpc provider refuses the chart's grpc.yaml %q: %v", cm.Data["grpc.yaml"], err)
	}
	if cfg.Endpoint != plugin.DefaultEndpoint || cfg.TLS != nil || cfg.PeerUID != nil {
		t.Errorf("grpc.yaml %+v, want endpoint %s only", cfg, plugin.DefaultEndpoint)
	}
	m, ok := mountAt(o, "/etc/outrigger")
	if v, vok := volumeNamed(spec, m.Name); !ok || !vok || v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || !m.ReadOnly {
		t.Errorf("outrigger mounts %+v at /etc/outrigger, want ConfigMap %s read-only", m, cm.Name)
	}

	// The socket's volume: one emptyDir, mounted by both at its directory.
	om, ook := mountAt(o, "/run/outrigger")
	pm, pok := mountAt(p, "/run/outrigger")
	v, vok := volumeNamed(spec, om.Name)
	if !ook || !pok || !vok || om.Name != pm.Name || v.EmptyDir == nil || om.ReadOnly || pm.ReadOnly {
		t.Errorf("socket volume: outrigger mounts %+v, plugin %+v, volume %+v; want one emptyDir, writable, at /run/outrigger in both", om, pm, v)
	}
	if !strings.HasPrefix(plugin.DefaultEndpoint, "unix:///run/outrigger/") {
		t.Errorf("the socket %s is not in the shared volume", plugin.DefaultEndpoint)
	}

	// The plugin: its image, the socket, the provider's cloud-config, then
	// the given args.
	if p.Image != "registry.example/acme-plugin:v1.2.3" || p.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("plugin image %s (%s)", p.Image, p.ImagePullPolicy)
	}
	wantArgs := []string{"--endpoint=" + plugin.DefaultEndpoint, "--cloud-config=/etc/outrigger/cloud.yaml", "--region=west"}
	if !slices.Equal(p.Args, wantArgs) || len(p.Command) != 0 {
		t.Errorf("plugin command %q args %q, want the image's entrypoint with %q", p.Command, p.Args, wantArgs)
	}
	sm, ok := mountAt(p, "/etc/outrigger")
	if sv, svok := volumeNamed(spec, sm.Name); !ok || !svok || sv.Secret == nil || sv.Secret.SecretName != "cloud-controller-manager-cloud-config" || !sm.ReadOnly {
		t.Errorf("plugin mounts %+v at /etc/outrigger, want the cloud-config Secret read-only", sm)
	}
	if len(p.Env) != 1 || p.Env[0].Name != "ACME_TOKEN_FILE" || p.Resources.Requests.Cpu().String() != "50m" {
		t.Errorf("plugin env %+v resources %+v", p.Env, p.Resources)
	}

	// One uid on both ends of the socket, and the hardening kept.
	if runAsUser(o) != "65532" || runAsUser(p) != "65532" {
		t.Errorf("runAsUser: outrigger %s, plugin %s; want 65532 for both", runAsUser(o), runAsUser(p))
	}
	for _, c := range []corev1.Container{o, p} {
		sc := c.SecurityContext
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s securityContext %+v, want read-only root, non-root, no escalation, all capabilities dropped", c.Name, sc)
		}
	}
	if d.Spec.Template.Annotations["checksum/cloud-config"] == "" {
		t.Errorf("no checksum/cloud-config annotation: the plugin reads it once, at start")
	}

	// Only Outrigger holds a token of its ServiceAccount: the plugin's
	// process could otherwise act as the CCM in the cluster.
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false (the plugin gets no token)", spec.AutomountServiceAccountToken)
	}
	tm, ok := mountAt(o, tokenDir)
	tv, vok := volumeNamed(spec, tm.Name)
	if !ok || !vok || !tm.ReadOnly || tv.Projected == nil || len(tv.Projected.Sources) != 3 || tv.Projected.Sources[0].ServiceAccountToken == nil {
		t.Errorf("outrigger's token: mount %+v, volume %+v; want the projected ServiceAccount token, CA and namespace", tm, tv)
	}
	if m, ok := mountAt(p, tokenDir); ok {
		t.Errorf("the plugin mounts a token: %+v", m)
	}
	for _, m := range p.VolumeMounts {
		if m.Name == tm.Name {
			t.Errorf("the plugin mounts the token volume at %s", m.MountPath)
		}
	}
}

// decodeStrict reads YAML into v refusing unknown fields, as the grpc
// provider reads its cloud-config.
func decodeStrict(text string, v any) error {
	j, err := utilyaml.ToJSON([]byte(text))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func containerNames(spec corev1.PodSpec) []string {
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

// TestRenderPluginOptions checks the plugin's other values: a uid given
// once and set on both containers, a command, an image without a tag, no
// cloud-config, and cloudProvider=grpc given explicitly.
func TestRenderPluginOptions(t *testing.T) {
	objs := renderObjects(t, `
cloudProvider: grpc
securityContext: {runAsNonRoot: true, runAsUser: 1000}
plugin:
  enabled: true
  image: {repository: "registry.example/acme-plugin@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", pullPolicy: Always}
  command: [/acme-plugin, serve]
  runAsUser: 1000
  securityContext: {}
`)
	spec := deployment(t, objs).Spec.Template.Spec
	o, p := containerNamed(t, spec, "outrigger"), containerNamed(t, spec, "plugin")
	checkArgsParse(t, o)
	if runAsUser(o) != "1000" || runAsUser(p) != "1000" {
		t.Errorf("runAsUser: outrigger %s, plugin %s; want 1000 for both", runAsUser(o), runAsUser(p))
	}
	if !strings.HasSuffix(p.Image, "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") || p.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("plugin image %s (%s), want the repository as given", p.Image, p.ImagePullPolicy)
	}
	if !slices.Equal(p.Command, []string{"/acme-plugin", "serve"}) || !slices.Equal(p.Args, []string{"--endpoint=" + plugin.DefaultEndpoint}) {
		t.Errorf("plugin command %q args %q", p.Command, p.Args)
	}
	if _, ok := mountAt(p, "/etc/outrigger"); ok || len(byKind(objs, "Secret")) != 0 {
		t.Errorf("no cloudConfig given, yet the plugin mounts /etc/outrigger or a Secret is rendered")
	}
	if !hasArg(o, "--cloud-provider=grpc") || !hasArg(o, "--cloud-config=/etc/outrigger/grpc.yaml") {
		t.Errorf("outrigger args %q", o.Args)
	}
}

// TestRenderPluginRejects checks that bad plugin values stop Helm with an
// error naming them.
func TestRenderPluginRejects(t *testing.T) {
	const on = "plugin: {enabled: true, image: {repository: registry.example/p}}\n"
	tests := []struct {
		name, values string
		want         []string
	}{
		{"no image", "plugin: {enabled: true}\n", []string{"plugin.image.repository is required"}},
		{"another provider", "cloudProvider: sim\n" + on, []string{"plugin.enabled needs cloudProvider grpc", `"sim"`}},
		{"unknown key", "plugin: {enabled: true, sidecar: true}\n", []string{"plugin", "sidecar", "additional properties"}},
		{"unknown image key", "plugin: {image: {name: x}}\n", []string{"plugin", "image", "name"}},
		{"enabled not a boolean", "cloudProvider: sim\nplugin: {enabled: \"yes\"}\n", []string{"enabled", "boolean"}},
		{"args not a list", "plugin: {enabled: true, args: --v=2}\n", []string{"args", "array"}},
		{"args of numbers", "plugin: {args: [2]}\ncloudProvider: sim\n", []string{"args", "string"}},
		{"env without a name", "plugin: {env: [{value: x}]}\ncloudProvider: sim\n", []string{"env", "name"}},
		{"runAsUser negative", "plugin: {runAsUser: -1}\ncloudProvider: sim\n", []string{"runAsUser", "minimum"}},
		{"runAsUser not a number", "plugin: {runAsUser: nobody}\ncloudProvider: sim\n", []string{"runAsUser", "integer"}},
		{"bad pull policy", "plugin: {image: {pullPolicy: Sometimes}}\ncloudProvider: sim\n", []string{"pullPolicy"}},
		{"Outrigger's uid differs", on + "securityContext: {runAsUser: 1000}\n", []string{"securityContext.runAsUser (1000) differs from plugin.runAsUser (65532)"}},
		{"the plugin's uid differs", "plugin: {enabled: true, image: {repository: p}, securityContext: {runAsUser: 0}}\n", []string{"plugin.securityContext.runAsUser (0) differs from plugin.runAsUser (65532)"}},
		{"bind address not an address", "cloudProvider: sim\nbindAddress: pod-ip\n", []string{"bindAddress"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.values)
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			t.Logf("error: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestRenderDefaults checks the defaults docs/install.md explains: the pod
// network and Pod Security "restricted", the secure port bound to the pod's
// IP only (where the probes reach it), no profiling, requests and a memory
// limit.
func TestRenderDefaults(t *testing.T) {
	objs := renderObjects(t, "", "cloudProvider=sim")
	spec := deployment(t, objs).Spec.Template.Spec
	c := container(t, deployment(t, objs))
	if spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirst {
		t.Errorf("hostNetwork %v dnsPolicy %s, want false and ClusterFirst (Pod Security restricted)", spec.HostNetwork, spec.DNSPolicy)
	}
	if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
		t.Errorf("pod securityContext %+v, want non-root 65532:65532 with the RuntimeDefault seccomp profile", sc)
	}
	if !hasArg(c, "--bind-address=$(POD_IP)") || hasArgPrefix(c, "--secure-port") {
		t.Errorf("args %q, want --bind-address=$(POD_IP) and the default secure port", c.Args)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "POD_IP" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("env %+v, want POD_IP from status.podIP", c.Env)
	}
	if got := expandEnv(c, c.Args); !slices.Contains(got, "--bind-address="+testPodIP) {
		t.Errorf("args expanded as the kubelet does: %q, want --bind-address=%s", got, testPodIP)
	}
	// The kubelet probes the pod's IP when a probe names no host: the
	// address bound above.
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "" || p.HTTPGet.Port != intstr.FromString("https") || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v, want HTTPS on the port named https, on the pod's IP (no host)", name, p)
		}
	}
	if !hasArg(c, "--profiling=false") {
		t.Errorf("args %q lack --profiling=false", c.Args)
	}
	if c.Resources.Limits.Cpu().Value() != 0 || c.Resources.Limits.Memory().String() != "1Gi" ||
		c.Resources.Requests.Cpu().String() != "100m" || c.Resources.Requests.Memory().String() != "128Mi" {
		t.Errorf("resources %+v, want requests 100m and 128Mi, a memory limit of 1Gi and no CPU limit", c.Resources)
	}

	for _, tt := range []struct{ value, arg string }{
		{`""`, ""},
		{"0.0.0.0", "--bind-address=0.0.0.0"},
		{"198.18.0.7", "--bind-address=198.18.0.7"},
		{`"2001:db8::7"`, "--bind-address=2001:db8::7"},
	} {
		objs := renderObjects(t, "cloudProvider: sim\nbindAddress: "+tt.value+"\n")
		c := container(t, deployment(t, objs))
		checkArgsParse(t, c)
		if len(c.Env) != 0 {
			t.Errorf("bindAddress %s: env %+v, want none", tt.value, c.Env)
		}
		var got []string
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--bind-address") {
				got = append(got, a)
			}
		}
		if want := slices.DeleteFunc([]string{tt.arg}, func(s string) bool { return s == "" }); !slices.Equal(got, want) {
			t.Errorf("bindAddress %s: %q, want %q", tt.value, got, want)
		}
	}
}

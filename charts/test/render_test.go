package charttest

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outrigger-ccm/outrigger/internal/manager"
)

func toTyped[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("%s: %v", objectKey(o), err)
	}
	return &v
}

func deployment(t testing.TB, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	return toTyped[appsv1.Deployment](t, only(t, objs, "Deployment"))
}

func container(t testing.TB, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("want one container, have %d", n)
	}
	return d.Spec.Template.Spec.Containers[0]
}

// checkArgsParse runs the container's command line through Outrigger's own
// flag set and validation, as the binary does at start: a chart that renders
// a flag the binary refuses would crash-loop.
func checkArgsParse(t testing.TB, c corev1.Container) {
	t.Helper()
	args := append(append([]string{}, c.Command[1:]...), expandEnv(c, c.Args)...)
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Outrigger refuses the chart's arguments %v: %v", args, err)
	}
	if err := opts.Validate(); err != nil {
		t.Errorf("Outrigger's validation refuses the chart's arguments %v: %v", args, err)
	}
}

// checkRBACEquals compares the chart's ServiceAccount and RBAC objects with
// those of deploy/ manifests: the same objects (kind, namespace, name) with
// the same rules, roleRef and subjects. Labels may differ.
func checkRBACEquals(t testing.TB, objs []*unstructured.Unstructured, files ...string) {
	t.Helper()
	kinds := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Namespace"}
	var deployed []*unstructured.Unstructured
	for _, f := range files {
		deployed = append(deployed, deployObjects(t, f)...)
	}
	file := strings.Join(files, ", ")
	got, want := byKind(objs, kinds...), byKind(deployed, kinds...)
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("RBAC objects differ from deploy/%s:\nchart:%s\ndeploy:%s", file, joinLines(keys(got)), joinLines(keys(want)))
	}
	for k, w := range want {
		for _, field := range []string{"rules", "roleRef", "subjects"} {
			gv, wv := got[k].Object[field], w.Object[field]
			if !reflect.DeepEqual(gv, wv) {
				t.Errorf("%s: %s differ from deploy/%s:\nchart:  %v\ndeploy: %v", k, field, file, gv, wv)
			}
		}
	}
}

func hasArg(c corev1.Container, arg string) bool { return slices.Contains(c.Args, arg) }

func hasArgPrefix(c corev1.Container, prefix string) bool {
	return slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, prefix) })
}

// testDigest is an image manifest digest of the right form.
const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRender(t *testing.T) {
	tests := []struct {
		name   string
		values string
		sets   []string
		check  func(t *testing.T, objs []*unstructured.Unstructured)
	}{{
		// The defaults users get with the one required value: what
		// deploy/deployment.yaml and deploy/rbac.yaml deploy.
		name: "defaults",
		sets: []string{"cloudProvider=sim"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := deployment(t, objs)
			if d.Namespace != namespace || d.Name != "cloud-controller-manager" {
				t.Errorf("Deployment is %s/%s, want %s/cloud-controller-manager", d.Namespace, d.Name, namespace)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
				t.Errorf("replicas %v, want 2", d.Spec.Replicas)
			}
			spec := d.Spec.Template.Spec
			c := container(t, d)
			wantArgs := []string{"--cloud-provider=sim", "--leader-elect=true", "--leader-elect-retry-period=1s", "--profiling=false", "--bind-address=$(POD_IP)",
				"--gateway-data-plane-image=outrigger.local/outrigger:0.3.0"}
			if !slices.Equal(c.Args, wantArgs) {
				t.Errorf("args %q, want %q", c.Args, wantArgs)
			}
			if !slices.Equal(c.Command, []string{"/usr/local/bin/outrigger"}) {
				t.Errorf("command %q", c.Command)
			}
			if c.Image != "outrigger.local/outrigger:0.3.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("image %s (%s)", c.Image, c.ImagePullPolicy)
			}
			if spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirst {
				t.Errorf("hostNetwork %v dnsPolicy %s, want false and ClusterFirst", spec.HostNetwork, spec.DNSPolicy)
			}
			if spec.ServiceAccountName != "cloud-controller-manager" || spec.PriorityClassName != "system-cluster-critical" {
				t.Errorf("serviceAccountName %q priorityClassName %q", spec.ServiceAccountName, spec.PriorityClassName)
			}
			// Each deploy/deployment.yaml toleration, exactly.
			ref := deployment(t, deployObjects(t, "deployment.yaml"))
			if !reflect.DeepEqual(spec.Tolerations, ref.Spec.Template.Spec.Tolerations) {
				t.Errorf("tolerations %+v, want deploy/deployment.yaml's %+v", spec.Tolerations, ref.Spec.Template.Spec.Tolerations)
			}
			if !reflect.DeepEqual(spec.SecurityContext, ref.Spec.Template.Spec.SecurityContext) {
				t.Errorf("pod securityContext %+v, want deploy/deployment.yaml's %+v", spec.SecurityContext, ref.Spec.Template.Spec.SecurityContext)
			}
			refC := ref.Spec.Template.Spec.Containers[0]
			if !reflect.DeepEqual(c.SecurityContext, refC.SecurityContext) {
				t.Errorf("securityContext %+v, want %+v", c.SecurityContext, refC.SecurityContext)
			}
			if !reflect.DeepEqual(c.Resources, refC.Resources) {
				t.Errorf("resources %+v, want %+v", c.Resources, refC.Resources)
			}
			if !reflect.DeepEqual(c.LivenessProbe, refC.LivenessProbe) || !reflect.DeepEqual(c.ReadinessProbe, refC.ReadinessProbe) {
				t.Errorf("probes %+v %+v, want %+v %+v", c.LivenessProbe, c.ReadinessProbe, refC.LivenessProbe, refC.ReadinessProbe)
			}
			if len(c.Ports) != 1 || c.Ports[0].Name != "https" || c.Ports[0].ContainerPort != 10258 {
				t.Errorf("ports %+v, want https 10258", c.Ports)
			}
			podLabels := labels.Set(d.Spec.Template.Labels)
			aff := spec.Affinity
			if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatalf("affinity %+v, want one preferred pod anti-affinity term", aff)
			}
			if !reflect.DeepEqual(aff.NodeAffinity, deployment(t, deployObjects(t, "deployment.yaml")).Spec.Template.Spec.Affinity.NodeAffinity) ||
				len(aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
				aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchExpressions[0].Key != "node-role.kubernetes.io/control-plane" {
				t.Errorf("node affinity %+v, want deploy/deployment.yaml's preference for control-plane nodes", aff.NodeAffinity)
			}
			term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
			if term.TopologyKey != "kubernetes.io/hostname" || !labels.SelectorFromSet(term.LabelSelector.MatchLabels).Matches(podLabels) {
				t.Errorf("anti-affinity term %+v does not spread these pods over hostnames", term)
			}
			if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(podLabels) {
				t.Errorf("selector %v does not match pod labels %v", d.Spec.Selector.MatchLabels, podLabels)
			}
			if len(c.VolumeMounts) != 0 || len(spec.Volumes) != 0 || len(byKind(objs, "Secret")) != 0 {
				t.Errorf("no cloudConfig given, yet volumes %+v mounts %+v secrets %v", spec.Volumes, c.VolumeMounts, keys(byKind(objs, "Secret")))
			}

			pdbObj := only(t, objs, "PodDisruptionBudget")
			if pdbObj.GetAPIVersion() != "policy/v1" {
				t.Errorf("PodDisruptionBudget is %s, want policy/v1", pdbObj.GetAPIVersion())
			}
			pdb := toTyped[policyv1.PodDisruptionBudget](t, pdbObj)
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
				t.Errorf("PDB maxUnavailable %v minAvailable %v, want 1 and none", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
			}
			if !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
				t.Errorf("PDB selector %v does not match pod labels %v", pdb.Spec.Selector.MatchLabels, podLabels)
			}
			checkRBACEquals(t, objs, "rbac.yaml", "rbac-gateway.yaml")
		},
	}, {
		name: "cloud config rendered into a Secret",
		values: `
cloudProvider: sim
cloudConfig:
  content: |
    endpoint: http://127.0.0.1:8080
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := deployment(t, objs)
			c := container(t, d)
			if !hasArg(c, "--cloud-config=/etc/outrigger/cloud.yaml") {
				t.Errorf("args %q lack --cloud-config=/etc/outrigger/cloud.yaml", c.Args)
			}
			s := toTyped[corev1.Secret](t, only(t, objs, "Secret"))
			if s.Name != "cloud-controller-manager-cloud-config" || s.Namespace != namespace {
				t.Errorf("Secret %s/%s", s.Namespace, s.Name)
			}
			if got := string(s.Data["cloud.yaml"]); got != "endpoint: http://127.0.0.1:8080\n" {
				t.Errorf("Secret's cloud.yaml is %q", got)
			}
			checkMount(t, d, s.Name)
			if d.Spec.Template.Annotations["checksum/cloud-config"] == "" {
				t.Errorf("no checksum/cloud-config annotation: a changed config would not roll the pods")
			}
		},
	}, {
		name:   "cloud config from an existing Secret",
		values: "cloudProvider: sim\ncloudConfig: {existingSecret: my-cloud, key: config.json}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := deployment(t, objs)
			if !hasArg(container(t, d), "--cloud-config=/etc/outrigger/config.json") {
				t.Errorf("args %q lack --cloud-config=/etc/outrigger/config.json", container(t, d).Args)
			}
			if s := byKind(objs, "Secret"); len(s) != 0 {
				t.Errorf("rendered %v besides the existing Secret", keys(s))
			}
			checkMount(t, d, "my-cloud")
		},
	}, {
		name: "service account credentials",
		sets: []string{"cloudProvider=sim", "useServiceAccountCredentials=true"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			c := container(t, deployment(t, objs))
			if !hasArg(c, "--use-service-account-credentials=true") || !hasArg(c, "--leader-elect=true") {
				t.Errorf("args %q", c.Args)
			}
			checkRBACEquals(t, objs, "rbac-service-account-credentials.yaml", "rbac-gateway.yaml")
		},
	}, {
		// Each Gateway's data plane in its own namespace: the flag, and
		// deploy/rbac-gateway-namespaces.yaml's ClusterRole granting the
		// data plane's kinds in every namespace (in that mode only: the
		// defaults above compare equal without it).
		name: "gateway namespace mode",
		sets: []string{"cloudProvider=sim", "gateway.namespaceMode=gateway"},
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if c := container(t, deployment(t, objs)); !hasArg(c, "--gateway-namespace-mode=gateway") {
				t.Errorf("args %q lack --gateway-namespace-mode=gateway", c.Args)
			}
			checkRBACEquals(t, objs, "rbac.yaml", "rbac-gateway.yaml", "rbac-gateway-namespaces.yaml")
		},
	}, {
		name: "controllers, cluster CIDR, routes, extra args as a map",
		values: `
cloudProvider: sim
controllers: ["*", "-route"]
clusterCIDR: 198.18.64.0/18
allocateNodeCIDRs: true
configureCloudRoutes: false
extraArgs:
  v: 2
  logging-format: json
  --cluster-name: prod
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			c := container(t, deployment(t, objs))
			want := []string{
				"--cloud-provider=sim", "--leader-elect=true", "--leader-elect-retry-period=1s", "--profiling=false", "--controllers=*,-route",
				"--cluster-cidr=198.18.64.0/18", "--allocate-node-cidrs=true", "--configure-cloud-routes=false", "--bind-address=$(POD_IP)",
				"--gateway-data-plane-image=outrigger.local/outrigger:0.3.0",
				// A map's keys in order, after the chart's own flags.
				"--cluster-name=prod", "--logging-format=json", "--v=2",
			}
			if !slices.Equal(c.Args, want) {
				t.Errorf("args%s\nwant%s", joinLines(c.Args), joinLines(want))
			}
		},
	}, {
		name:   "extra args as a list, kept in order",
		values: "cloudProvider: sim\nextraArgs: [--v=4, --concurrent-service-syncs=8, --configure-cloud-routes=true]\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			c := container(t, deployment(t, objs))
			want := []string{"--cloud-provider=sim", "--leader-elect=true", "--leader-elect-retry-period=1s", "--profiling=false", "--bind-address=$(POD_IP)",
				"--gateway-data-plane-image=outrigger.local/outrigger:0.3.0", "--v=4", "--concurrent-service-syncs=8", "--configure-cloud-routes=true"}
			if !slices.Equal(c.Args, want) {
				t.Errorf("args%s\nwant%s", joinLines(c.Args), joinLines(want))
			}
		},
	}, {
		name: "scheduling and network overrides",
		values: `
cloudProvider: sim
replicaCount: 3
hostNetwork: false
priorityClassName: ""
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
tolerations: [{operator: Exists}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]
podDisruptionBudget: {minAvailable: 2}
securePort: 10300
image: {repository: registry.example/ccm, tag: v9, pullPolicy: Always}
command: [/usr/local/bin/cloud-controller-manager]
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := deployment(t, objs)
			spec := d.Spec.Template.Spec
			if *d.Spec.Replicas != 3 || spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirst || spec.PriorityClassName != "" {
				t.Errorf("replicas %d hostNetwork %v dnsPolicy %s priorityClassName %q", *d.Spec.Replicas, spec.HostNetwork, spec.DNSPolicy, spec.PriorityClassName)
			}
			if _, ok := spec.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok || len(spec.NodeSelector) != 1 {
				t.Errorf("nodeSelector %v", spec.NodeSelector)
			}
			if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
				t.Errorf("tolerations %+v, want the given list only", spec.Tolerations)
			}
			if spec.Affinity.PodAntiAffinity != nil || spec.Affinity.NodeAffinity == nil {
				t.Errorf("affinity %+v, want the given one only", spec.Affinity)
			}
			c := container(t, d)
			if c.Image != "registry.example/ccm:v9" || c.ImagePullPolicy != corev1.PullAlways || c.Command[0] != "/usr/local/bin/cloud-controller-manager" {
				t.Errorf("image %s (%s) command %q", c.Image, c.ImagePullPolicy, c.Command)
			}
			if !hasArg(c, "--secure-port=10300") || c.Ports[0].ContainerPort != 10300 {
				t.Errorf("args %q ports %+v, want the secure port 10300 on both", c.Args, c.Ports)
			}
			pdb := toTyped[policyv1.PodDisruptionBudget](t, only(t, objs, "PodDisruptionBudget"))
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.MaxUnavailable != nil {
				t.Errorf("PDB minAvailable %v maxUnavailable %v, want 2 and none", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
			}
		},
	}, {
		name: "nothing but the Deployment",
		values: `
cloudProvider: sim
rbac: {create: false}
serviceAccount: {create: false, name: existing-ccm}
podDisruptionBudget: {enabled: false}
`,
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, objectKey(o))
			}
			if len(objs) != 1 || objs[0].GetKind() != "Deployment" {
				t.Errorf("rendered%s\nwant the Deployment only", joinLines(kinds))
			}
			if sa := deployment(t, objs).Spec.Template.Spec.ServiceAccountName; sa != "existing-ccm" {
				t.Errorf("serviceAccountName %q, want existing-ccm", sa)
			}
		},
	}, {
		// A released chart: image.digest set, the image a release
		// verification checked is what runs, by digest with the tag left
		// out, in every place the chart names Outrigger's own image.
		name:   "image by digest",
		values: "cloudProvider: local\ncloudConfig: {content: \"dataPlane: nodes\"}\nlocalLoadBalancer: {enabled: true}\nimage: {tag: v9, digest: " + testDigest + "}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			want := "outrigger.local/outrigger@" + testDigest
			c := container(t, deployment(t, objs))
			if c.Image != want {
				t.Errorf("image %s, want %s", c.Image, want)
			}
			if !hasArg(c, "--gateway-data-plane-image="+want) {
				t.Errorf("args %q, want --gateway-data-plane-image=%s", c.Args, want)
			}
			for k, ds := range byKind(objs, "DaemonSet") {
				cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
				if img, _ := cs[0].(map[string]any)["image"].(string); img != want {
					t.Errorf("%s runs %s, want %s", k, img, want)
				}
			}
		},
	}, {
		// deploy/local-lb.yaml's objects, with the chart's Secret.
		name:   "localLoadBalancer",
		values: "cloudProvider: local\ncloudConfig: {content: \"dataPlane: nodes\"}\nlocalLoadBalancer: {enabled: true}\n",
		check: func(t *testing.T, objs []*unstructured.Unstructured) {
			want := deployObjects(t, "local-lb.yaml")
			for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"} {
				got := byKind(objs, kind)
				for k := range byKind(want, kind) {
					if got[k] == nil {
						t.Errorf("%s missing: chart has %v", k, keys(got))
					}
				}
			}
			for k, w := range byKind(want, "ClusterRole") {
				if g := byKind(objs, "ClusterRole")[k]; g == nil || !equality.Semantic.DeepEqual(g.Object["rules"], w.Object["rules"]) {
					t.Errorf("ClusterRole %s rules differ from deploy/local-lb.yaml", k)
				}
			}
			var got, ref appsv1.DaemonSet
			for _, pair := range []struct {
				from map[string]*unstructured.Unstructured
				into *appsv1.DaemonSet
			}{{byKind(objs, "DaemonSet"), &got}, {byKind(want, "DaemonSet"), &ref}} {
				for _, u := range pair.from {
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pair.into); err != nil {
						t.Fatal(err)
					}
				}
			}
			gs, rs := got.Spec.Template.Spec, ref.Spec.Template.Spec
			if !gs.HostNetwork || len(gs.Containers) != 1 {
				t.Fatalf("DaemonSet pod spec %+v: want hostNetwork and one container", gs)
			}
			gc, rc := gs.Containers[0], rs.Containers[0]
			if !slices.Equal(gc.Command, rc.Command) || !slices.Equal(gc.Args, rc.Args) || !equality.Semantic.DeepEqual(gc.SecurityContext, rc.SecurityContext) || !equality.Semantic.DeepEqual(gc.Env, rc.Env) {
				t.Errorf("container %+v\nwant deploy/local-lb.yaml's %+v", gc, rc)
			}
			if gc.Image != "outrigger.local/outrigger:0.3.0" {
				t.Errorf("image %s, want Outrigger's own", gc.Image)
			}
			if v := gs.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "cloud-controller-manager-cloud-config" {
				t.Errorf("volumes %+v, want the chart's cloud-config Secret", v)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := renderObjects(t, tt.values, tt.sets...)
			checkArgsParse(t, container(t, deployment(t, objs)))
			tt.check(t, objs)
		})
	}
}

func checkMount(t testing.TB, d *appsv1.Deployment, secret string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != secret {
		t.Fatalf("volumes %+v, want Secret %s", spec.Volumes, secret)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/outrigger" || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != spec.Volumes[0].Name {
		t.Errorf("volumeMounts %+v, want %s read-only at /etc/outrigger", c.VolumeMounts, spec.Volumes[0].Name)
	}
}

// TestRenderRejects checks that bad values stop `helm template` and `helm
// install` before anything reaches the cluster, with an error naming the
// value.
func TestRenderRejects(t *testing.T) {
	tests := []struct {
		name   string
		values string
		sets   []string
		want   []string
	}{
		{name: "no cloud provider", want: []string{"cloudProvider is required"}},
		{name: "unknown top-level key", values: "cloudProvider: sim\nreplicas: 3\n", want: []string{"replicas", "additional properties"}},
		{name: "unknown nested key", values: "cloudProvider: sim\nimage: {repo: x}\n", want: []string{"image", "repo"}},
		{name: "replicas not a number", sets: []string{"cloudProvider=sim", "replicaCount=two"}, want: []string{"replicaCount", "integer"}},
		{name: "hostNetwork not a boolean", values: "cloudProvider: sim\nhostNetwork: \"yes\"\n", want: []string{"hostNetwork", "boolean"}},
		{name: "cloudProvider not a string", values: "cloudProvider: [sim]\n", want: []string{"cloudProvider", "string"}},
		{name: "extraArgs neither map nor list", values: "cloudProvider: sim\nextraArgs: --v=2\n", want: []string{"extraArgs"}},
		{name: "extraArgs map of lists", values: "cloudProvider: sim\nextraArgs: {v: [2]}\n", want: []string{"extraArgs"}},
		{name: "digest not sha256:<64 hex>", sets: []string{"cloudProvider=sim", "image.digest=latest"}, want: []string{"digest"}},
		{name: "bad pull policy", sets: []string{"cloudProvider=sim", "image.pullPolicy=Sometimes"}, want: []string{"pullPolicy"}},
		{name: "bad gateway namespace mode", sets: []string{"cloudProvider=sim", "gateway.namespaceMode=per-gateway"}, want: []string{"namespaceMode"}},
		{name: "local load balancer with another provider", values: "cloudProvider: sim\nlocalLoadBalancer: {enabled: true}\n", want: []string{"needs cloudProvider=local"}},
		{name: "local load balancer without a cloud-config", values: "cloudProvider: local\nlocalLoadBalancer: {enabled: true}\n", want: []string{"VIP pool"}},
		{name: "both cloud config sources", values: "cloudProvider: sim\ncloudConfig: {content: x, existingSecret: mine}\n", want: []string{"content or existingSecret, not both"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.values, tt.sets...)
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

// TestNotes checks the text helm prints after install.
func TestNotes(t *testing.T) {
	rel, err := render(t, "", "cloudProvider=sim")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kube-system/cloud-controller-manager", "rollout status deployment/cloud-controller-manager"} {
		if !strings.Contains(rel.Info.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, rel.Info.Notes)
		}
	}
}

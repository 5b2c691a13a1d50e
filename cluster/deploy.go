package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/deploy"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/version"
)

// OutriggerImage is the name `make image` gives Outrigger's image: tagged
// with its version, as the chart's default image is.
const OutriggerImage = "outrigger.local/outrigger:" + version.Version

// imagePlaceholder is the image the manifests in deploy/ name, for users to
// replace.
const imagePlaceholder = "REGISTRY/outrigger:VERSION"

// CloudConfig is the local provider's cloud-config in the cluster: VIPs from
// VIPPool, served by the nodes' kube-proxy, to which the harness's router
// forwards them (router.go); machine states from the harness's instance
// API.
var CloudConfig = fmt.Sprintf("pool: %s\ndataPlane: nodes\ninstances:\n  url: http://%s:%d\n", VIPPool, BridgeIP, InstancesPort)

// cloudConfigSecret is the Secret deploy/deployment.yaml mounts the
// cloud-config from.
const cloudConfigSecret = "outrigger-cloud-config"

// deployOutrigger deploys Outrigger as a user does: the manifests of
// deploy/ (ServiceAccount and least-privilege RBAC, the Gateway API's
// CRDs and the gateway-controller's RBAC, the two-replica
// Deployment with leader election and its PodDisruptionBudget), with only
// the image, the provider and the cloud-config Secret filled in (in a
// hybrid cluster: the providers file and both cloud-configs, hybrid.go).
// It waits for both replicas to be ready. deploy/local-lb.yaml (announcing
// VIPs on a shared L2 segment by ARP) is not used: this cluster's network
// routes VIPs as a cloud's does (router.go).
func (c *Cluster) deployOutrigger(ctx context.Context) error {
	cl, err := client.New(c.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	// The Gateway API's CRDs, as a cluster offering Gateways has them:
	// the gateway-controller serves them, each Gateway's data plane a
	// Deployment of Outrigger's image.
	channel := c.opts.GatewayAPIChannel
	if channel == "" {
		channel = gatewayapi.Standard
	}
	if err := gatewayapi.InstallChannel(ctx, c.Config, channel); err != nil {
		return err
	}
	files, gatewayArgs := deployManifests(c.opts.GatewayNamespaceMode)
	var objs []client.Object
	for _, file := range files {
		data, err := deploy.Manifests.ReadFile(file)
		if err != nil {
			return err
		}
		decoded, err := decodeManifests(data)
		if err != nil {
			return fmt.Errorf("deploy/%s: %w", file, err)
		}
		objs = append(objs, decoded...)
	}
	dir := ""
	for _, o := range objs {
		var spec *corev1.PodSpec
		switch o := o.(type) {
		case *appsv1.Deployment:
			spec = &o.Spec.Template.Spec
		case *appsv1.DaemonSet:
			spec = &o.Spec.Template.Spec
		}
		if spec == nil {
			continue
		}
		for i := range spec.Containers {
			ct := &spec.Containers[i]
			if ct.Image != imagePlaceholder {
				continue
			}
			ct.Image = c.opts.OutriggerImageName
			ct.ImagePullPolicy = corev1.PullNever
			if d := secretMountPath(spec, ct, cloudConfigSecret); d != "" {
				dir = d
			}
			ct.Args = append(append(c.outriggerArgs(ct.Args, dir), "--gateway-data-plane-image="+c.opts.OutriggerImageName), gatewayArgs...)
		}
	}
	if dir == "" {
		return fmt.Errorf("deploy/deployment.yaml mounts no Secret %s", cloudConfigSecret)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cloudConfigSecret, Namespace: "kube-system"},
		StringData: c.cloudConfigData(dir),
	}
	for _, o := range append([]client.Object{secret}, objs...) {
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	err = c.waitUntil(ctx, 2*time.Minute, "Outrigger's Deployment to be ready", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cloud-controller-manager"}, &d); err != nil {
			return false, nil
		}
		return d.Status.ReadyReplicas == *d.Spec.Replicas, c.anyExited()
	})
	if err != nil {
		// The pods' logs go with the cluster: say here why they failed.
		return fmt.Errorf("%w%s", err, c.logTails(ctx, "kube-system", "cloud-controller-manager", 20))
	}
	return nil
}

// deployManifests are the files of deploy/ a user applies for the
// gateway namespace mode, and the flags Outrigger then takes beyond
// deploy/deployment.yaml's.
func deployManifests(mode gateway.NamespaceMode) (files, args []string) {
	files = []string{"rbac.yaml", "rbac-gateway.yaml", "deployment.yaml"}
	if mode == gateway.NamespaceGateway {
		// Each Gateway's data plane in its own namespace: the rights to
		// make it there.
		files = append(files, "rbac-gateway-namespaces.yaml")
		args = append(args, "--gateway-namespace-mode="+string(gateway.NamespaceGateway))
	}
	return files, args
}

// logTails are the last lines of the logs of a Deployment's pods (of the
// container's previous run, when it restarted), for an error message.
func (c *Cluster) logTails(ctx context.Context, namespace, deployment string, lines int64) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	d, err := c.Client.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	pods, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range pods.Items {
		previous := len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > 0
		out, err := c.Client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous, TailLines: &lines}).DoRaw(ctx)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n--- pod %s/%s (previous run: %v), its last %d lines:\n%s", namespace, p.Name, previous, lines, out)
	}
	return b.String()
}

// secretMountPath is where the container mounts the Secret named secret.
func secretMountPath(spec *corev1.PodSpec, ct *corev1.Container, secret string) string {
	for _, v := range spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		for _, m := range ct.VolumeMounts {
			if m.Name == v.Name {
				return m.MountPath
			}
		}
	}
	return ""
}

// decodeManifests decodes a multi-document YAML file into typed objects.
func decodeManifests(data []byte) ([]client.Object, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []client.Object
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(strings.TrimSpace(string(raw.Raw))) == 0 || string(raw.Raw) == "null" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			return nil, err
		}
		co, ok := obj.(client.Object)
		if !ok {
			return nil, fmt.Errorf("%T is not an object", obj)
		}
		out = append(out, co)
	}
}

package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// writeConfig stores the data plane's programming in the Gateway's Secret.
func (r *reconciler) writeConfig(ctx context.Context, gw *gwv1.Gateway, data []byte) error {
	key := r.key(gw)
	var s corev1.Secret
	err := r.own.Get(ctx, key, &s)
	switch {
	case apierrors.IsNotFound(err):
		s = corev1.Secret{
			ObjectMeta: r.ownedMeta(gw, false),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{ConfigKey: data},
		}
		if err := r.client.Create(ctx, &s); err != nil {
			return fmt.Errorf("creating data plane Secret %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading data plane Secret %s: %w", key, err)
	}
	if !owned(&s, gw) {
		return fmt.Errorf("secret %s is not Outrigger's for this Gateway (UID %s); not touching it", key, gw.UID)
	}
	if bytes.Equal(s.Data[ConfigKey], data) {
		return nil
	}
	s.Data = map[string][]byte{ConfigKey: data}
	if err := r.client.Update(ctx, &s); err != nil {
		return fmt.Errorf("updating data plane Secret %s: %w", key, err)
	}
	return nil
}

// key is where the Gateway's data plane objects are.
func (r *reconciler) key(gw *gwv1.Gateway) types.NamespacedName {
	return types.NamespacedName{Namespace: r.opts.dataPlaneNamespace(gw), Name: DataPlaneName(gw.Namespace, gw.Name)}
}

// ownedMeta is the metadata of an object made for gw: in the data plane
// namespace, labeled with the Gateway's name, namespace and UID (owner
// references cannot cross namespaces), and with the Gateway API's own
// gateway-name label, by which users and the conformance suite find what
// an implementation made for a Gateway. withInfrastructure adds the
// labels and annotations of spec.infrastructure, which the specification
// asks to carry to what is made for the Gateway (and through which a
// user gives a provider its load balancer annotations).
func (r *reconciler) ownedMeta(gw *gwv1.Gateway, withInfrastructure bool) metav1.ObjectMeta {
	labels := map[string]string{}
	annotations := map[string]string{}
	if inf := gw.Spec.Infrastructure; inf != nil && withInfrastructure {
		for k, v := range inf.Labels {
			labels[string(k)] = string(v)
		}
		for k, v := range inf.Annotations {
			annotations[string(k)] = string(v)
		}
	}
	maps.Copy(labels, r.selector(gw))
	labels[GatewayLabel], labels[GatewayNamespaceLabel] = gw.Name, gw.Namespace
	labels[gwv1.GatewayNameLabelKey] = gw.Name
	key := r.key(gw)
	return metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels, Annotations: annotations}
}

// selector picks the Gateway's data plane pods.
func (r *reconciler) selector(gw *gwv1.Gateway) map[string]string {
	return map[string]string{managedByLabel: managedBy, GatewayUIDLabel: string(gw.UID)}
}

// owned says whether an object was made by Outrigger for this very
// Gateway: its UID, not its name.
func owned(o metav1.Object, gw *gwv1.Gateway) bool {
	return o.GetLabels()[GatewayUIDLabel] == string(gw.UID) && o.GetLabels()[managedByLabel] == managedBy
}

// ensureService keeps the load balancer Service fronting the data plane:
// its ports are the listeners', its class the provider's, its annotations
// those of spec.infrastructure (how a user passes provider options) with
// the provider's PROXY protocol one when the parameters ask for it
// (proxyprotocol.go), its externalTrafficPolicy the parameters'.
func (r *reconciler) ensureService(ctx context.Context, gw *gwv1.Gateway, ports []corev1.ServicePort, params parameters) (*corev1.Service, error) {
	key := r.key(gw)
	var cur corev1.Service
	err := r.client.Get(ctx, key, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Service %s: %w", key, err)
	}
	exists := err == nil
	if exists && !owned(&cur, gw) {
		return nil, fmt.Errorf("service %s exists and is not Outrigger's for this Gateway; not touching it", key)
	}
	if len(ports) == 0 {
		// No valid listener: nothing to balance.
		if exists {
			if err := r.client.Delete(ctx, &cur); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("deleting Service %s: %w", key, err)
			}
		}
		return nil, nil
	}
	meta := r.ownedMeta(gw, true)
	var removeAnnotations []string
	meta.Annotations, removeAnnotations = serviceAnnotations(r.opts.ProviderName, params.proxyProtocol(), meta.Annotations)
	want := corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Ports:    ports,
			Selector: r.selector(gw),
			// Always given, the API server's default (Cluster) included,
			// so that the Service read back equals what is wanted.
			ExternalTrafficPolicy: params.externalTrafficPolicy,
		},
	}
	if r.opts.LoadBalancerClass != "" {
		want.Spec.LoadBalancerClass = ptrTo(r.opts.LoadBalancerClass)
	}
	if req := requestedAddresses(gw); len(req) == 1 && net.ParseIP(req[0]) != nil {
		want.Spec.LoadBalancerIP = req[0] //nolint:staticcheck // how providers take a requested address
	}
	if !exists {
		if err := r.client.Create(ctx, &want); err != nil {
			return nil, fmt.Errorf("creating Service %s: %w", key, err)
		}
		return &want, nil
	}
	upd := cur.DeepCopy()
	// Node ports the API server allocated stay.
	for i := range want.Spec.Ports {
		for _, p := range cur.Spec.Ports {
			if p.Port == want.Spec.Ports[i].Port && p.Protocol == want.Spec.Ports[i].Protocol {
				want.Spec.Ports[i].NodePort = p.NodePort
			}
		}
	}
	upd.Spec.Ports = want.Spec.Ports
	upd.Spec.Selector = want.Spec.Selector
	upd.Spec.ExternalTrafficPolicy = want.Spec.ExternalTrafficPolicy
	upd.Spec.LoadBalancerIP = want.Spec.LoadBalancerIP //nolint:staticcheck // as above
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	maps.Copy(upd.Annotations, want.Annotations)
	for _, k := range removeAnnotations {
		delete(upd.Annotations, k)
	}
	if equality.Semantic.DeepEqual(upd.Spec, cur.Spec) && equality.Semantic.DeepEqual(upd.ObjectMeta, cur.ObjectMeta) {
		return &cur, nil
	}
	if err := r.client.Update(ctx, upd); err != nil {
		return nil, fmt.Errorf("updating Service %s: %w", key, err)
	}
	return upd, nil
}

// deleteDataPlane deletes what Outrigger made for a Gateway's data plane:
// the load balancer's Service first, which its own finalizer holds until
// the cloud's load balancer is gone, then the Deployment and the Secret.
// It says whether they are all gone.
func (r *reconciler) deleteDataPlane(ctx context.Context, gw *gwv1.Gateway) (bool, error) {
	key := r.key(gw)
	var svc corev1.Service
	switch err := r.client.Get(ctx, key, &svc); {
	case err == nil && owned(&svc, gw):
		if svc.DeletionTimestamp.IsZero() {
			if err := r.client.Delete(ctx, &svc); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deleting Service %s: %w", key, err)
			}
		}
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Secret{}, &policyv1.PodDisruptionBudget{}, &rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}} {
		if err := r.own.Get(ctx, key, o); err != nil || !owned(o, gw) {
			continue
		}
		if err := r.client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting %T %s: %w", o, key, err)
		}
	}
	return true, nil
}

// ensureDataPlane keeps the Gateway's data plane Deployment (when an image
// is configured) and says whether it is available.
func (r *reconciler) ensureDataPlane(ctx context.Context, gw *gwv1.Gateway, ports []corev1.ServicePort, params parameters) (bool, error) {
	if r.opts.DataPlaneImage == "" {
		return true, nil
	}
	key := r.key(gw)
	want := r.deployment(gw, ports, params.replicasFor(nil))
	var cur appsv1.Deployment
	switch err := r.own.Get(ctx, key, &cur); {
	case apierrors.IsNotFound(err):
		if err := r.ensureCompanions(ctx, gw, *want.Spec.Replicas); err != nil {
			return false, err
		}
		if err := r.client.Create(ctx, want); err != nil {
			return false, fmt.Errorf("creating data plane Deployment %s: %w", key, err)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading data plane Deployment %s: %w", key, err)
	}
	if !owned(&cur, gw) {
		return false, fmt.Errorf("deployment %s is not Outrigger's for this Gateway (UID %s); not touching it", key, gw.UID)
	}
	// What the API server defaults in the template makes it differ from
	// what was asked; the hash of what was asked tells a change.
	replicas := params.replicasFor(cur.Spec.Replicas)
	if cur.Annotations[templateHashAnnotation] != want.Annotations[templateHashAnnotation] || !maps.Equal(want.Labels, cur.Labels) ||
		replicas != ptrValue(cur.Spec.Replicas) {
		if err := r.ensureCompanions(ctx, gw, replicas); err != nil {
			return false, err
		}
		upd := cur.DeepCopy()
		upd.Labels = want.Labels
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		upd.Annotations[templateHashAnnotation] = want.Annotations[templateHashAnnotation]
		upd.Spec.Template = want.Spec.Template
		upd.Spec.Strategy = want.Spec.Strategy
		upd.Spec.Replicas = ptrTo(replicas)
		if err := r.client.Update(ctx, upd); err != nil {
			return false, fmt.Errorf("updating data plane Deployment %s: %w", key, err)
		}
		return false, nil
	}
	return cur.Status.ObservedGeneration >= cur.Generation && cur.Status.AvailableReplicas > 0, nil
}

// deployment is the data plane's Deployment: Outrigger's own image running
// `outrigger gateway-dataplane`, under Pod Security "restricted" (listeners
// below 1024 through the namespaced sysctl that allows them, not a
// capability).
func (r *reconciler) deployment(gw *gwv1.Gateway, ports []corev1.ServicePort, replicas int32) *appsv1.Deployment {
	meta := r.ownedMeta(gw, true)
	podLabels := maps.Clone(meta.Labels)
	var cports []corev1.ContainerPort
	for _, p := range ports {
		cports = append(cports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: p.Protocol})
	}
	// The health port serves /metrics: named, a PodMonitor (the chart's) scrapes it by name.
	cports = append(cports, corev1.ContainerPort{Name: "metrics", ContainerPort: dataplane.HealthPort, Protocol: corev1.ProtocolTCP})
	d := &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			// Two pods by default, spread over nodes, replaced one at a
			// time without lowering the count: a node drain, a crash or
			// a rollout leaves one serving (and the budget keeps it).
			Replicas: ptrTo(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: r.selector(gw)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptrTo(intstr.FromInt32(0)), MaxSurge: ptrTo(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: meta.Annotations},
				Spec: corev1.PodSpec{
					ServiceAccountName: DataPlaneName(gw.Namespace, gw.Name),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: r.selector(gw)},
					}},
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptrTo(true),
						RunAsUser:      ptrTo(int64(65532)),
						RunAsGroup:     ptrTo(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
					},
					Containers: []corev1.Container{{
						Name:  "dataplane",
						Image: r.opts.DataPlaneImage,
						Args:  []string{"gateway-dataplane", "--namespace=" + meta.Namespace, "--secret=" + meta.Name},
						Ports: cports,
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(dataplane.HealthPort)}},
							PeriodSeconds: 2,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(dataplane.HealthPort)}},
							PeriodSeconds: 10,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptrTo(false),
							ReadOnlyRootFilesystem:   ptrTo(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						// The data plane sizes its connection limit and its
						// garbage collector to the container's memory limit.
						Env: []corev1.EnvVar{{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{
							ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "dataplane", Resource: "limits.memory"},
						}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
					}},
				},
			},
		},
	}
	template, _ := json.Marshal(d.Spec.Template)
	sum := sha256.Sum256(template)
	d.Annotations = maps.Clone(d.Annotations)
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[templateHashAnnotation] = hex.EncodeToString(sum[:8])
	return d
}

// replicasFor is how many data plane pods a Deployment of cur replicas
// (nil: none yet) should have: those the parameters give, exactly; without
// them at least defaultReplicas, more (made by hand, or an autoscaler)
// kept.
func (p parameters) replicasFor(cur *int32) int32 {
	if p.replicas != nil {
		return *p.replicas
	}
	return max(defaultReplicas, ptrValue(cur))
}

// ptrValue is what p points to, or zero.
func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

package benchenv

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// Initialized reports whether a CCM is done with a node: the uninitialized
// taint gone and the cloud's addresses set (a kubelet registers with its host
// name only). Upstream removes the taint before it writes the addresses;
// counting the taint alone would stop its clock before it is done. With
// routed, also both pod CIDRs and its routes (NetworkUnavailable=False).
func Initialized(n *corev1.Node, routed bool) bool {
	done := !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider }) &&
		slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Type == corev1.NodeInternalIP })
	if routed {
		done = done && len(n.Spec.PodCIDRs) == 2 && slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionFalse && c.Reason == "RouteCreated"
		})
	}
	return done
}

// WatchInitialized sends on the channel once per node that becomes
// Initialized, from a watch: polling thousands of nodes would load the API
// server the benchmark measures.
func WatchInitialized(ctx context.Context, client kubernetes.Interface, routed bool) (<-chan struct{}, func(), error) {
	out := make(chan struct{}, 100000)
	seen := map[string]bool{}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	check := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || seen[n.Name] {
			return
		}
		if Initialized(n, routed) {
			seen[n.Name] = true
			out <- struct{}{}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
	}); err != nil {
		return nil, nil, err
	}
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		close(stop)
		return nil, nil, fmt.Errorf("node informer did not sync")
	}
	return out, func() { close(stop); factory.Shutdown() }, nil
}

// WatchIngress counts Services that have an ingress, from a watch.
func WatchIngress(ctx context.Context, client kubernetes.Interface, count *atomic.Int64) (func(), error) {
	seen := map[string]bool{}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Services().Informer()
	check := func(obj any) {
		s, ok := obj.(*corev1.Service)
		if !ok || seen[s.Name] || len(s.Status.LoadBalancer.Ingress) == 0 || !slices.Contains([]corev1.ServiceType{corev1.ServiceTypeLoadBalancer}, s.Spec.Type) {
			return
		}
		seen[s.Name] = true
		count.Add(1)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: check, UpdateFunc: func(_, o any) { check(o) }}); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		close(stop)
		return nil, fmt.Errorf("service informer did not sync")
	}
	return func() { close(stop); factory.Shutdown() }, nil
}

// LoadBalancerService is a type LoadBalancer Service in the default
// namespace, one TCP port.
func LoadBalancerService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "bench"},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

package chaos

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

func (h *harness) runWorkload(ctx context.Context, steps []Step) {
	for _, s := range steps {
		if !h.at(ctx, s.At) {
			return
		}
		err := h.do(ctx, s)
		h.report.workload(s.Kind, err)
		if err != nil {
			h.logf("workload %s: %v", s.Kind, err)
		}
	}
}

func (h *harness) do(ctx context.Context, s Step) error {
	switch s.Kind {
	case NodeJoin:
		return h.joinNode()
	case NodeRemove:
		nodes := h.liveNodes()
		if len(nodes) <= 1 {
			return nil
		}
		// A node leaves: its instance is terminated. The kubelet stops
		// reporting, and the lifecycle controller must delete the Node.
		_, err := h.cloud.SetState(nodes[int(s.Pick)%len(nodes)].ID, simcloud.StateTerminated)
		return err
	case ServiceCreate:
		return h.createService(ctx, s.Pick)
	case ServiceDelete:
		name, ok := h.pickService(s.Pick)
		if !ok {
			return nil
		}
		h.forgetService(name)
		return h.client.CoreV1().Services(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	case ServicePorts, ServiceETP, ServiceAnnot, ServiceType:
		name, ok := h.pickService(s.Pick)
		if !ok {
			return nil
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := h.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(svc, s.Kind, s.Pick)
			_, err = h.client.CoreV1().Services(namespace).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		})
	}
	return fmt.Errorf("unknown workload step %q", s.Kind)
}

// nodePrefix starts the name of the first cluster's instances and Nodes.
const nodePrefix = "chaos-node-"

func (h *harness) joinNode() error {
	h.mu.Lock()
	h.nextNode++
	name := fmt.Sprintf("%s%d", nodePrefix, h.nextNode)
	h.mu.Unlock()
	_, err := h.cloud.Create(simcloud.CreateRequest{Name: name})
	return err
}

func (h *harness) createService(ctx context.Context, pick uint32) error {
	h.mu.Lock()
	h.nextSvc++
	name := fmt.Sprintf("svc-%d", h.nextSvc)
	h.mu.Unlock()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    ports(pick),
		},
	}
	if pick%2 == 0 {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if pick%7 == 3 {
		svc.Spec.LoadBalancerClass = ptr.To(foreignClass)
	}
	created := time.Now()
	if _, err := h.client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	h.mu.Lock()
	h.services = append(h.services, name)
	if svc.Spec.LoadBalancerClass == nil {
		h.created[name] = created
		h.hangCreated(name, created)
	} else if h.cfg.Shared {
		h.createdForeign[name] = created
	}
	h.mu.Unlock()
	return nil
}

// ports are one to three TCP or UDP ports, chosen by pick.
func ports(pick uint32) []corev1.ServicePort {
	all := []int32{80, 443, 8080, 8443, 9000}
	n := 1 + int(pick/3)%3
	var out []corev1.ServicePort
	for i := range n {
		p := all[(int(pick>>4)+i)%len(all)]
		proto := corev1.ProtocolTCP
		if (pick>>8+uint32(i))%4 == 0 {
			proto = corev1.ProtocolUDP
		}
		out = append(out, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, Protocol: proto, TargetPort: intstr.FromInt32(p + 1)})
	}
	return out
}

// mutate changes one aspect of a Service, as its owner would.
func mutate(svc *corev1.Service, kind string, pick uint32) {
	switch kind {
	case ServicePorts:
		// Keep the node ports of ports that stay, as kubectl apply does.
		old := map[string]int32{}
		for _, p := range svc.Spec.Ports {
			old[p.Name] = p.NodePort
		}
		svc.Spec.Ports = ports(pick >> 3)
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = old[svc.Spec.Ports[i].Name]
		}
	case ServiceETP:
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return
		}
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			svc.Spec.HealthCheckNodePort = 0
		} else {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	case ServiceAnnot:
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations["chaos.outrigger.dev/revision"] = fmt.Sprint(pick)
	case ServiceType:
		// The class of a LoadBalancer Service cannot change; it changes on
		// the way back from ClusterIP. Outrigger must delete the load
		// balancer and its finalizer on the way out.
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			svc.Spec.Type = corev1.ServiceTypeClusterIP
			svc.Spec.LoadBalancerClass = nil
			svc.Spec.ExternalTrafficPolicy = ""
			svc.Spec.HealthCheckNodePort = 0
			svc.Spec.AllocateLoadBalancerNodePorts = nil
			for i := range svc.Spec.Ports {
				svc.Spec.Ports[i].NodePort = 0
			}
			return
		}
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		if pick%3 == 0 {
			svc.Spec.LoadBalancerClass = ptr.To(foreignClass)
		}
	}
}

// deleteInstance removes an instance from the cloud behind Outrigger's back,
// and its kubelet goes silent: the Node turns NotReady, as the node
// lifecycle of kube-controller-manager would mark it.
func (h *harness) deleteInstance(ctx context.Context, pick uint32) (string, error) {
	nodes := h.liveNodes()
	if len(nodes) <= 1 {
		return "", nil
	}
	in := nodes[int(pick)%len(nodes)]
	h.cloud.Delete(in.ID)
	err := retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
		return kubeletsim.SetReady(ctx, h.client, in.Name, false)
	})
	return in.Name, err
}

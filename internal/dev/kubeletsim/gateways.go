package kubeletsim

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// gatewayDataPlane stands in for a Gateway's data plane pod on one
// simulated node: Outrigger's own proxy, programmed from the Secret the
// gateway controller keeps, listening at the node's address on the node
// ports of the Gateway's load balancer Service (as kube-proxy would send
// them to a pod), and reaching a backend Service's cluster IP through that
// Service's node port on the same node (there is no kube-proxy to do it).
type gatewayDataPlane struct {
	node  netip.Addr
	proxy *dataplane.Proxy

	mu       sync.Mutex
	svc      *corev1.Service
	backends map[string]string // cluster IP:port -> node address:node port, by protocol key
	applied  string            // the Secret's resourceVersion last applied
}

// isGatewayService says whether a Service fronts a Gateway's data plane.
func isGatewayService(s *corev1.Service) bool {
	return s.Labels[gateway.GatewayUIDLabel] != "" && s.Labels["app.kubernetes.io/managed-by"] == "outrigger"
}

func newGatewayDataPlane(node netip.Addr) *gatewayDataPlane {
	g := &gatewayDataPlane{node: node}
	g.proxy = dataplane.New(dataplane.Options{
		ListenTCP: func(port int32) (net.Listener, error) {
			np, err := g.nodePort(corev1.ProtocolTCP, port)
			if err != nil {
				return nil, err
			}
			return net.Listen("tcp", netip.AddrPortFrom(node, uint16(np)).String())
		},
		ListenUDP: func(port int32) (net.PacketConn, error) {
			np, err := g.nodePort(corev1.ProtocolUDP, port)
			if err != nil {
				return nil, err
			}
			return net.ListenPacket("udp", netip.AddrPortFrom(node, uint16(np)).String())
		},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			g.mu.Lock()
			to, ok := g.backends[network+"/"+address]
			g.mu.Unlock()
			if !ok {
				return nil, fmt.Errorf("no node port serves backend %s %s on this simulated node", network, address)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		},
		Log: klog.Background().WithName("gateway-dataplane").WithValues("node", node.String()),
	})
	return g
}

func (g *gatewayDataPlane) nodePort(proto corev1.Protocol, port int32) (int32, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.svc.Spec.Ports {
		if p.Protocol == proto && p.Port == port && p.NodePort != 0 {
			return p.NodePort, nil
		}
	}
	return 0, fmt.Errorf("service %s/%s has no %s node port for port %d yet", g.svc.Namespace, g.svc.Name, proto, port)
}

// program applies the Gateway's Secret when it changed, with the current
// Services for backends.
func (g *gatewayDataPlane) program(ctx context.Context, svc *corev1.Service, secret *corev1.Secret, all []corev1.Service) {
	backends := map[string]string{}
	for _, s := range all {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.NodePort == 0 {
				continue
			}
			network := "tcp"
			if p.Protocol == corev1.ProtocolUDP {
				network = "udp"
			}
			backends[network+"/"+net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(p.Port)))] = netip.AddrPortFrom(g.node, uint16(p.NodePort)).String()
		}
	}
	g.mu.Lock()
	g.svc, g.backends = svc, backends
	changed := secret.ResourceVersion+"/"+svc.ResourceVersion != g.applied
	g.mu.Unlock()
	if !changed {
		return
	}
	cfg, err := dataplane.Unmarshal(secret.Data[dataplane.ConfigKey])
	if err == nil {
		err = g.proxy.Apply(cfg)
	}
	if err != nil {
		klog.FromContext(ctx).Info("Simulated Gateway data plane not programmed", "node", g.node, "service", svc.Namespace+"/"+svc.Name, "err", err)
		return
	}
	g.mu.Lock()
	g.applied = secret.ResourceVersion + "/" + svc.ResourceVersion
	g.mu.Unlock()
}

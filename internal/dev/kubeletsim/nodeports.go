package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// NodePorts stands in for kube-proxy and the pods of a development cluster
// whose nodes are simulated: on every running instance's IPv4 InternalIP
// (a loopback address in `outrigger dev`) it serves each Service's TCP and
// UDP node ports with a responder that names the node, kube-proxy's healthz
// port, and each healthCheckNodePort. A load balancer in front of the nodes
// then has real backends, and a stopped instance stops answering, so its
// health checks fail as a dead machine's would.
type NodePorts struct {
	Cloud  Lister
	Client kubernetes.Interface
	// Period between syncs. Default 1s.
	Period time.Duration
	// KubeProxyPort is kube-proxy's healthz port. Default 10256.
	KubeProxyPort int32

	mu       sync.Mutex
	open     map[endpoint]func()
	failed   map[endpoint]bool
	gateways map[string]*gatewayDataPlane // node/namespace/name of the Service
}

// endpoint is one port on one node address.
type endpoint struct {
	node     string
	ip       netip.Addr
	protocol corev1.Protocol
	port     int32
	// service names who the port is for: a Service, or "" for a health port.
	service string
	health  bool
}

// Run syncs until ctx ends, then closes everything.
func (p *NodePorts) Run(ctx context.Context) {
	if p.Period <= 0 {
		p.Period = time.Second
	}
	if p.KubeProxyPort == 0 {
		p.KubeProxyPort = 10256
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := p.Sync(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Serving simulated node ports")
		}
	}, p.Period)
	p.mu.Lock()
	defer p.mu.Unlock()
	for e, stop := range p.open {
		stop()
		delete(p.open, e)
	}
	for k, g := range p.gateways {
		g.proxy.Close()
		delete(p.gateways, k)
	}
}

// Sync opens the ports that should be served and closes the others, once.
func (p *NodePorts) Sync(ctx context.Context) error {
	svcs, err := p.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("listing services: %w", err)
	}
	want := map[endpoint]bool{}
	wantGateways := map[string]bool{}
	for _, in := range p.Cloud.List() {
		if in.State != simcloud.StateRunning {
			continue
		}
		ip, ok := instanceIPv4(in)
		if !ok {
			continue
		}
		want[endpoint{node: in.Name, ip: ip, protocol: corev1.ProtocolTCP, port: p.KubeProxyPort, health: true}] = true
		for _, s := range svcs.Items {
			key := s.Namespace + "/" + s.Name
			if isGatewayService(&s) {
				// A Gateway's data plane answers its node ports.
				p.syncGateway(ctx, in.Name, ip, &svcs.Items, &s)
				wantGateways[in.Name+"/"+key] = true
				continue
			}
			for _, sp := range s.Spec.Ports {
				if sp.NodePort != 0 && (sp.Protocol == corev1.ProtocolTCP || sp.Protocol == corev1.ProtocolUDP) {
					want[endpoint{node: in.Name, ip: ip, protocol: sp.Protocol, port: sp.NodePort, service: fmt.Sprintf("%s port %d", key, sp.Port)}] = true
				}
			}
			if s.Spec.HealthCheckNodePort != 0 {
				want[endpoint{node: in.Name, ip: ip, protocol: corev1.ProtocolTCP, port: s.Spec.HealthCheckNodePort, health: true}] = true
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		p.open, p.failed = map[endpoint]func(){}, map[endpoint]bool{}
	}
	for e, stop := range p.open {
		if !want[e] {
			stop()
			delete(p.open, e)
		}
	}
	for k, g := range p.gateways {
		if !wantGateways[k] {
			g.proxy.Close()
			delete(p.gateways, k)
		}
	}
	for e := range want {
		if _, ok := p.open[e]; ok {
			continue
		}
		stop, err := serve(e)
		if err != nil {
			if !p.failed[e] {
				klog.FromContext(ctx).Info("Cannot serve a simulated node port", "node", e.node, "address", netip.AddrPortFrom(e.ip, uint16(e.port)), "protocol", e.protocol, "err", err)
				p.failed[e] = true
			}
			continue
		}
		delete(p.failed, e)
		p.open[e] = stop
	}
	return nil
}

// syncGateway keeps the simulated data plane of a Gateway's Service on one
// node programmed.
func (p *NodePorts) syncGateway(ctx context.Context, node string, ip netip.Addr, all *[]corev1.Service, svc *corev1.Service) {
	secret, err := p.Client.CoreV1().Secrets(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("No programming for a Gateway data plane yet", "service", svc.Namespace+"/"+svc.Name, "err", err)
		return
	}
	key := node + "/" + svc.Namespace + "/" + svc.Name
	p.mu.Lock()
	if p.gateways == nil {
		p.gateways = map[string]*gatewayDataPlane{}
	}
	g, ok := p.gateways[key]
	if !ok {
		g = newGatewayDataPlane(ip)
		p.gateways[key] = g
	}
	p.mu.Unlock()
	g.program(ctx, svc, secret, *all)
}

func instanceIPv4(in simcloud.Instance) (netip.Addr, bool) {
	for _, a := range in.Addresses {
		if a.Type == string(corev1.NodeInternalIP) {
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// serve opens one endpoint and returns what closes it.
func serve(e endpoint) (func(), error) {
	addr := netip.AddrPortFrom(e.ip, uint16(e.port)).String()
	if e.protocol == corev1.ProtocolUDP {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, err
		}
		go func() {
			buf := make([]byte, 64*1024)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo([]byte(e.node+": "+string(buf[:n])), from)
			}
		}()
		return func() { _ = pc.Close() }, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.health {
			fmt.Fprintln(w, "ok")
			return
		}
		fmt.Fprintf(w, "Hello from %s (%s): %s\n", e.node, e.ip, e.service)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.Background().V(2).Info("Simulated node port stopped", "address", addr, "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}

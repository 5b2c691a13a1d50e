package announce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Addresses is how the announcer holds VIPs on its node: the addresses of
// the pool present now, adding and removing one, and telling the network
// an address moved here (gratuitous ARP).
type Addresses interface {
	List(pool netip.Prefix) ([]netip.Addr, error)
	Add(ip netip.Addr) error
	Remove(ip netip.Addr) error
	Announce(ip netip.Addr) error
}

// Announcer holds on its node the VIPs this node owns (Owner), and no
// other address of the pool.
type Announcer struct {
	Client   kubernetes.Interface
	NodeName string
	Pool     netip.Prefix
	Addrs    Addresses
	// Resync re-checks everything this often even without events (an
	// address removed by hand comes back). Default 30s.
	Resync time.Duration
}

const syncKey = "vips"

// Run announces until ctx ends, then withdraws every VIP it holds so
// another node can take them.
func (a *Announcer) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("node", a.NodeName, "pool", a.Pool)
	if a.Resync == 0 {
		a.Resync = 30 * time.Second
	}
	factory := informers.NewSharedInformerFactory(a.Client, a.Resync)
	svcs := factory.Core().V1().Services()
	nodes := factory.Core().V1().Nodes()
	eps := factory.Discovery().V1().EndpointSlices()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { queue.Add(syncKey) },
		UpdateFunc: func(any, any) { queue.Add(syncKey) },
		DeleteFunc: func(any) { queue.Add(syncKey) },
	}
	for _, inf := range []cache.SharedIndexInformer{svcs.Informer(), nodes.Informer(), eps.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing the %v cache", typ)
		}
	}
	log.Info("Announcing load balancer VIPs from this node")
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, shutdown := queue.Get()
		if shutdown {
			break
		}
		err := a.sync(ctx, svcs.Lister().List, nodes.Lister().List, eps.Lister().List)
		if err != nil {
			log.Error(err, "Syncing VIPs failed; retrying")
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
	// Withdraw: this node stops serving, the others' informers see it
	// when the node or its endpoints change.
	held, err := a.Addrs.List(a.Pool)
	for _, ip := range held {
		err = errors.Join(err, a.Addrs.Remove(ip))
	}
	log.Info("Withdrew load balancer VIPs", "count", len(held))
	return err
}

type (
	listServices func(labels.Selector) ([]*corev1.Service, error)
	listNodes    func(labels.Selector) ([]*corev1.Node, error)
	listSlices   func(labels.Selector) ([]*discoveryv1.EndpointSlice, error)
)

// sync makes the node's pool addresses the VIPs it owns.
func (a *Announcer) sync(ctx context.Context, services listServices, nodes listNodes, endpointSlices listSlices) error {
	svcList, err := services(labels.Everything())
	if err != nil {
		return err
	}
	nodeList, err := nodes(labels.Everything())
	if err != nil {
		return err
	}
	sliceList, err := endpointSlices(labels.Everything())
	if err != nil {
		return err
	}
	want := a.Desired(svcList, nodeList, sliceList)
	have, err := a.Addrs.List(a.Pool)
	if err != nil {
		return fmt.Errorf("listing the node's addresses: %w", err)
	}
	log := klog.FromContext(ctx)
	var errs []error
	for _, ip := range have {
		if _, ok := want[ip]; !ok {
			if err := a.Addrs.Remove(ip); err != nil {
				errs = append(errs, fmt.Errorf("withdrawing %s: %w", ip, err))
				continue
			}
			log.Info("Withdrew VIP", "vip", ip)
		}
	}
	for ip, svc := range want {
		if slices.Contains(have, ip) {
			continue
		}
		if err := a.Addrs.Add(ip); err != nil {
			errs = append(errs, fmt.Errorf("adding %s for %s: %w", ip, svc, err))
			continue
		}
		if err := a.Addrs.Announce(ip); err != nil {
			errs = append(errs, fmt.Errorf("announcing %s: %w", ip, err))
		}
		log.Info("Announcing VIP", "vip", ip, "service", svc)
	}
	return errors.Join(errs...)
}

// Desired is every VIP this node owns, with its Service's name.
func (a *Announcer) Desired(svcs []*corev1.Service, nodes []*corev1.Node, eps []*discoveryv1.EndpointSlice) map[netip.Addr]string {
	want := map[netip.Addr]string{}
	for _, svc := range svcs {
		for _, vip := range VIPs(svc, a.Pool) {
			if Owner(svc, vip, nodes, eps) == a.NodeName {
				want[vip] = svc.Namespace + "/" + svc.Name
			}
		}
	}
	return want
}

// interfaceOf finds the interface holding ip, where ARP for the VIPs is
// answered.
func interfaceOf(ip netip.Addr) (*net.Interface, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifaces {
		addrs, err := ifaces[i].Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == ip {
				return &ifaces[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %s", ip)
}

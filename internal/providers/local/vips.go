package local

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// vipPool allocates the load balancers' VIPs from the configured pool: one
// address per load balancer, kept for its life, never one that another
// Service still advertises.
type vipPool struct {
	pool netip.Prefix

	mu sync.Mutex
	// used are the addresses given out, by load balancer name.
	used map[netip.Addr]string
	// next is where the search for a free address starts: addresses are
	// handed out in turn, so a freed one is not reused at once.
	next netip.Addr
	// held are the pool's addresses that Services' statuses hold, by the
	// Service's UID (SetInformers): a process that restarted, or a new
	// leader, has no load balancers yet, but an address a Service still
	// advertises is not free for another Service.
	held map[netip.Addr]types.UID
	// heldSynced is the Service handler's registration: allocation waits
	// until it has seen every Service once.
	heldSynced atomic.Pointer[cache.ResourceEventHandlerRegistration]
}

func newVIPPool(pool netip.Prefix) *vipPool {
	return &vipPool{pool: pool, used: map[netip.Addr]string{}, held: map[netip.Addr]types.UID{}}
}

// waitHeld waits until the addresses Services hold are known (at once when
// no informer feeds them).
func (p *vipPool) waitHeld(ctx context.Context) error {
	reg := p.heldSynced.Load()
	if reg == nil || (*reg).HasSynced() {
		return nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), (*reg).HasSynced) {
		return fmt.Errorf("waiting for the addresses Services hold: %w", context.Cause(ctx))
	}
	return nil
}

// holdStatus records the pool addresses svc's status advertises, replacing
// what it held before; nil (deleted) releases them.
func (p *vipPool) holdStatus(uid types.UID, svc *corev1.Service) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ip, holder := range p.held {
		if holder == uid {
			delete(p.held, ip)
		}
	}
	if svc == nil {
		return
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && p.pool.Contains(ip) {
			p.held[ip] = uid
		}
	}
}

// assign gives load balancer name, made for svc, its VIP and records it;
// current is the VIP it has so far (invalid for a new one), released when
// the answer differs. A load balancer keeps its VIP for life; a new one
// takes, in order: spec.loadBalancerIP; the address in the Service's status
// (so a restarted Outrigger keeps its VIPs); the next free address in the
// pool.
func (p *vipPool) assign(name string, current netip.Addr, svc *corev1.Service) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ip, err := p.chooseLocked(name, current, svc)
	if err != nil {
		return netip.Addr{}, err
	}
	if ip != current {
		if current.IsValid() {
			delete(p.used, current)
		}
		p.used[ip] = name
	}
	return ip, nil
}

func (p *vipPool) chooseLocked(name string, current netip.Addr, svc *corev1.Service) (netip.Addr, error) {
	free := func(ip netip.Addr) bool {
		if holder, held := p.held[ip]; held && holder != svc.UID {
			return false
		}
		owner, used := p.used[ip]
		return !used || owner == name
	}
	if req := svc.Spec.LoadBalancerIP; req != "" {
		ip, err := netip.ParseAddr(req)
		if err != nil || !p.pool.Contains(ip) {
			return netip.Addr{}, provider.Reasonf("LoadBalancerIPNotAvailable", "spec.loadBalancerIP %s is not in the pool %s", req, p.pool)
		}
		if !free(ip) {
			return netip.Addr{}, provider.Reasonf("LoadBalancerIPNotAvailable", "spec.loadBalancerIP %s is in use by another Service", req)
		}
		return ip, nil
	}
	if current.IsValid() {
		return current, nil
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && p.pool.Contains(ip) && free(ip) {
			return ip, nil
		}
	}
	first := p.pool.Addr().Next() // not the network address
	ip := p.next
	if !ip.IsValid() {
		ip = first
	}
	size := 1 << min(24, ip.BitLen()-p.pool.Bits())
	for range size {
		if !p.pool.Contains(ip) {
			ip = first
		}
		if free(ip) {
			p.next = ip.Next()
			return ip, nil
		}
		ip = ip.Next()
	}
	return netip.Addr{}, provider.Reasonf(provider.ReasonQuotaExceeded, "the VIP pool %s is exhausted (%d load balancers)", p.pool, len(p.used))
}

// release frees ip.
func (p *vipPool) release(ip netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, ip)
}

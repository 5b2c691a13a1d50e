package simcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// Load balancer errors.
var (
	ErrLBQuota         = errors.New("load balancer quota exceeded")
	ErrIPNotAvailable  = errors.New("requested IP is not available")
	ErrInvalidLBSpec   = errors.New("invalid load balancer")
	ErrLBNotFound      = errors.New("load balancer not found")
	ErrTagsMismatch    = errors.New("tags do not match")
	defaultVIPPool     = netip.MustParsePrefix("198.18.0.0/15")
	validLBProtocols   = map[string]bool{"TCP": true, "UDP": true, "SCTP": true}
	validLBAffinities  = map[string]bool{"": true, "None": true, "ClientIP": true}
	maxListenersPerLB  = 50
	maxSourceRangesPer = 100
)

func validateSpec(s LoadBalancerSpec) error {
	if len(s.Listeners) > maxListenersPerLB {
		return fmt.Errorf("%w: %d listeners, at most %d", ErrInvalidLBSpec, len(s.Listeners), maxListenersPerLB)
	}
	for _, l := range s.Listeners {
		if !validLBProtocols[l.Protocol] || l.Port <= 0 || l.Port > 65535 || l.NodePort < 0 || l.NodePort > 65535 {
			return fmt.Errorf("%w: listener %s/%d -> %d", ErrInvalidLBSpec, l.Protocol, l.Port, l.NodePort)
		}
	}
	if len(s.SourceRanges) > maxSourceRangesPer {
		return fmt.Errorf("%w: %d source ranges, at most %d", ErrInvalidLBSpec, len(s.SourceRanges), maxSourceRangesPer)
	}
	for _, r := range s.SourceRanges {
		if _, err := netip.ParsePrefix(r); err != nil {
			return fmt.Errorf("%w: source range: %v", ErrInvalidLBSpec, err)
		}
	}
	if !validLBAffinities[s.SessionAffinity] {
		return fmt.Errorf("%w: session affinity %q", ErrInvalidLBSpec, s.SessionAffinity)
	}
	return nil
}

// tagsMatch reports whether tags carry every key=value of match; a missing
// tag reads as "".
func tagsMatch(tags, match map[string]string) bool {
	for k, v := range match {
		if tags[k] != v {
			return false
		}
	}
	return true
}

func mismatch(kind, name string, tags, match map[string]string) error {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(match)) {
		if tags[k] != match[k] {
			diffs = append(diffs, fmt.Sprintf("%s=%q (not %q)", k, tags[k], match[k]))
		}
	}
	return fmt.Errorf("%w: %s %s carries %s", ErrTagsMismatch, kind, name, strings.Join(diffs, ", "))
}

// PutLoadBalancer creates the load balancer name or replaces its spec,
// keeping its VIP. An existing load balancer is replaced only when its tags
// carry match (nil: any).
func (c *Cloud) PutLoadBalancer(name string, spec LoadBalancerSpec, match map[string]string) (LoadBalancer, error) {
	if name == "" {
		return LoadBalancer{}, fmt.Errorf("%w: a name is required", ErrInvalidLBSpec)
	}
	if err := validateSpec(spec); err != nil {
		return LoadBalancer{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.putLoadBalancer(name, spec, match)
}

// putLoadBalancer is PutLoadBalancer with spec valid; the caller holds c.mu.
func (c *Cloud) putLoadBalancer(name string, spec LoadBalancerSpec, match map[string]string) (LoadBalancer, error) {
	if served := c.settings.LoadBalancerProtocols; len(served) > 0 {
		for _, l := range spec.Listeners {
			if !slices.Contains(served, l.Protocol) {
				return LoadBalancer{}, fmt.Errorf("%w: listener %s/%d: this cloud's load balancers serve %s only", ErrInvalidLBSpec, l.Protocol, l.Port, strings.Join(served, ", "))
			}
		}
	}
	if lb, ok := c.lbs[name]; ok {
		if !tagsMatch(lb.Tags, match) {
			return LoadBalancer{}, mismatch("load balancer", name, lb.Tags, match)
		}
		lb.LoadBalancerSpec = spec
		return *lb, nil
	}
	if q := c.settings.MaxLoadBalancers; q > 0 && len(c.lbs) >= q {
		return LoadBalancer{}, fmt.Errorf("%w: %d of %d load balancers in use", ErrLBQuota, len(c.lbs), q)
	}
	vip, err := c.allocateVIP(spec.RequestedIP)
	if err != nil {
		return LoadBalancer{}, err
	}
	lb := &LoadBalancer{Name: name, VIP: vip.String(), LoadBalancerSpec: spec}
	c.lbs[name] = lb
	c.vips[vip] = name
	return *lb, nil
}

func (c *Cloud) allocateVIP(requested string) (netip.Addr, error) {
	pool := c.vipPool
	if !pool.IsValid() {
		pool = defaultVIPPool
	}
	if requested != "" {
		ip, err := netip.ParseAddr(requested)
		if err != nil || !pool.Contains(ip) {
			return netip.Addr{}, fmt.Errorf("%w: %s is not in the pool %s", ErrIPNotAvailable, requested, pool)
		}
		if owner, used := c.vips[ip]; used {
			return netip.Addr{}, fmt.Errorf("%w: %s is in use by %s", ErrIPNotAvailable, requested, owner)
		}
		return ip, nil
	}
	first := pool.Addr().Next() // skip the network address
	ip := c.nextVIP
	if !ip.IsValid() {
		ip = first
	}
	for range 1 << (32 - pool.Bits()) {
		if !pool.Contains(ip) {
			ip = first
		}
		if _, used := c.vips[ip]; !used {
			c.nextVIP = ip.Next()
			return ip, nil
		}
		ip = ip.Next()
	}
	return netip.Addr{}, fmt.Errorf("%w: the pool %s is exhausted", ErrIPNotAvailable, pool)
}

// SetVIPPool makes load balancers created from now on take their VIPs
// from prefix, an IPv4 range (default 198.18.0.0/15), e.g. to keep them
// apart from the addresses of a network the cloud shares.
func (c *Cloud) SetVIPPool(prefix netip.Prefix) error {
	if !prefix.IsValid() || !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return fmt.Errorf("VIP pool %s is not an IPv4 range of at least 4 addresses", prefix)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vipPool = prefix.Masked()
	c.nextVIP = netip.Addr{}
	return nil
}

// SetBackends replaces a load balancer's backends, when its tags carry
// match (nil: any).
func (c *Cloud) SetBackends(name string, backends []Backend, match map[string]string) (LoadBalancer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return LoadBalancer{}, fmt.Errorf("%w: %s", ErrLBNotFound, name)
	}
	if !tagsMatch(lb.Tags, match) {
		return LoadBalancer{}, mismatch("load balancer", name, lb.Tags, match)
	}
	lb.Backends = backends
	return *lb, nil
}

// GetLoadBalancer returns a load balancer by name.
func (c *Cloud) GetLoadBalancer(name string) (LoadBalancer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return LoadBalancer{}, false
	}
	return *lb, true
}

// DeleteLoadBalancer removes a load balancer whose tags carry match (nil:
// any) and frees its VIP. A missing one is ErrLBNotFound.
func (c *Cloud) DeleteLoadBalancer(name string, match map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrLBNotFound, name)
	}
	if !tagsMatch(lb.Tags, match) {
		return mismatch("load balancer", name, lb.Tags, match)
	}
	delete(c.lbs, name)
	delete(c.lbData, name)
	delete(c.vips, netip.MustParseAddr(lb.VIP))
	return nil
}

// LoadBalancers lists load balancers sorted by name.
func (c *Cloud) LoadBalancers() []LoadBalancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]LoadBalancer, 0, len(c.lbs))
	for _, lb := range c.lbs {
		out = append(out, *lb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *Cloud) listLoadBalancers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, c.LoadBalancers())
}

func (c *Cloud) getLoadBalancer(w http.ResponseWriter, r *http.Request) {
	lb, ok := c.GetLoadBalancer(r.PathValue("name"))
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{Code: CodeLoadBalancerNotFound, Message: fmt.Sprintf("load balancer %q not found", r.PathValue("name"))})
		return
	}
	writeJSON(w, http.StatusOK, lb)
}

func (c *Cloud) servePutLoadBalancer(w http.ResponseWriter, r *http.Request) {
	var spec LoadBalancerSpec
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	match, err := ifTags(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	lb, err := c.PutLoadBalancer(r.PathValue("name"), spec, match)
	if err == nil {
		c.mu.Lock()
		hook := c.afterPut
		c.mu.Unlock()
		if hook != nil {
			hook(r.Context(), lb)
		}
	}
	writeLBResult(w, lb, err)
}

// SetAfterPutHook makes every successful PUT of a load balancer call hook
// after the cloud changed and before it answers: a test uses it to stop the
// caller between the two.
func (c *Cloud) SetAfterPutHook(hook func(context.Context, LoadBalancer)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.afterPut = hook
}

func (c *Cloud) putBackends(w http.ResponseWriter, r *http.Request) {
	var backends []Backend
	if err := json.NewDecoder(r.Body).Decode(&backends); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	match, err := ifTags(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	lb, err := c.SetBackends(r.PathValue("name"), backends, match)
	writeLBResult(w, lb, err)
}

func writeLBResult(w http.ResponseWriter, lb LoadBalancer, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, lb)
	case errors.Is(err, ErrLBQuota):
		writeJSON(w, http.StatusForbidden, Error{Code: "QuotaExceeded", Message: err.Error()})
	case errors.Is(err, ErrIPNotAvailable):
		writeJSON(w, http.StatusConflict, Error{Code: "IPNotAvailable", Message: err.Error()})
	case errors.Is(err, ErrLBNotFound):
		writeJSON(w, http.StatusNotFound, Error{Code: CodeLoadBalancerNotFound, Message: err.Error()})
	case errors.Is(err, ErrTagsMismatch):
		writeJSON(w, http.StatusPreconditionFailed, Error{Code: CodeTagsMismatch, Message: err.Error()})
	default:
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
	}
}

func (c *Cloud) deleteLoadBalancer(w http.ResponseWriter, r *http.Request) {
	match, err := ifTags(r)
	if err == nil {
		err = c.DeleteLoadBalancer(r.PathValue("name"), match)
	}
	if err != nil {
		writeLBResult(w, LoadBalancer{}, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ifTags reads IfTagsHeader: nil when absent.
func ifTags(r *http.Request) (map[string]string, error) {
	h := r.Header.Get(IfTagsHeader)
	if h == "" {
		return nil, nil
	}
	v, err := url.ParseQuery(h)
	if err != nil {
		return nil, fmt.Errorf("header %s: %w", IfTagsHeader, err)
	}
	match := make(map[string]string, len(v))
	for k := range v {
		match[k] = v.Get(k)
	}
	return match, nil
}

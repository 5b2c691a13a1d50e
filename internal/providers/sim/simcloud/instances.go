package simcloud

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sort"
)

// The cloud's instances: made, found, listed, moved between states, their
// addresses and labels changed.

// ErrQuotaExceeded is returned by Create when the instance quota is used up.
var ErrQuotaExceeded = errors.New("instance quota exceeded")

// Create adds an instance, filling in what the request leaves empty.
func (c *Cloud) Create(req CreateRequest) (Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Name == "" {
		return Instance{}, errors.New("instance name is required")
	}
	if id, ok := c.byName[req.Name]; ok && c.instances[id].State != StateTerminated {
		return Instance{}, fmt.Errorf("an instance named %q already exists (%s)", req.Name, id)
	}
	if q := c.settings.MaxInstances; q > 0 {
		live := 0
		for _, in := range c.instances {
			if in.State != StateTerminated {
				live++
			}
		}
		if live >= q {
			return Instance{}, fmt.Errorf("%w: %d of %d instances in use", ErrQuotaExceeded, live, q)
		}
	}
	c.nextID++
	n := c.nextID
	in := &Instance{
		ID:        fmt.Sprintf("i-%08x", n),
		Name:      req.Name,
		Type:      req.Type,
		Zone:      req.Zone,
		Region:    c.region,
		Addresses: req.Addresses,
		State:     StateRunning,
		Labels:    req.Labels,
	}
	if in.Type == "" {
		in.Type = "sim.small"
	}
	if in.Zone == "" {
		in.Zone = c.zones[(n-1)%len(c.zones)]
	}
	if len(in.Addresses) == 0 {
		in.Addresses = defaultAddresses(c.internalV4, n, in.Name, in.Zone)
	}
	c.instances[in.ID] = in
	c.byName[in.Name] = in.ID
	return *in, nil
}

// defaultInternalV4 is where instances' IPv4 InternalIPs come from unless
// SetInternalIPv4Range says otherwise: the upper half of 198.19.0.0/16, apart
// from the VIPs (counted up from the bottom of defaultVIPPool) and from the
// pod CIDRs (podNetV4).
var defaultInternalV4 = netip.MustParsePrefix("198.19.128.0/17")

// defaultAddresses gives instance number n a dual-stack pair of internal
// addresses (the n-th of the IPv4 range, defaultInternalV4 unless set, and
// of fd00:10::/64), its hostname and a DNS name.
func defaultAddresses(base netip.Prefix, n int, name, zone string) []Address {
	if !base.IsValid() {
		base = defaultInternalV4
	}
	b := base.Masked().Addr().As4()
	u := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) + uint32(n)
	v4 := netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
	v6 := netip.MustParseAddr("fd00:10::").As16()
	v6[13], v6[14], v6[15] = byte(n>>16), byte(n>>8), byte(n)
	return []Address{
		{Type: "InternalIP", Address: v4.String()},
		{Type: "InternalIP", Address: netip.AddrFrom16(v6).String()},
		{Type: "Hostname", Address: name},
		{Type: "InternalDNS", Address: name + "." + zone + ".sim.internal"},
	}
}

// SetState moves an instance to running, stopped or terminated. A terminated
// instance stays listed (as clouds list them for a while) but can never run
// again.
func (c *Cloud) SetState(id, state string) (Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[id]
	if !ok {
		return Instance{}, fmt.Errorf("instance %q not found", id)
	}
	switch state {
	case StateRunning, StateStopped, StateTerminated:
	default:
		return Instance{}, fmt.Errorf("unknown state %q", state)
	}
	if in.State == StateTerminated && state != StateTerminated {
		return Instance{}, fmt.Errorf("instance %s is terminated", id)
	}
	in.State = state
	return *in, nil
}

// Delete removes an instance from the cloud entirely.
func (c *Cloud) Delete(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in, ok := c.instances[id]; ok {
		delete(c.instances, id)
		if c.byName[in.Name] == id {
			delete(c.byName, in.Name)
		}
	}
}

// Get returns the instance with id or name.
func (c *Cloud) Get(idOrName string) (Instance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.lookup(idOrName)
	if in == nil {
		return Instance{}, false
	}
	return *in, true
}

func (c *Cloud) lookup(idOrName string) *Instance {
	if in, ok := c.instances[idOrName]; ok {
		return in
	}
	if id, ok := c.byName[idOrName]; ok {
		return c.instances[id]
	}
	return nil
}

// List returns all instances sorted by ID.
func (c *Cloud) List() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Instance, 0, len(c.instances))
	for _, in := range c.instances {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ErrInstanceNotFound is returned by ChangeLabels for an ID the cloud does
// not have.
var ErrInstanceNotFound = errors.New("instance not found")

// ChangeLabels applies change to the labels of every instance in ids, all or
// none: an unknown ID (ErrInstanceNotFound) fails the call before any
// instance changes, as EC2's CreateTags does. change gets a copy to edit: a
// caller still holding an Instance from List or Get keeps the labels it read.
func (c *Cloud) ChangeLabels(ids []string, change func(labels map[string]string)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := make([]*Instance, 0, len(ids))
	for _, id := range ids {
		in, ok := c.instances[id]
		if !ok {
			return fmt.Errorf("%w: %s", ErrInstanceNotFound, id)
		}
		found = append(found, in)
	}
	for _, in := range found {
		labels := maps.Clone(in.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		change(labels)
		in.Labels = labels
	}
	return nil
}

// SetAddresses replaces an instance's addresses, as when a cloud attaches or
// detaches an interface.
func (c *Cloud) SetAddresses(id string, addrs []Address) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[id]
	if !ok {
		return fmt.Errorf("instance %q not found", id)
	}
	in.Addresses = addrs
	return nil
}

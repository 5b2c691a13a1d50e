package simcloud

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
)

// ErrRouteQuota is returned when the route table is full.
var ErrRouteQuota = errors.New("route table quota exceeded")

// ErrRouteExists is returned when a route of that name exists.
var ErrRouteExists = errors.New("route already exists")

// CreateRoute adds a route.
func (c *Cloud) CreateRoute(r Route) (Route, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Name == "" || r.Target == "" {
		return Route{}, errors.New("route name and target are required")
	}
	if _, err := netip.ParsePrefix(r.Destination); err != nil {
		return Route{}, fmt.Errorf("route destination: %w", err)
	}
	if old, ok := c.routes[r.Name]; ok {
		return old, fmt.Errorf("%w: %s -> %s", ErrRouteExists, old.Destination, old.Target)
	}
	if q := c.settings.MaxRoutes; q > 0 && len(c.routes) >= q {
		return Route{}, fmt.Errorf("%w: the table holds %d of %d routes", ErrRouteQuota, len(c.routes), q)
	}
	r.Blackhole = false
	c.routes[r.Name] = r
	return r, nil
}

// DeleteRoute removes a route whose tags carry match (nil: any); a missing
// route is not an error.
func (c *Cloud) DeleteRoute(name string, match map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.routes[name]
	if !ok {
		return nil
	}
	if !tagsMatch(r.Tags, match) {
		return mismatch("route", name, r.Tags, match)
	}
	delete(c.routes, name)
	return nil
}

// Routes lists the route table sorted by name.
func (c *Cloud) Routes() []Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Route, 0, len(c.routes))
	for _, r := range c.routes {
		in := c.lookup(r.Target)
		r.Blackhole = in == nil || in.State == StateTerminated
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *Cloud) listRoutes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, c.Routes())
}

func (c *Cloud) createRoute(w http.ResponseWriter, r *http.Request) {
	var in Route
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	out, err := c.CreateRoute(in)
	switch {
	case errors.Is(err, ErrRouteQuota):
		writeJSON(w, http.StatusForbidden, Error{Code: "QuotaExceeded", Message: err.Error()})
	case errors.Is(err, ErrRouteExists):
		writeJSON(w, http.StatusConflict, Error{Code: "AlreadyExists", Message: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
	default:
		writeJSON(w, http.StatusCreated, out)
	}
}

func (c *Cloud) deleteRoute(w http.ResponseWriter, r *http.Request) {
	match, err := ifTags(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	if err := c.DeleteRoute(r.PathValue("name"), match); err != nil {
		writeJSON(w, http.StatusPreconditionFailed, Error{Code: CodeTagsMismatch, Message: err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// podNetV4 is the range the cloud's IPv4 pod CIDRs are cut from, one /24
// per instance: the lower half of 198.19.0.0/16, apart from the instances'
// addresses (defaultInternalV4).
var podNetV4 = netip.MustParsePrefix("198.19.0.0/17")

// PodCIDRs returns the pod CIDRs of an instance (by ID or name), assigning a
// /24 from podNetV4 and a /64 from fd00:200::/48 on first use, as a cloud
// with native pod networking does.
func (c *Cloud) PodCIDRs(idOrName string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.lookup(idOrName)
	if in == nil || in.State == StateTerminated {
		return nil, fmt.Errorf("instance %q not found", idOrName)
	}
	if len(in.PodCIDRs) == 0 {
		n := c.nextPodNet
		if n >= 1<<(24-podNetV4.Bits()) {
			return nil, errors.New("the cloud's pod address space is exhausted")
		}
		c.nextPodNet++
		v6 := netip.MustParseAddr("fd00:200::").As16()
		v6[7] = byte(n)
		v4 := podNetV4.Addr().As4()
		binary.BigEndian.PutUint32(v4[:], binary.BigEndian.Uint32(v4[:])+uint32(n)<<8) // the n-th /24
		in.PodCIDRs = []string{
			netip.PrefixFrom(netip.AddrFrom4(v4), 24).String(),
			netip.PrefixFrom(netip.AddrFrom16(v6), 64).String(),
		}
	}
	return append([]string(nil), in.PodCIDRs...), nil
}

func (c *Cloud) podCIDRs(w http.ResponseWriter, r *http.Request) {
	cidrs, err := c.PodCIDRs(r.PathValue("id"))
	if err != nil {
		writeJSON(w, http.StatusNotFound, Error{Code: CodeInstanceNotFound, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, cidrs)
}

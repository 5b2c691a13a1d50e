package simcloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Cloud is the simulated cloud's state and HTTP API.
type Cloud struct {
	// Zones instances are spread over, round-robin; all in Region.
	zones []string
	// internalV4 is the range instances' IPv4 InternalIPs come from.
	internalV4 netip.Prefix
	region     string

	mu        sync.Mutex
	instances map[string]*Instance // by ID
	routes    map[string]Route     // by name
	lbs       map[string]*LoadBalancer
	// lbData is what another API keeps on a load balancer beside its
	// generic spec (ProviderData), by load balancer name.
	lbData     map[string]any
	vips       map[netip.Addr]string // VIP -> load balancer name
	nextVIP    netip.Addr
	vipPool    netip.Prefix // SetVIPPool; zero: defaultVIPPool
	afterPut   func(context.Context, LoadBalancer)
	nextPodNet int
	byName     map[string]string // name -> ID of the newest instance with it
	nextID     int
	settings   Settings
	limiter    *rate.Limiter
	calls      Calls
	callLog    []LoggedCall
}

// New returns an empty cloud in region with zones.
func New(region string, zones ...string) *Cloud {
	if region == "" {
		region = "sim-region-1"
	}
	if len(zones) == 0 {
		zones = []string{region + "a", region + "b", region + "c"}
	}
	c := &Cloud{
		zones:     zones,
		region:    region,
		instances: map[string]*Instance{},
		routes:    map[string]Route{},
		lbs:       map[string]*LoadBalancer{},
		lbData:    map[string]any{},
		vips:      map[netip.Addr]string{},
		byName:    map[string]string{},
		limiter:   rate.NewLimiter(rate.Inf, 1),
		calls:     Calls{ByOp: map[string]int64{}},
	}
	return c
}

// Region is the cloud's one region.
func (c *Cloud) Region() string { return c.region }

// Zones are the region's zones, in the order instances are spread over
// them.
func (c *Cloud) Zones() []string { return slices.Clone(c.zones) }

// Handler returns the cloud's HTTP API.
func (c *Cloud) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/instances", c.api("ListInstances", c.listInstances))
	mux.HandleFunc("POST /v1/instances", c.api("CreateInstance", c.createInstance))
	mux.HandleFunc("GET /v1/instances/{id}", c.api("GetInstance", c.getInstance))
	mux.HandleFunc("POST /v1/instances/{id}/{action}", c.api("InstanceAction", c.instanceAction))
	mux.HandleFunc("POST /v1/batch/instances", c.api("BatchGetInstances", c.batchGet))
	mux.HandleFunc("GET /v1/instances/{id}/pod-cidrs", c.api("GetPodCIDRs", c.podCIDRs))
	mux.HandleFunc("GET /v1/routes", c.api("ListRoutes", c.listRoutes))
	mux.HandleFunc("POST /v1/routes", c.api("CreateRoute", c.createRoute))
	mux.HandleFunc("DELETE /v1/routes/{name}", c.api("DeleteRoute", c.deleteRoute))
	mux.HandleFunc("GET /v1/loadbalancers", c.api("ListLoadBalancers", c.listLoadBalancers))
	mux.HandleFunc("GET /v1/loadbalancers/{name}", c.api("GetLoadBalancer", c.getLoadBalancer))
	mux.HandleFunc("PUT /v1/loadbalancers/{name}", c.api("PutLoadBalancer", c.servePutLoadBalancer))
	mux.HandleFunc("PUT /v1/loadbalancers/{name}/backends", c.api("SetBackends", c.putBackends))
	mux.HandleFunc("DELETE /v1/loadbalancers/{name}", c.api("DeleteLoadBalancer", c.deleteLoadBalancer))
	mux.HandleFunc("GET /v1/settings", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, c.Settings()) })
	mux.HandleFunc("PUT /v1/settings", c.putSettings)
	mux.HandleFunc("GET /v1/calls/log", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, c.CallLog()) })
	mux.HandleFunc("GET /v1/calls", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, c.Calls()) })
	mux.HandleFunc("DELETE /v1/calls", func(w http.ResponseWriter, r *http.Request) {
		c.ResetCalls()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Serve listens on addr ("127.0.0.1:0" picks a port) and serves the API until
// ctx ends. It returns the base URL once listening.
func (c *Cloud) Serve(ctx context.Context, addr string) (string, error) {
	return ListenAndServe(ctx, addr, c.Handler())
}

// ListenAndServe listens on addr and serves h until ctx ends, as Serve does
// the cloud's own API: for a handler that serves more APIs over the cloud
// (package awsemu's). It returns the base URL once listening.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("sim cloud: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// SetInternalIPv4Range makes instances created from now on take their IPv4
// InternalIP from prefix (e.g. a loopback range, so that `outrigger dev` can
// serve each simulated node's ports on this machine).
func (c *Cloud) SetInternalIPv4Range(prefix netip.Prefix) error {
	if !prefix.Addr().Is4() {
		return fmt.Errorf("instance address range %s is not IPv4", prefix)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.internalV4 = prefix
	return nil
}

// SetSettings replaces the behaviour knobs.
func (c *Cloud) SetSettings(s Settings) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settings = s
	if s.RateLimit > 0 {
		burst := s.RateBurst
		if burst <= 0 {
			burst = max(1, int(s.RateLimit))
		}
		c.limiter = rate.NewLimiter(rate.Limit(s.RateLimit), burst)
	} else {
		c.limiter = rate.NewLimiter(rate.Inf, 1)
	}
}

// Settings returns the behaviour knobs.
func (c *Cloud) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

// Calls returns a copy of the call counters.
func (c *Cloud) Calls() Calls {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	out.ByOp = make(map[string]int64, len(c.calls.ByOp))
	for k, v := range c.calls.ByOp {
		out.ByOp[k] = v
	}
	return out
}

// ResetCalls zeroes the call counters and empties the call log.
func (c *Cloud) ResetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = Calls{ByOp: map[string]int64{}}
	c.callLog = nil
}

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

// api wraps a handler with the call counter, the fault knobs and the call
// log.
func (c *Cloud) api(op string, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if c.Gate(w, r, op, func(status int, code, message string) {
			writeJSON(w, status, Error{Code: code, Message: message})
		}) {
			return
		}
		object, mutating := mutatedObject(r)
		h(w, r)
		if r.Header.Get(AdminHeader) == "" {
			c.mu.Lock()
			if len(c.callLog) == callLogSize {
				c.callLog = append(c.callLog[:0], c.callLog[callLogSize/2:]...)
			}
			c.callLog = append(c.callLog, LoggedCall{Op: op, Mutating: mutating, Object: object, Caller: r.Header.Get(CallerHeader), Start: start, End: time.Now()})
			c.mu.Unlock()
		}
	}
}

// mutatedObject names the object a state-changing request acts on; reads
// are not mutating. A route's name is in the body of its create request:
// it is read and put back for the handler.
func mutatedObject(r *http.Request) (string, bool) {
	if r.Method == http.MethodGet {
		return "", false
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/loadbalancers/"):
		return "loadbalancer/" + r.PathValue("name"), true
	case strings.HasPrefix(r.URL.Path, "/v1/routes/"):
		return "route/" + r.PathValue("name"), true
	case r.URL.Path == "/v1/routes":
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var route struct {
			Name string `json:"name"`
		}
		if err != nil || json.Unmarshal(body, &route) != nil {
			return "route/", true
		}
		return "route/" + route.Name, true
	case strings.HasPrefix(r.URL.Path, "/v1/instances/"):
		return "instance/" + r.PathValue("id"), true
	case r.URL.Path == "/v1/instances":
		return "instance/", true
	case r.URL.Path == "/v1/batch/instances":
		return "", false // a read with a body
	}
	return "", false
}

// objectOf names the one object a call reads, changes or deletes, as
// HangObjects does; "" for a call on no one object.
func objectOf(r *http.Request) string {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/loadbalancers/"):
		return "loadbalancer/" + r.PathValue("name")
	case strings.HasPrefix(r.URL.Path, "/v1/routes/"):
		return "route/" + r.PathValue("name")
	case strings.HasPrefix(r.URL.Path, "/v1/instances/"):
		return "instance/" + r.PathValue("id")
	}
	return ""
}

// CallLog returns the newest calls answered, oldest first.
func (c *Cloud) CallLog() []LoggedCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]LoggedCall(nil), c.callLog...)
}

// Gate counts a call to op and applies the fault knobs to it. It returns true
// when the call must not proceed: the client gave up, or a fault was answered
// through fail (status 429 with Retry-After set when throttled, 500 for an
// injected error), so that each API answers faults in its own format. It is
// exported for the APIs served over the cloud (package awsemu's), whose
// calls are counted and faulted as the cloud's own.
func (c *Cloud) Gate(w http.ResponseWriter, r *http.Request, op string, fail func(status int, code, message string)) bool {
	if r.Header.Get(AdminHeader) != "" {
		return false
	}
	// The body is read before any delay: net/http notices a client that
	// hung up (and cancels r.Context()) only once the body has been read,
	// so a request with an unread body would sit out its latency or hang
	// unnoticed and then act on behalf of a caller that gave up long ago.
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return true
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	c.mu.Lock()
	s := c.settings
	allowed := c.limiter.Allow()
	c.calls.Total++
	c.calls.ByOp[op]++
	if !allowed {
		c.calls.Throttled++
	}
	c.mu.Unlock()

	if s.Latency.Duration > 0 {
		t := time.NewTimer(s.Latency.Duration)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return true
		}
	}
	if s.Hang {
		<-r.Context().Done()
		return true
	}
	if o := objectOf(r); o != "" && slices.Contains(s.HangObjects, o) {
		<-r.Context().Done()
		return true
	}
	if s.HangFor.Duration > 0 {
		t := time.NewTimer(s.HangFor.Duration)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return true
		}
	}
	if !allowed {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int((s.RetryAfter.Duration+time.Second-1)/time.Second))))
		fail(http.StatusTooManyRequests, "Throttled", "request rate exceeded")
		return true
	}
	if s.ErrorRate > 0 && rand.Float64() < s.ErrorRate {
		fail(http.StatusInternalServerError, "InternalError", "injected fault")
		return true
	}
	return false
}

func (c *Cloud) listInstances(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, c.List())
}

func (c *Cloud) getInstance(w http.ResponseWriter, r *http.Request) {
	in, ok := c.Get(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{Code: CodeInstanceNotFound, Message: fmt.Sprintf("instance %q not found", r.PathValue("id"))})
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (c *Cloud) createInstance(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	in, err := c.Create(req)
	switch {
	case errors.Is(err, ErrQuotaExceeded):
		writeJSON(w, http.StatusForbidden, Error{Code: "QuotaExceeded", Message: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
	default:
		writeJSON(w, http.StatusCreated, in)
	}
}

func (c *Cloud) instanceAction(w http.ResponseWriter, r *http.Request) {
	in, ok := c.Get(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{Code: CodeInstanceNotFound, Message: fmt.Sprintf("instance %q not found", r.PathValue("id"))})
		return
	}
	var state string
	switch r.PathValue("action") {
	case "start":
		state = StateRunning
	case "stop":
		state = StateStopped
	case "terminate":
		state = StateTerminated
	default:
		writeJSON(w, http.StatusNotFound, Error{Code: "NotFound", Message: "unknown action " + strconv.Quote(r.PathValue("action")) + ": use start, stop or terminate"})
		return
	}
	out, err := c.SetState(in.ID, state)
	if err != nil {
		writeJSON(w, http.StatusConflict, Error{Code: "Conflict", Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Cloud) batchGet(w http.ResponseWriter, r *http.Request) {
	var req BatchGetRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	c.mu.Lock()
	resp := BatchGetResponse{Instances: make([]Instance, 0, len(req.IDs)+len(req.Names))}
	for _, id := range req.IDs {
		if in, ok := c.instances[id]; ok {
			resp.Instances = append(resp.Instances, *in)
		}
	}
	for _, name := range req.Names {
		if id, ok := c.byName[name]; ok {
			resp.Instances = append(resp.Instances, *c.instances[id])
		}
	}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (c *Cloud) putSettings(w http.ResponseWriter, r *http.Request) {
	var s Settings
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: err.Error()})
		return
	}
	if s.ErrorRate < 0 || s.ErrorRate > 1 || s.RateLimit < 0 || s.MaxInstances < 0 || s.MaxRoutes < 0 || s.MaxLoadBalancers < 0 || s.HangFor.Duration < 0 || s.RetryAfter.Duration < 0 {
		writeJSON(w, http.StatusBadRequest, Error{Code: "BadRequest", Message: "errorRate must be in [0,1]; rateLimit, maxInstances, maxRoutes, maxLoadBalancers, hangFor and retryAfter must not be negative"})
		return
	}
	c.SetSettings(s)
	writeJSON(w, http.StatusOK, s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
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

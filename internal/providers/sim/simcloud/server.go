package simcloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
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

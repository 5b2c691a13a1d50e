// Package simapi is the sim cloud's API as its clients see it: the types
// of its JSON bodies, its headers and error codes, and an HTTP client. The
// sim provider needs only this; package simcloud serves the API.
package simapi

import "time"

// Instance states.
const (
	StateRunning    = "running"
	StateStopped    = "stopped"
	StateTerminated = "terminated"
)

// Address is one address of an instance; Type is a Kubernetes NodeAddressType
// (InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS).
type Address struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// Instance is a virtual machine in the simulated cloud.
type Instance struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Type      string            `json:"type"`
	Zone      string            `json:"zone"`
	Region    string            `json:"region"`
	Addresses []Address         `json:"addresses"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels,omitempty"`
	// PodCIDRs are assigned by the cloud on first request (CloudAllocator).
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

// CreateRequest creates an instance. Empty fields are filled in by the cloud:
// an ID, type "sim.small", the first zone, and dual-stack internal addresses.
type CreateRequest struct {
	Name      string            `json:"name"`
	Type      string            `json:"type,omitempty"`
	Zone      string            `json:"zone,omitempty"`
	Addresses []Address         `json:"addresses,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// BatchGetRequest looks instances up by ID and by name in one call.
type BatchGetRequest struct {
	IDs   []string `json:"ids,omitempty"`
	Names []string `json:"names,omitempty"`
}

// BatchGetResponse holds the instances found; IDs and names not found are
// simply absent.
type BatchGetResponse struct {
	Instances []Instance `json:"instances"`
}

// Settings are the cloud's behaviour knobs. They apply to every API call
// except the admin endpoints (settings, calls) and requests marked with the
// AdminHeader.
type Settings struct {
	// Latency is added to every call.
	Latency Duration `json:"latency"`
	// RateLimit is the calls per second the cloud accepts before answering
	// 429 with Retry-After; 0 means unlimited.
	RateLimit float64 `json:"rateLimit"`
	// RateBurst is the burst above RateLimit. Default: RateLimit.
	RateBurst int `json:"rateBurst"`
	// ErrorRate is the fraction of calls answered with 500, 0 to 1.
	ErrorRate float64 `json:"errorRate"`
	// Hang makes every call block until the client gives up.
	Hang bool `json:"hang"`
	// HangFor makes every call block this long (or until the client gives
	// up) before it is answered: a cloud API stalling for half a minute.
	HangFor Duration `json:"hangFor,omitzero"`
	// HangObjects makes calls on these objects block until the client
	// gives up, and leaves every other call alone: a cloud API stalling
	// on a few load balancers. An object is named as in the call log:
	// "loadbalancer/NAME", "route/NAME" or "instance/ID"; a call on one
	// object reads, changes or deletes it (lists and the EC2 API are not
	// on one object).
	HangObjects []string `json:"hangObjects,omitempty"`
	// RetryAfter is the hint sent with 429 answers (Retry-After, whole
	// seconds, at least 1). Default 1s.
	RetryAfter Duration `json:"retryAfter,omitzero"`
	// MaxInstances is the instance quota; 0 means unlimited.
	MaxInstances int `json:"maxInstances"`
	// MaxRoutes is the route table's size; 0 means unlimited.
	MaxRoutes int `json:"maxRoutes"`
	// MaxLoadBalancers is the load balancer quota; 0 means unlimited.
	MaxLoadBalancers int `json:"maxLoadBalancers"`
	// LoadBalancerProtocols are the listener protocols load balancers
	// take, as clouds without UDP load balancers: a load balancer with
	// another is refused as invalid. Empty: TCP, UDP and SCTP.
	LoadBalancerProtocols []string `json:"loadBalancerProtocols,omitempty"`
}

// Calls counts the API calls the cloud answered (throttled and failed ones
// included), by operation.
type Calls struct {
	Total     int64            `json:"total"`
	Throttled int64            `json:"throttled"`
	ByOp      map[string]int64 `json:"byOp"`
}

// CallerHeader carries the identity of the client process (an Outrigger
// replica) on every request, so the cloud's call log can tell replicas apart.
const CallerHeader = "X-Sim-Caller"

// LoggedCall is one entry of the cloud's call log, as the cloud saw the
// call: from the moment the request arrived to the moment the answer was
// written. Calls answered with a fault (throttled, injected error, the
// client gone) are not logged: they neither read nor changed anything.
type LoggedCall struct {
	Op string `json:"op"`
	// Mutating is set for calls that change state: creating, changing or
	// deleting an instance, route or load balancer.
	Mutating bool `json:"mutating,omitempty"`
	// Object is the resource a mutating call changes: "loadbalancer/NAME",
	// "route/NAME" or "instance/ID".
	Object string    `json:"object,omitempty"`
	Caller string    `json:"caller"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
}

// AdminHeader marks a request from an operator (the CLI, a test harness): it
// is neither counted nor subject to faults.
const AdminHeader = "X-Sim-Admin"

// IfTagsHeader makes a change to a load balancer or a route conditional on
// its tags: the header holds URL-encoded key=value pairs, every one of
// which an existing object must carry (a missing tag reads as ""), or the
// cloud answers 412 CodeTagsMismatch and changes nothing. A client proves
// with it that what it changes is its own, in the same request.
const IfTagsHeader = "X-Sim-If-Tags"

// Error codes the cloud answers with. A missing object is always a typed
// code, never a bare 404: a client reads "gone" only from these.
const (
	CodeInstanceNotFound     = "InstanceNotFound"
	CodeLoadBalancerNotFound = "LoadBalancerNotFound"
	CodeTagsMismatch         = "TagsMismatch"
)

// Error is the body of every non-2xx answer.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Duration is a time.Duration that reads and writes as "200ms" in JSON.
type Duration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

package simapi

// Route is an entry of the cloud's route table: traffic for Destination goes
// to the instance named Target.
type Route struct {
	Name        string `json:"name"`
	Destination string `json:"destination"`
	Target      string `json:"target"`
	// Blackhole is set by the cloud when Target no longer exists: the route
	// drops its traffic.
	Blackhole bool `json:"blackhole,omitempty"`
	// Tags record who made the route (a cluster): a client deletes only
	// routes whose tags it proves (IfTagsHeader).
	Tags map[string]string `json:"tags,omitempty"`
}

// LoadBalancer is an L4 load balancer: a VIP with listeners forwarding to
// the backends' node ports.
type LoadBalancer struct {
	Name string `json:"name"`
	// VIP is allocated by the cloud from its pool on creation and kept for
	// the load balancer's life.
	VIP string `json:"vip"`
	LoadBalancerSpec
}

// LoadBalancerSpec is what a client asks for; PUT replaces it whole.
type LoadBalancerSpec struct {
	// Tags record who made the load balancer (a cluster, a Service): a
	// client changes only load balancers whose tags it proves
	// (IfTagsHeader).
	Tags map[string]string `json:"tags,omitempty"`
	// RequestedIP is honoured on creation when it is in the pool and free.
	RequestedIP string     `json:"requestedIP,omitempty"`
	Listeners   []Listener `json:"listeners"`
	Backends    []Backend  `json:"backends"`
	// SourceRanges restrict clients; empty allows all.
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// SessionAffinity is "None" or "ClientIP".
	SessionAffinity string `json:"sessionAffinity,omitempty"`
	// HealthCheckPort is probed on every backend (0: the listener's port).
	HealthCheckPort int32 `json:"healthCheckPort,omitempty"`
	// IdleTimeoutSeconds closes idle connections.
	IdleTimeoutSeconds int `json:"idleTimeoutSeconds,omitempty"`
}

// Listener forwards Protocol traffic on Port to each backend's NodePort.
type Listener struct {
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
	NodePort int32  `json:"nodePort"`
}

// Backend is one node behind the load balancer.
type Backend struct {
	Node    string `json:"node"`
	Address string `json:"address"`
}
